"""The log_stream role's streamer (roles/log_stream/files/aic_log_stream.py).

Its pure parts (timestamps, the duplicate filter, where to resume a file) are tested directly; start/stop/status and
the reattach logic run the real script against a fake docker CLI driven by a JSON file, so no Docker is needed.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "roles" / "log_stream" / "files" / "aic_log_stream.py"
T0 = 1_800_000_000 * 10**9  # 2027-01-15T08:00:00Z


# -- timestamps -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2027-01-15T08:00:00.123456789Z", T0 + 123456789),
        # Go's RFC3339Nano trims trailing zeros of the fraction, and drops it when it is zero.
        ("2027-01-15T08:00:00.12Z", T0 + 120_000_000),
        ("2027-01-15T08:00:00Z", T0),
        ("2027-01-15T09:30:00.5+01:30", T0 + 500_000_000),
        ("2027-01-15T06:00:00-02:00", T0),
        (b"2027-01-15T08:00:00.000000001Z", T0 + 1),
    ],
)
def test_parse_timestamp(streamer, text, expected):
    assert streamer.parse_timestamp(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "tick",
        "2027-01-15 08:00:00Z",
        "2027-13-01T00:00:00Z",
        "2027-02-30T00:00:00Z",
        "2027-01-15T24:00:00Z",
        "2027-01-15T08:00:00.1234567891Z",
        "2027-01-15T08:00:00",
        b"\xff\xfe",
    ],
)
def test_parse_timestamp_rejects(streamer, text):
    assert streamer.parse_timestamp(text) is None


def test_trimmed_fractions_compare_as_times_not_strings(streamer):
    # As strings ".12Z" > ".123Z" ('Z' sorts after '3'); as times it is earlier.
    earlier, later = "2027-01-15T08:00:00.12Z", "2027-01-15T08:00:00.123Z"
    assert earlier > later
    assert streamer.parse_timestamp(earlier) < streamer.parse_timestamp(later)


def test_line_timestamp(streamer):
    assert streamer.line_timestamp(b"2027-01-15T08:00:00.5Z tick 1\n") == T0 + 500_000_000
    assert streamer.line_timestamp(b"2027-01-15T08:00:00.5Z \n") == T0 + 500_000_000  # an empty line
    assert streamer.line_timestamp(b"2027-01-15T08:00:00.5Z") == T0 + 500_000_000
    assert streamer.line_timestamp("2027-01-15T08:00:00Z text") == T0
    # docker CLI messages in the merged output carry no timestamp.
    assert streamer.line_timestamp(b"Error response from daemon: No such container: x\n") is None
    assert streamer.line_timestamp(b"tick 2027-01-15T08:00:00Z\n") is None


def test_since_and_rfc3339_round_trip(streamer):
    ns = T0 + 7
    assert streamer.format_since(ns) == "1800000000.000000007"
    assert streamer.format_timestamp(ns) == "2027-01-15T08:00:00.000000007Z"
    assert streamer.parse_timestamp(streamer.format_timestamp(ns)) == ns


def test_newest_timestamp_tolerates_out_of_order_lines(streamer):
    lines = [b"2027-01-15T08:00:00.3Z b", b"2027-01-15T08:00:00.2Z a", b"garbage", b""]
    assert streamer.newest_timestamp(lines) == T0 + 300_000_000
    assert streamer.newest_timestamp([b"garbage"]) is None


# -- the duplicate filter -------------------------------------------------------------------------------------


def test_first_session_starts_at_the_container_start(streamer):
    line_filter = streamer.LineFilter()
    assert line_filter.attach() is None  # no --since: from the container's start
    assert line_filter.accept(T0 + 2)
    assert line_filter.accept(T0 + 1)  # within a session, docker's order is kept (stdout/stderr interleave)
    assert line_filter.accept(T0 + 2)
    assert not line_filter.accept(None)
    assert line_filter.newest == T0 + 2


def test_reattach_skips_what_was_written(streamer):
    line_filter = streamer.LineFilter()
    line_filter.attach()
    for ts in (T0 + 1, T0 + 2, T0 + 3):
        assert line_filter.accept(ts)
    # docker logs --since is inclusive and a restarted container's log keeps its previous run.
    assert line_filter.attach() == streamer.format_since(T0 + 3)
    assert [line_filter.accept(ts) for ts in (T0 + 2, T0 + 3, T0 + 4, T0 + 5)] == [False, False, True, True]
    assert line_filter.attach() == streamer.format_since(T0 + 5)


def test_a_filter_resumed_from_a_file_skips_its_lines(streamer):
    line_filter = streamer.LineFilter(T0 + 10)
    assert line_filter.attach() == streamer.format_since(T0 + 10)
    assert not line_filter.accept(T0 + 10)
    assert line_filter.accept(T0 + 11)


# -- resuming a file ------------------------------------------------------------------------------------------


def test_complete_length(streamer):
    assert streamer.complete_length(b"") == 0
    assert streamer.complete_length(b"partial") == 0
    assert streamer.complete_length(b"a\nb\n") == 4
    assert streamer.complete_length(b"a\nb") == 2


def test_resume_point(streamer, tmp_path):
    path = tmp_path / "s.log"
    assert streamer.resume_point(str(path)) == (None, None)
    complete = b"2027-01-15T08:00:00.1Z a\n2027-01-15T08:00:00.3Z c\n2027-01-15T08:00:00.2Z b\n"
    path.write_bytes(complete + b"2027-01-15T08:00:00.9Z cut mid-wri")
    # The newest complete line counts; the incomplete last line is dropped (it is fetched again).
    assert streamer.resume_point(str(path)) == (T0 + 300_000_000, len(complete))


def test_resume_point_reads_only_the_tail(streamer, tmp_path):
    path = tmp_path / "s.log"
    lines = [f"{streamer.format_timestamp(T0 + i)} line {i}\n".encode() for i in range(200)]
    path.write_bytes(b"".join(lines))
    newest, keep = streamer.resume_point(str(path), tail_bytes=500)
    assert (newest, keep) == (T0 + 199, path.stat().st_size)


# -- pidfiles -------------------------------------------------------------------------------------------------


def test_a_locked_pidfile_is_running_and_an_unlocked_one_is_stale(streamer, tmp_path):
    state_dir = str(tmp_path)
    assert streamer.read_state(state_dir, "c")["running"] is False
    paths = streamer.state_paths(state_dir, "c")
    fd = streamer.lock_pidfile(paths["pidfile"])
    try:
        streamer.write_json_atomic(paths["meta"], {"pid": os.getpid(), "file": "/x/f.log", "job_id": "j"})
        state = streamer.read_state(state_dir, "c")
        assert state["running"] and state["pid"] == os.getpid() and state["job_id"] == "j"
        # A second streamer for the same container does not get the lock.
        assert streamer.lock_pidfile(paths["pidfile"], wait=0.1) is None
    finally:
        os.close(fd)
    state = streamer.read_state(state_dir, "c")
    assert state["running"] is False and state["pid"] == os.getpid()  # stale: nobody holds it


def test_stale_pidfiles_are_removed_and_held_ones_kept(streamer, tmp_path):
    """A streamer killed without its cleanup (a reboot) leaves its pidfile: removed, whichever container it was for
    (one the plan no longer has too); a live streamer's is kept."""
    state_dir = str(tmp_path)
    held = streamer.lock_pidfile(streamer.state_paths(state_dir, "live")["pidfile"])
    for name in ("gone-1", "gone-2"):
        stale = streamer.lock_pidfile(streamer.state_paths(state_dir, name)["pidfile"])
        os.close(stale)  # its holder died
    (tmp_path / "live.json").write_text("{}")
    try:
        assert streamer.remove_stale_pidfiles(state_dir) == ["gone-1", "gone-2"]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["live.json", "live.pid"]
        assert streamer.read_state(state_dir, "live")["running"] is True
        assert streamer.remove_stale_pidfiles(state_dir) == []
    finally:
        os.close(held)
    assert streamer.remove_stale_pidfiles(str(tmp_path / "missing")) == []


