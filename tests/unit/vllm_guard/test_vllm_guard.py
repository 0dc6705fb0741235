"""roles/vllm/files/aic_vllm_guard.py, the vLLM container's main process, run as Docker runs it: a real child
process in place of vLLM, a real HTTP server in place of LMCache's /metrics (whose process start time the test sets).
"""

from __future__ import annotations

import http.server
import importlib.util
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
GUARD = REPO / "roles" / "vllm" / "files" / "aic_vllm_guard.py"
spec = importlib.util.spec_from_file_location("aic_vllm_guard", GUARD)
guard_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(guard_module)


class LMCache(http.server.ThreadingHTTPServer):
    """LMCache's HTTP port as far as the guard looks: /metrics with process_start_time_seconds (None: no answer)."""

    daemon_threads = True

    def __init__(self):
        self.started = time.time() - 100
        self.body = None
        super().__init__(("127.0.0.1", 0), Metrics)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Metrics(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.server.started is None:
            self.send_response(503)
            self.end_headers()
            return
        body = self.server.body or (
            "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
            "# TYPE process_start_time_seconds gauge\n"
            f"process_start_time_seconds {self.server.started:.2f}\n"
            "# TYPE lmcache_mp_l1_usage_bytes gauge\nlmcache_mp_l1_usage_bytes 0.0\n"
        )
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def lmcache():
    server = LMCache()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def vllm(tmp_path, body):
    """A stand-in for vLLM's command: a Python child running ``body`` (it may write marks under tmp_path)."""
    script = tmp_path / "vllm.py"
    script.write_text(textwrap.dedent(body))
    return [sys.executable, str(script), str(tmp_path)]


def start_guard(lmcache, command, *extra):
    return subprocess.Popen(
        [sys.executable, str(GUARD), "--lmcache-url", lmcache.url, "--interval", "0.2", "--grace", "1", *extra, "--"]
        + command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path, timeout=20):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (not reaped by its parent) is dead too.
    return pathlib.Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


def test_vllm_exits_by_itself_and_the_guard_exits_with_its_status(lmcache, tmp_path):
    proc = start_guard(lmcache, vllm(tmp_path, "import sys, time; time.sleep(0.5); sys.exit(3)"))
    assert proc.wait(timeout=20) == 3


def test_an_lmcache_that_started_before_vllm_is_left_alone(lmcache, tmp_path):
    proc = start_guard(lmcache, vllm(tmp_path, "import sys, time; time.sleep(2); sys.exit(0)"))
    assert proc.wait(timeout=20) == 0
    assert "aic-vllm-guard" not in proc.stderr.read()


def test_an_lmcache_that_restarted_under_vllm_ends_vllm_and_its_children(lmcache, tmp_path):
    """vLLM ignores SIGTERM (it is hung) and has a child of its own: SIGKILL to the whole group after the grace."""
    body = """
        import pathlib, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        pathlib.Path(sys.argv[1], "pids").write_text(f"{child.pid}")
        time.sleep(60)
    """
    proc = start_guard(lmcache, vllm(tmp_path, body))
    wait_for(tmp_path / "pids")
    engine = int((tmp_path / "pids").read_text())
    time.sleep(0.5)
    assert proc.poll() is None
    restarted = time.time()
    lmcache.started = restarted
    assert proc.wait(timeout=20) == guard_module.RESTART_EXIT
    took = time.time() - restarted
    assert took < 0.2 + 1 + 3, f"vLLM ended {took:.1f} s after LMCache restarted"
    message = proc.stderr.read()
    assert f"the LMCache server at {lmcache.url} started at {restarted:.2f}, after this vLLM" in message
    deadline = time.monotonic() + 5
    while alive(engine) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(engine), "vLLM's own child survived the guard"


def test_lmcache_down_then_back_with_a_new_start_time_ends_vllm(lmcache, tmp_path):
    body = "import pathlib, sys, time; pathlib.Path(sys.argv[1], 'up').write_text(''); time.sleep(60)"
    proc = start_guard(lmcache, vllm(tmp_path, body))
    # The guard notes its start before it starts vLLM: a start time set after this is after it, however slowly a
    # busy machine started the guard.
    wait_for(tmp_path / "up")
    time.sleep(0.5)
    lmcache.started = None  # down: no answer, nothing to decide
    time.sleep(1)
    assert proc.poll() is None
    lmcache.started = time.time()
    assert proc.wait(timeout=20) == guard_module.RESTART_EXIT


def test_docker_stop_reaches_vllm_alone_which_drains_and_the_guard_keeps_its_status(lmcache, tmp_path):
    """SIGTERM goes to vLLM only (its engine, another process of its group, is vLLM's to stop), and an LMCache that
    restarts meanwhile changes nothing: the drain completes."""
    body = """
        import pathlib, signal, subprocess, sys, time
        engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        def drain(signum, frame):
            time.sleep(1)
            pathlib.Path(sys.argv[1], "drained").write_text(str(engine.poll()))
            engine.kill()
            sys.exit(0)
        signal.signal(signal.SIGTERM, drain)
        pathlib.Path(sys.argv[1], "up").write_text("")
        time.sleep(60)
    """
    proc = start_guard(lmcache, vllm(tmp_path, body))
    wait_for(tmp_path / "up")
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    lmcache.started = time.time()
    assert proc.wait(timeout=20) == 0
    # The engine was still running when vLLM drained: the signal was not sent to the group.
    assert (tmp_path / "drained").read_text() == "None"


def test_a_stop_that_arrives_while_a_probe_waits_wins_over_what_the_probe_saw():
    """docker stop's SIGTERM lands during the probe of an LMCache that restarted meanwhile (a busy machine answered
    the probe late): vLLM gets the SIGTERM and drains; the guard does not end it for the restart."""
    guard = None

    def probe(url):
        guard.on_signal(signal.SIGTERM, None)
        return time.time() + 100

    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    guard = guard_module.Guard(command, "http://127.0.0.1:9", interval=0.1, grace=1, probe=probe)
    # vLLM's own exit (the SIGTERM the guard passed on), not the guard's restart status.
    assert guard.run() == 128 + signal.SIGTERM


def test_a_vllm_killed_by_a_signal_exits_like_a_shell_says():
    command = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    assert guard_module.Guard(command, "http://127.0.0.1:9", probe=lambda url: None).run() == 128 + 9


def test_lmcache_started_at_reads_the_process_collector(lmcache):
    lmcache.started = 1796195287.46
    assert guard_module.lmcache_started_at(lmcache.url) == pytest.approx(1796195287.46)
    lmcache.body = "# TYPE lmcache_mp_l1_usage_bytes gauge\nlmcache_mp_l1_usage_bytes 0.0\n"
    assert guard_module.lmcache_started_at(lmcache.url) is None
    lmcache.body = "not prometheus { text"
    assert guard_module.lmcache_started_at(lmcache.url) is None
    lmcache.body, lmcache.started = None, None
    assert guard_module.lmcache_started_at(lmcache.url) is None


def test_lmcache_started_at_of_nothing_listening_is_none(closed_port):
    assert guard_module.lmcache_started_at(f"http://127.0.0.1:{closed_port}", timeout=2) is None


def test_the_command_comes_after_the_separator():
    args = guard_module.parse(
        ["--lmcache-url", "http://aic-lmcache:8080", "--", "python3", "-m", "vllm", "--port", "1"]
    )
    assert args.command == ["python3", "-m", "vllm", "--port", "1"]
    assert (args.interval, args.grace) == (5.0, 0.0)
    with pytest.raises(SystemExit):
        guard_module.parse(["--lmcache-url", "http://aic-lmcache:8080", "--"])
