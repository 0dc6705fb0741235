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


def probe(engine, timeout=10):
    """Run the healthcheck's CMD as Docker would, with this interpreter as the container's python3."""
    plan, _ = build_plan({"aic_vllm_healthcheck_timeout": timeout})
    test = vllm_healthcheck(plan, engine.server_address[1])["test"]
    assert test[:2] == ["CMD", "python3"]
    start = time.monotonic()
    proc = subprocess.run([sys.executable, *test[2:]], capture_output=True, text=True, timeout=60, check=False)
    return proc, time.monotonic() - start


@pytest.mark.parametrize("engine", ["ok"], indirect=True)
def test_a_completing_engine_is_healthy_and_asked_for_one_token_of_the_served_model(engine):
    proc, _ = probe(engine)
    assert proc.returncode == 0, proc.stderr
    [(path, body)] = engine.requests
    assert path == "/v1/completions"
    assert body["model"] == "tiny-llama" and body["max_tokens"] == 1


@pytest.mark.parametrize("engine", ["empty", "error"], indirect=True)
def test_an_engine_that_completes_nothing_is_unhealthy(engine):
    proc, _ = probe(engine)
    assert proc.returncode != 0


@pytest.mark.parametrize("engine", ["hang"], indirect=True)
def test_a_hung_engine_is_unhealthy_within_the_timeout(engine):
    proc, took = probe(engine, timeout=3)
    assert proc.returncode != 0
    assert "timed out" in proc.stderr
    # Its own timeout is one second under Docker's, so the probe reports the hang itself, with a reason.
    assert took < 3


def test_the_probe_gives_itself_a_second_less_than_docker_and_honours_the_plan():
    plan, _ = build_plan(
        {
            "aic_vllm_healthcheck_interval": 7,
            "aic_vllm_healthcheck_timeout": 5,
            "aic_vllm_healthcheck_retries": 4,
            "aic_vllm_healthcheck_start_period": 90,
        }
    )
    check = vllm_healthcheck(plan, 8001)
    assert check["test"][-3:] == ["http://127.0.0.1:8001/v1/completions", "tiny-llama", "4"]
    assert (check["interval"], check["timeout"], check["retries"], check["start_period"]) == ("7s", "5s", 4, "90s")
    assert vllm_spec(plan)["healthcheck"]["test"][-3] == "http://127.0.0.1:8000/v1/completions"


def test_interval_zero_means_explicitly_no_healthcheck():
    plan, _ = build_plan({"aic_vllm_healthcheck_interval": 0})
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