def test_metadata_of_another_process_is_not_trusted(streamer, tmp_path):
    paths = streamer.state_paths(str(tmp_path), "c")
    fd = streamer.lock_pidfile(paths["pidfile"])
    try:
        streamer.write_json_atomic(paths["meta"], {"pid": 1, "file": "/old.log", "job_id": "old"})
        state = streamer.read_state(str(tmp_path), "c")
        assert state["running"] and state["file"] is None and state["job_id"] is None
    finally:
        os.close(fd)


def test_pid_alive(streamer):
    assert streamer.pid_alive(os.getpid())
    assert not streamer.pid_alive(None)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not streamer.pid_alive(child.pid)


SLOW_EXIT = textwrap.dedent(
    """\
    import os, signal, sys, time
    sys.path.insert(0, os.path.dirname(sys.argv[1]))
    import aic_log_stream as streamer
    paths = streamer.state_paths(sys.argv[2], "c")
    fd = streamer.lock_pidfile(paths["pidfile"])
    streamer.write_json_atomic(paths["meta"], {"pid": os.getpid(), "file": "/x/f.log", "job_id": "j"})
    def on_term(signum, frame):
        os.unlink(paths["pidfile"])
        os.close(fd)  # the lock goes first, as in the streamer's finally
        time.sleep(float(sys.argv[3]))  # then the interpreter takes its time to exit
        os._exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print("ready", flush=True)
    while True:
        time.sleep(1)
    """
)


