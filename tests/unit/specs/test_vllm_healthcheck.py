"""The vLLM container's healthcheck: the probe itself, run as Docker runs it (its argv, in a child process), against a
real HTTP server that answers like vLLM, answers an error, or never answers (a hung engine)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.aic.stack.plugins.module_utils.container_specs import vllm_healthcheck, vllm_spec
from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan


class Engine(http.server.ThreadingHTTPServer):
    """An OpenAI-style completions endpoint whose behaviour the test picks: ok, empty, error or hang."""

    daemon_threads = True

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.requests = []
        self.release = threading.Event()
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, body))
        behaviour = self.server.behaviour
        if behaviour == "hang":
            self.server.release.wait(30)
            return
        status, payload = {
            "ok": (200, {"choices": [{"text": "!"}]}),
            "empty": (200, {"choices": []}),
            "error": (500, {"error": "engine dead"}),
        }[behaviour]
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def engine(request):
    server = Engine(request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def probe(engine, timeout=10, interval=3):
    """Run the healthcheck's CMD as Docker would, with this interpreter as the container's python3."""
    plan, _dummy = build_plan({"aic_vllm_healthcheck_timeout": timeout, "aic_vllm_healthcheck_interval": interval})
    test = vllm_healthcheck(plan, engine.server_address[1])["test"]
    assert test[:2] == ["CMD", "python3"]
    start = time.monotonic()
    proc = subprocess.run([sys.executable, *test[2:]], capture_output=True, text=True, timeout=60, check=False)
    return proc, time.monotonic() - start


@pytest.mark.parametrize("engine", ["ok"], indirect=True)
def test_a_completing_engine_is_healthy_and_asked_for_one_token_of_the_served_model(engine):
    proc, _dummy = probe(engine)
    assert proc.returncode == 0, proc.stderr
    [(path, body)] = engine.requests
    assert path == "/v1/completions"
    assert body["model"] == "tiny-llama" and body["max_tokens"] == 1


@pytest.mark.parametrize("engine", ["empty", "error"], indirect=True)
def test_an_engine_that_completes_nothing_is_unhealthy(engine):
    proc, _dummy = probe(engine)
    assert proc.returncode != 0


@pytest.mark.parametrize("engine", ["hang"], indirect=True)
def test_a_hung_engine_fails_the_probe_within_the_timeout_minus_the_interval(engine):
    proc, took = probe(engine, timeout=4, interval=2)
    assert proc.returncode != 0
    assert "timed out" in proc.stderr
    # Its completion gets timeout - interval (2 s): a hang that began just after the last run passed waits up to the
    # interval for the next one, which then reports it, with a reason, within the timeout of the hang.
    assert 2 <= took < 4


def test_the_probe_gets_the_timeout_minus_the_interval_and_honours_the_plan():
    plan, _dummy = build_plan(
        {
            "aic_vllm_healthcheck_interval": 7,
            "aic_vllm_healthcheck_timeout": 12,
            "aic_vllm_healthcheck_retries": 4,
            "aic_vllm_healthcheck_start_period": 90,
        }
    )
    check = vllm_healthcheck(plan, 8001)
    assert check["test"][-3:] == ["http://127.0.0.1:8001/v1/completions", "tiny-llama", "5"]
    assert (check["interval"], check["timeout"], check["retries"], check["start_period"]) == ("7s", "12s", 4, "90s")
    assert vllm_spec(plan)["healthcheck"]["test"][-3] == "http://127.0.0.1:8000/v1/completions"


def test_the_default_reports_a_hang_within_ten_seconds():
    plan, _dummy = build_plan({})
    check = vllm_healthcheck(plan, 8000)
    assert (check["interval"], check["timeout"], check["retries"]) == ("3s", "10s", 1)
    assert check["test"][-1] == "7"


@pytest.mark.parametrize(("interval", "timeout"), [(5, 5), (10, 4)])
def test_a_timeout_not_above_the_interval_is_refused_naming_both(interval, timeout):
    with pytest.raises(Exception, match="aic_vllm_healthcheck_timeout.*aic_vllm_healthcheck_interval"):
        build_plan({"aic_vllm_healthcheck_interval": interval, "aic_vllm_healthcheck_timeout": timeout})


def test_interval_zero_means_explicitly_no_healthcheck():
    plan, _dummy = build_plan({"aic_vllm_healthcheck_interval": 0})
    assert vllm_spec(plan)["healthcheck"] == {"test": ["NONE"]}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("aic_vllm_healthcheck_interval", -1),
        ("aic_vllm_healthcheck_timeout", 0),
        ("aic_vllm_healthcheck_retries", 0),
        ("aic_vllm_healthcheck_start_period", "soon"),
    ],
)
def test_bad_healthcheck_settings_are_rejected_by_name(name, value):
    with pytest.raises(Exception, match=name):
        build_plan({name: value})
