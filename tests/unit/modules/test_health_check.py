"""Tests for plugins/module_utils/health_check.py (the shape the health modules share), against a real local
HTTP server (``http.server``)."""

from __future__ import annotations

import pathlib
import re

import pytest

from ansible_collections.aic.stack.plugins.module_utils import health_check, http
from ansible_collections.aic.stack.plugins.module_utils.health_check import Check, CheckFailed, fetch, run

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
LMCACHE_METRICS = (FIXTURES / "lmcache_metrics.txt").read_text()


def failure(call, *args, **kwargs):
    """The message of the :class:`CheckFailed` that ``call(*args, **kwargs)`` raises."""
    with pytest.raises(CheckFailed) as excinfo:
        call(*args, **kwargs)
    return str(excinfo.value)


# -- fetch -----------------------------------------------------------------------------------


def test_fetch_returns_the_response_of_a_200(http_server):
    http_server.route("/x", 200, "fine")
    resp, error = fetch(http_server.url + "/x", "GET /x", 2)
    assert (resp.status, resp.body, error) == (200, "fine", None)


def test_fetch_names_the_request_and_the_status_of_any_other_answer(http_server):
    http_server.route("/x", 503, '{"detail":"loading"}', "application/json")
    assert fetch(http_server.url + "/x", "GET /x", 2) == (None, 'GET /x returned HTTP 503: {"detail":"loading"}')


def test_fetch_names_the_request_and_why_nothing_answered(closed_port):
    resp, error = fetch(f"http://127.0.0.1:{closed_port}/x", "GET /x", 2)
    assert resp is None
    assert error.startswith("GET /x failed: ") and "refused" in error.lower()


def test_fetch_posts_json(http_server):
    http_server.json_route("/echo", {"ok": True}, method="POST")
    resp, error = fetch(http_server.url + "/echo", "POST /echo", 2, method="POST", json_data={"a": 1})
    assert error is None and resp.json() == {"ok": True}
    (call,) = http_server.calls("/echo")
    assert call.json() == {"a": 1}


# -- Check -----------------------------------------------------------------------------------


def test_messages_name_the_component_and_the_url_and_the_remark_when_there_is_one():
    assert Check("X", "http://h:1", 2).message("http://h:1/a", "broken") == "X at http://h:1/a: broken"
    remarks = iter(["its container healthcheck says unhealthy", None])
    check = Check("X", "http://h:1/", 2, remark=lambda: next(remarks))
    assert check.url("/a") == "http://h:1/a"
    assert failure(check.fail, check.url("/a"), "broken") == (
        "X at http://h:1/a: broken (its container healthcheck says unhealthy)"
    )
    assert failure(check.fail, "http://h:1/", "broken") == "X at http://h:1/: broken"


def test_wait_polls_until_the_url_answers_200(http_server):
    http_server.sequence_route("/health", [(503, "starting"), (503, "starting"), (200, "up")])
    resp = Check("X", http_server.url, 2).wait("/health", 5, interval=0.05)
    assert (resp.status, resp.body) == (200, "up")
    assert len(http_server.calls("/health")) == 3


def test_wait_times_out_naming_the_url_the_attempts_and_the_last_answer(http_server):
    http_server.route("/health", 500, "engine dead")
    message = failure(Check("X", http_server.url, 2).wait, "/health", 0.3, interval=0.05)
    attempts = len(http_server.calls("/health"))
    assert attempts >= 2
    assert message == (
        f"X at {http_server.url}/health: timed out after 0.3s waiting for GET /health to return 200 "
        f"({attempts} attempts, last: HTTP 500: engine dead)"
    )


def test_wait_timeout_zero_probes_once(closed_port):
    url = f"http://127.0.0.1:{closed_port}"
    message = failure(Check("X", url, 2).wait, "/healthcheck", 0)
    assert re.fullmatch(
        rf"X at {re.escape(url)}/healthcheck: timed out after 0s waiting for GET /healthcheck to return 200 "
        r"\(1 attempts, last: .*refused.*\)",
        message,
        flags=re.IGNORECASE,
    )