def test_stop_returns_after_the_process_is_gone_not_when_its_lock_is(streamer, tmp_path):
    # CI9: stop reported "stopped" while the streamer's pid was still alive (it had released its lock and was exiting).
    child = subprocess.Popen(
        [sys.executable, "-c", SLOW_EXIT, str(SCRIPT), str(tmp_path), "0.8"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        results, signalled, stuck = streamer.stop_streamers(str(tmp_path), ["c"], timeout=5)
        assert signalled == {"c": child.pid} and not stuck
        (state,) = results
        assert state["stopped"] and not state["killed"] and not state["running"]
        assert not streamer.pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()


# -- the script against a fake docker CLI ---------------------------------------------------------------------

FAKE_DOCKER = textwrap.dedent(
    """\
    import json, os, sys, time

    STATE = os.environ["FAKE_DOCKER_STATE"]

    def load():
        with open(STATE) as handle:
            return json.load(handle)

    def rfc3339(ns):
        seconds, fraction = divmod(ns, 10**9)
        frac = ("%09d" % fraction).rstrip("0")
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + ("." + frac if frac else "") + "Z"

    args = sys.argv[1:]
    state = load()
    if not state["exists"]:
        sys.stderr.write("Error: No such container: %s\\n" % args[-1])
        sys.exit(1)
    if args[:2] == ["container", "inspect"]:
        print(state["id"], "true" if state["running"] else "false", state["started"])
        sys.exit(0)
    assert args[0] == "logs" and "--timestamps" in args, args
    since = None
    if "--since" in args:
        seconds, _, fraction = args[args.index("--since") + 1].partition(".")
        since = int(seconds) * 10**9 + int(fraction.ljust(9, "0"))
    sent = 0
    key = (state["id"], state["started"])
    while True:
        for ts, text in state["lines"][sent:]:
            if since is None or ts >= since:  # docker's --since is inclusive
                sys.stdout.write("%s %s\\n" % (rfc3339(ts), text))
        sys.stdout.flush()
        sent = len(state["lines"])
        if "--follow" not in args or not state["running"]:
            break
        time.sleep(0.05)
        state = load()
        if (state["id"], state["started"]) != key or not state["exists"]:
            break
    """
)


class FakeContainer:
    def __init__(self, tmp_path):
        self.state_file = tmp_path / "fake-docker.json"
        self.docker = tmp_path / "docker"
        self.docker.write_text(f"#!{sys.executable}\n" + FAKE_DOCKER)
        self.docker.chmod(0o755)
        self.state = {"exists": True, "id": "c1", "running": True, "started": "s1", "lines": []}
        self.save()

    def save(self):
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state))
        tmp.replace(self.state_file)

    def emit(self, *texts, start):
        self.state["lines"] += [[T0 + (start + i) * 1000, text] for i, text in enumerate(texts)]
        self.save()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    container = FakeContainer(tmp_path)
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(container.state_file))
    yield container
    # Never leave a streamer behind, whatever the test did.
    script(tmp_path, "stop", "--state-dir", str(tmp_path / "state"), "--container", "c", "--timeout", "5")


def script(tmp_path, *args):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
        check=False,
    )
    return result.returncode, (json.loads(result.stdout) if result.stdout.strip() else None), result.stderr


def start(tmp_path, fake, file="out/c-stream.log", job="j1"):
    rc, out, err = script(
        tmp_path,
        "start",
        "--state-dir",
        str(tmp_path / "state"),
        "--container",
        "c",
        "--service",
        "svc",
        "--job-id",
        job,
        "--file",
        str(tmp_path / file),
        "--docker",
        str(fake.docker),
        "--poll",
        "0.05",
        "--timeout",
        "5",
    )
    assert rc == 0, (out, err)
    return out


