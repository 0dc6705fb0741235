"""Tests for plugins/module_utils/http.py and metrics.py, against a real local HTTP server."""

from __future__ import annotations

import pathlib
import time

import pytest

from ansible_collections.aic.stack.plugins.module_utils import http, metrics

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
VLLM_METRICS = (FIXTURES / "vllm_metrics.txt").read_text()
LMCACHE_METRICS = (FIXTURES / "lmcache_metrics.txt").read_text()

# -- metrics ---------------------------------------------------------------------------------


def test_parse_returns_families_with_normalised_counter_names():
    families = metrics.parse(VLLM_METRICS)
    names = [f.name for f in families]
    assert len(families) == 18
    assert "vllm:prefix_cache_hits" in names  # `_total` stripped from the family name
    assert "vllm:prefix_cache_hits_total" not in names
    by_name = {f.name: f for f in families}
    assert by_name["vllm:prefix_cache_hits"].type == "counter"
    assert by_name["vllm:e2e_request_latency_seconds"].type == "histogram"


def test_sample_names_keep_exposed_names():
    names = metrics.sample_names(VLLM_METRICS)
    assert "vllm:prefix_cache_hits_total" in names
    assert "vllm:e2e_request_latency_seconds_bucket" in names
    assert "vllm:e2e_request_latency_seconds_count" in names
    assert "vllm:prefix_cache_hits" not in names


def test_families_with_prefix_sorted():
    assert metrics.families_with_prefix(VLLM_METRICS, "vllm:") == [
        "vllm:cache_config_info",
        "vllm:e2e_request_latency_seconds",
        "vllm:generation_tokens",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:prefix_cache_hits",
        "vllm:prefix_cache_queries",
        "vllm:prompt_tokens",
        "vllm:request_success",
        "vllm:time_to_first_token_seconds",
    ]
    assert metrics.families_with_prefix(LMCACHE_METRICS, "lmcache_mp_")[0] == "lmcache_mp_l1_capacity_bytes"
    assert metrics.families_with_prefix(LMCACHE_METRICS, "vllm:") == []
    # Already-parsed families are accepted too.
    assert metrics.families_with_prefix(metrics.parse(LMCACHE_METRICS), "python_") == ["python_gc_objects_collected"]


def test_sample_value():
    assert metrics.sample_value(VLLM_METRICS, "vllm:prefix_cache_hits_total") == 128.0
    assert (
        metrics.sample_value(VLLM_METRICS, "vllm:prefix_cache_hits_total", {"engine": "0", "model_name": "tiny-llama"})
        == 128.0
    )
    # labels=None sums over all samples (3 finished_reason values)
    assert metrics.sample_value(VLLM_METRICS, "vllm:request_success_total") == 16.0
    # label subset selects
    assert metrics.sample_value(VLLM_METRICS, "vllm:request_success_total", {"finished_reason": "length"}) == 13.0
    # label values are compared as strings
    assert metrics.sample_value(VLLM_METRICS, "vllm:prefix_cache_queries_total", {"engine": 0}) == 512.0
    # counter family name (no _total) works as well
    assert metrics.sample_value(VLLM_METRICS, "vllm:prefix_cache_hits") == 128.0
    assert metrics.sample_value(VLLM_METRICS, "vllm:e2e_request_latency_seconds_count") == 16.0
    assert metrics.sample_value(LMCACHE_METRICS, "lmcache_mp_l1_usage_ratio") == 0.0
    assert metrics.sample_value(VLLM_METRICS, "vllm:does_not_exist") is None
    assert metrics.sample_value(VLLM_METRICS, "vllm:request_success_total", {"engine": "1"}) is None


def test_parse_rejects_garbage():
    with pytest.raises(metrics.MetricsParseError, match="invalid Prometheus exposition text"):
        metrics.parse("<html><body>502 Bad Gateway</body></html>\n")


def test_parse_empty_text_has_no_families():
    assert metrics.parse("") == []
    assert metrics.families_with_prefix("", "vllm:") == []


# -- http ------------------------------------------------------------------------------------


def test_request_returns_any_status_with_body(http_server):
    http_server.route("/ok", 200, "fine")
    http_server.route("/busy", 503, '{"detail":"loading model"}', "application/json")
    resp = http.request(http.join_url(http_server.url + "/", "/ok"))
    assert (resp.status, resp.body, resp.ok) == (200, "fine", True)
    resp = http.request(http_server.url + "/busy")
    assert resp.status == 503 and not resp.ok
    assert resp.describe() == 'HTTP 503: {"detail":"loading model"}'
    assert http.request(http_server.url + "/nope").status == 404


def test_request_posts_json(http_server):
    http_server.json_route("/echo", {"ok": True}, method="POST")
    resp = http.request(http_server.url + "/echo", method="POST", json_data={"a": [1, 2]})
    assert resp.json() == {"ok": True}
    (call,) = http_server.calls("/echo")
    assert call.json() == {"a": [1, 2]}
    assert call.headers["Content-Type"] == "application/json"


def test_request_invalid_json_message(http_server):
    http_server.route("/html", 200, "<html>oops</html>", "text/html")
    with pytest.raises(ValueError, match=r"invalid JSON from http://127\.0\.0\.1:\d+/html .*<html>oops</html>"):
        http.request(http_server.url + "/html").json()


def test_request_connection_refused(closed_port):
    url = f"http://127.0.0.1:{closed_port}/health"
    with pytest.raises(http.HttpRequestError) as excinfo:
        http.request(url, timeout=2)
    assert excinfo.value.url == url
    assert "refused" in excinfo.value.reason.lower()


def test_wait_until_deadline_and_interval():
    calls = []

    def probe(remaining):
        calls.append(remaining)
        return False, None, f"not yet ({len(calls)})"

    start = time.monotonic()
    res = http.wait_until(probe, 0.5, interval=0.1)
    elapsed = time.monotonic() - start
    assert not res.ok
    assert 0.45 <= elapsed < 1.5
    assert 4 <= res.attempts <= 7
    assert res.last_error == f"not yet ({res.attempts})"
    assert calls[0] <= 0.5


def test_wait_until_zero_timeout_probes_once():
    res = http.wait_until(lambda remaining: (False, None, "nope"), 0, interval=5)
    assert (res.ok, res.attempts, res.last_error) == (False, 1, "nope")


def test_wait_until_returns_value_on_success():
    seq = iter([False, False, True])
    res = http.wait_until(lambda remaining: (next(seq), "v", "e"), 5, interval=0.01)
    assert (res.ok, res.value, res.attempts, res.last_error) == (True, "v", 3, None)


def test_wait_for_status_polls_until_200(http_server):
    http_server.sequence_route("/health", [(503, "starting"), (503, "starting"), (200, "")])
    res = http.wait_for_status(http_server.url + "/health", timeout=5, interval=0.05, request_timeout=2)
    assert res.ok and res.attempts == 3
    assert res.value.status == 200


def test_wait_for_status_times_out_with_last_error(http_server):
    http_server.route("/health", 500, "engine dead")
    res = http.wait_for_status(http_server.url + "/health", timeout=0.3, interval=0.05, request_timeout=2)
    assert not res.ok
    assert res.attempts >= 2
    assert res.last_error == "HTTP 500: engine dead"