def test_wait_stops_at_once_when_waiting_cannot_help(http_server):
    http_server.route("/health", 503, "loading")
    reasons = iter([None, "its container exited (exit code 3)"])
    check = Check("X", http_server.url, 2, remark=lambda: "its container healthcheck says unhealthy")
    message = failure(check.wait, "/health", 60, interval=0.01, abort=lambda: next(reasons))
    assert len(http_server.calls("/health")) == 2
    assert message == (
        f"X at {http_server.url}/health: not up after 0s and waiting cannot help: its container exited (exit code 3) "
        "(last GET /health: HTTP 503: loading) (its container healthcheck says unhealthy)"
    )


def test_request_returns_a_200_and_fails_naming_method_path_and_url(http_server):
    http_server.json_route("/v1/completions", {"choices": []}, method="POST")
    check = Check("X", http_server.url, 2)
    assert check.request("/v1/completions", method="POST", json_data={"p": 1}).json() == {"choices": []}
    assert http_server.calls("/v1/completions")[0].json() == {"p": 1}
    assert failure(check.request, "/v1/models") == (
        f'X at {http_server.url}/v1/models: GET /v1/models returned HTTP 404: {{"detail":"Not Found"}}'
    )


def test_metrics_parses_and_keeps_the_families_with_the_prefix(http_server):
    http_server.route("/metrics", 200, LMCACHE_METRICS, "text/plain; version=0.0.4; charset=utf-8")
    families, matching = Check("X", http_server.url, 2).metrics("lmcache_mp_")
    assert matching == sorted(matching) and matching[0] == "lmcache_mp_l1_capacity_bytes"
    assert all(name.startswith("lmcache_mp_") for name in matching)
    assert len(families) > len(matching)  # python_*, process_* ... as well


def test_metrics_fails_without_a_family_of_the_prefix(http_server):
    http_server.route("/metrics", 200, LMCACHE_METRICS)
    families = len(health_check.parse(LMCACHE_METRICS))
    assert failure(Check("X", http_server.url, 2).metrics, "vllm:") == (
        f"X at {http_server.url}/metrics: no vllm: metrics (found {families} families)"
    )


def test_metrics_fails_on_text_that_does_not_parse(http_server):
    http_server.route("/metrics", 200, "this is { not prometheus\n")
    message = failure(Check("X", http_server.url, 2).metrics, "x_")
    assert message.startswith(f"X at {http_server.url}/metrics: invalid Prometheus exposition text")


def test_metrics_fails_on_an_error_status(http_server):
    http_server.route("/metrics", 500, "boom")
    assert failure(Check("X", http_server.url, 2).metrics, "x_") == (
        f"X at {http_server.url}/metrics: GET /metrics returned HTTP 500: boom"
    )


# -- run -------------------------------------------------------------------------------------


class FakeModule:
    def __init__(self):
        self.exited = None

    def exit_json(self, **kwargs):
        self.exited = ("exit", kwargs)
        raise SystemExit(0)

    def fail_json(self, **kwargs):
        self.exited = ("fail", kwargs)
        raise SystemExit(1)


def test_run_exits_with_the_result_and_elapsed():
    module = FakeModule()

    def checks(result):
        result["seen"] = 1

    with pytest.raises(SystemExit):
        run(module, {"changed": False}, checks)
    kind, out = module.exited
    assert kind == "exit" and out["changed"] is False and out["seen"] == 1
    assert isinstance(out["elapsed"], float) and 0 <= out["elapsed"] < 5


def test_run_fails_with_the_message_and_what_was_gathered():
    module = FakeModule()

    def checks(result):
        result["models"] = ["m"]
        Check("X", "http://h:1", 2).fail("http://h:1/v1", "broken")

    with pytest.raises(SystemExit):
        run(module, {"changed": False}, checks, start=0.0)
    kind, out = module.exited
    assert kind == "fail"
    assert out["msg"] == "X at http://h:1/v1: broken"
    assert out["models"] == ["m"] and out["changed"] is False
    assert out["elapsed"] > 0  # counted from the given start


# -- http.per_try_timeout ----------------------------------------------------------------------


def test_per_try_timeout_is_cut_to_the_time_left_but_never_below_a_second():
    assert http.per_try_timeout(10, 60, 30.0) == 10.0
    assert http.per_try_timeout(10, 60, 2.5) == 2.5
    assert http.per_try_timeout(10, 60, 0.0) == 1.0
    assert http.per_try_timeout(10, 0, 0.0) == 10  # no wait: the request timeout as it is