def wait_lines(path, count, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            break
        time.sleep(0.02)
    time.sleep(0.2)  # nothing more may come
    return [line.split(" ", 1)[1] for line in path.read_text().splitlines()]


def test_start_follow_restart_recreate_stop(streamer, tmp_path, fake):
    log = tmp_path / "out" / "c-stream.log"
    fake.emit("a0", "a1", "a2", start=0)
    first = start(tmp_path, fake)
    assert first["changed"] and first["running"] and first["job_id"] == "j1"
    assert streamer.pid_alive(first["pid"])
    assert wait_lines(log, 3) == ["a0", "a1", "a2"]

    # Following: new lines arrive in the same session.
    fake.emit("a3", start=3)
    assert wait_lines(log, 4) == ["a0", "a1", "a2", "a3"]

    # A second start with the same container and file keeps the streamer.
    again = start(tmp_path, fake)
    assert not again["changed"] and again["pid"] == first["pid"]

    # Restart: the container's log keeps its first run; docker logs --since resends the last line.
    fake.state.update(started="s2")
    fake.emit("b0", "b1", start=10)
    assert wait_lines(log, 6) == ["a0", "a1", "a2", "a3", "b0", "b1"]

    # Removed for a while, then recreated under the same name: a new log.
    fake.state.update(exists=False)
    fake.save()
    time.sleep(0.3)
    fake.state.update(exists=True, id="c2", started="s3", lines=[])
    fake.emit("c0", "c1", start=20)
    assert wait_lines(log, 8) == ["a0", "a1", "a2", "a3", "b0", "b1", "c0", "c1"]
    stamps = [streamer.line_timestamp(line) for line in log.read_bytes().splitlines()]
    assert stamps == sorted(set(stamps))

    rc, out, _dummy = script(tmp_path, "stop", "--state-dir", str(tmp_path / "state"), "--container", "c")
    assert rc == 0 and out["changed"]
    (stopped,) = out["streamers"]
    assert stopped["stopped"] and not stopped["killed"] and stopped["pid"] == first["pid"]
    assert stopped["size"] == log.stat().st_size and stopped["file"] == str(log)
    assert out["summary"] == [f"svc: {log} ({log.stat().st_size} bytes; stopped)"]
    assert not streamer.pid_alive(first["pid"])
    assert not (tmp_path / "state" / "c.pid").exists()

    rc, out, _dummy = script(tmp_path, "stop", "--state-dir", str(tmp_path / "state"), "--container", "c")
    assert rc == 0 and not out["changed"]


def test_a_new_streamer_continues_the_file_without_duplicates(streamer, tmp_path, fake):
    log = tmp_path / "out" / "c-stream.log"
    fake.emit("a0", "a1", start=0)
    start(tmp_path, fake)
    assert wait_lines(log, 2) == ["a0", "a1"]
    script(tmp_path, "stop", "--state-dir", str(tmp_path / "state"), "--container", "c")
    # Lines written while no streamer ran, and a line cut by a crash at the end of the file.
    fake.emit("a2", start=2)
    with log.open("ab") as handle:
        handle.write(b"2027-01-15T08:00:00.000002Z a2 cut")
    second = start(tmp_path, fake)
    assert second["changed"]
    assert wait_lines(log, 3) == ["a0", "a1", "a2"]


def test_another_file_replaces_the_streamer(streamer, tmp_path, fake):
    fake.emit("a0", start=0)
    first = start(tmp_path, fake, file="job1/c-stream.log", job="j1")
    second = start(tmp_path, fake, file="job2/c-stream.log", job="j2")
    assert second["changed"] and second["pid"] != first["pid"]
    assert second["replaced"]["pid"] == first["pid"] and second["replaced"]["stopped"]
    assert not streamer.pid_alive(first["pid"])
    assert wait_lines(tmp_path / "job2" / "c-stream.log", 1) == ["a0"]
    rc, out, _dummy = script(tmp_path, "status", "--state-dir", str(tmp_path / "state"), "--container", "c")
    assert rc == 0 and [(s["running"], s["job_id"]) for s in out["streamers"]] == [(True, "j2")]


def test_a_missing_container_is_waited_for(streamer, tmp_path, fake):
    log = tmp_path / "out" / "c-stream.log"
    fake.state.update(exists=False)
    fake.save()
    assert start(tmp_path, fake)["changed"]
    time.sleep(0.3)
    fake.state.update(exists=True)
    fake.emit("late", start=0)
    assert wait_lines(log, 1) == ["late"]


def test_status_of_nothing(streamer, tmp_path):
    rc, out, _dummy = script(tmp_path, "status", "--state-dir", str(tmp_path / "none"), "--container", "x")
    assert rc == 0
    assert out["streamers"] == [{"container": "x", "running": False, "pid": None, "size": None}]
