"""aic.stack.lmcache_health against a real local LMCache-like HTTP server."""

from __future__ import annotations

import time

from ansible_collections.aic.stack.plugins.modules import lmcache_health

LMCACHE_FAMILIES = [
    "lmcache_mp_l1_capacity_bytes",
    "lmcache_mp_l1_usage_ratio",
    "lmcache_mp_num_hit_tokens",
    "lmcache_mp_num_retrieve_requests",
    "lmcache_mp_num_store_requests",
]


def _args(lmcache, **overrides):
    args = {"url": lmcache.url, "wait_timeout": 3, "request_timeout": 5}
    args.update(overrides)
    return args


def test_success(lmcache, run_module):
    result = run_module(lmcache_health, _args(lmcache))
    assert result.rc == 0, result.get("msg")
    assert result["changed"] is False
    assert result["url"] == lmcache.url
    assert result["metric_families"] == LMCACHE_FAMILIES
    assert isinstance(result["elapsed"], float) and result["elapsed"] < 3
    # /health is a 404 on LMCache: the module must only use /healthcheck.
    assert lmcache.server.paths == ["/healthcheck", "/metrics"]


def test_check_mode_still_runs_checks(lmcache, run_module):
    result = run_module(lmcache_health, _args(lmcache), check_mode=True)
    assert result.rc == 0, result.get("msg")
    assert result["changed"] is False
    assert lmcache.server.paths == ["/healthcheck", "/metrics"]


def test_waits_for_healthcheck(lmcache, run_module):
    lmcache.server.sequence_route("/healthcheck", [(503, "starting"), (200, '{"status":"healthy"}')])
    result = run_module(lmcache_health, _args(lmcache, wait_timeout=10))
    assert result.rc == 0, result.get("msg")
    assert len(lmcache.server.calls("/healthcheck")) == 2


def test_healthcheck_never_200_times_out(lmcache, run_module):
    lmcache.server.remove_route("/healthcheck")  # e.g. the port is some other service
    start = time.monotonic()
    result = run_module(lmcache_health, _args(lmcache, wait_timeout=3))
    took = time.monotonic() - start
    assert result.failed and result.rc == 1
    assert result["changed"] is False
    assert result["msg"].startswith(
        f"LMCache at {lmcache.url}/healthcheck: timed out after 3s waiting for GET /healthcheck to return 200"
    )
    assert 'last: HTTP 404: {"detail":"Not Found"}' in result["msg"]
    assert 2.9 <= took < 6
    assert "/metrics" not in lmcache.server.paths


def test_server_down(closed_port, run_module):
    url = f"http://127.0.0.1:{closed_port}"
    result = run_module(lmcache_health, {"url": url, "wait_timeout": 0})
    assert result.failed
    assert result["msg"].startswith(f"LMCache at {url}/healthcheck: timed out after 0s")
    assert "refused" in result["msg"].lower()


def test_missing_metrics(lmcache, run_module):
    lmcache.server.route("/metrics", 200, "")
    result = run_module(lmcache_health, _args(lmcache))
    assert result.failed
    assert result["msg"] == f"LMCache at {lmcache.url}/metrics: no lmcache_mp_ metrics (found 0 families)"
    assert "metric_families" not in result


def test_only_foreign_metrics(lmcache, run_module):
    lmcache.server.route(
        "/metrics",
        200,
        "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
        "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 8.0e+08\n"
        "# TYPE lmcache_hit_rate gauge\nlmcache_hit_rate 0.5\n",
    )
    result = run_module(lmcache_health, _args(lmcache))
    assert result["msg"] == f"LMCache at {lmcache.url}/metrics: no lmcache_mp_ metrics (found 2 families)"


def test_custom_metric_prefix(lmcache, run_module):
    result = run_module(lmcache_health, _args(lmcache, metric_prefix="lmcache_mp_l1_"))
    assert result.rc == 0, result.get("msg")
    assert result["metric_families"] == ["lmcache_mp_l1_capacity_bytes", "lmcache_mp_l1_usage_ratio"]


def test_metrics_http_error(lmcache, run_module):
    lmcache.server.route("/metrics", 500, "Internal Server Error")
    result = run_module(lmcache_health, _args(lmcache))
    assert result["msg"] == f"LMCache at {lmcache.url}/metrics: GET /metrics returned HTTP 500: Internal Server Error"


def test_missing_prometheus_client(lmcache, run_module, monkeypatch):
    monkeypatch.setattr(lmcache_health, "HAS_PROMETHEUS_CLIENT", False)
    result = run_module(lmcache_health, _args(lmcache))
    assert result.failed
    assert "Failed to import the required Python library (prometheus_client)" in result["msg"]
    assert lmcache.server.paths == []


def _l2_metrics(stored, hits, loaded):
    lines = ["# TYPE lmcache_mp_l1_usage_ratio gauge", "lmcache_mp_l1_usage_ratio 0.5"]
    for name, value in (
        ("lmcache_mp_l2_store_completed_objects_chunks_total", stored),
        ("lmcache_mp_lookup_hit_l2_tokens_total", hits),
        ("lmcache_mp_l2_prefetch_load_completed_chunks_total", loaded),
    ):
        if value is not None:
            lines += [f"# TYPE {name[:-6]} counter", f'{name}{{model_name="m"}} {value}']
    return "\n".join(lines) + "\n"


def test_l2_reads_ok_when_stored_chunks_come_back(lmcache, run_module):
    lmcache.server.route("/metrics", 200, _l2_metrics(12, 256, 2))
    result = run_module(lmcache_health, _args(lmcache, l2_reads="required"))
    assert result.rc == 0, result.get("msg")
    assert result["l2"] == {"stored_chunks": 12.0, "hit_tokens": 256.0, "loaded_chunks": 2.0, "reads_ok": True}


def test_l2_reads_stuck_at_zero_while_stores_grow_fails_naming_the_cause(lmcache, run_module):
    lmcache.server.route("/metrics", 200, _l2_metrics(30, 0, None))
    result = run_module(lmcache_health, _args(lmcache, l2_reads="required"))
    assert result.failed
    assert result["msg"].startswith(f"LMCache at {lmcache.url}/metrics: L2 reads stuck at zero while L2 stores grew")
    assert "30 chunks stored" in result["msg"]
    # Without the option the same metrics pass, and the counters are still reported.
    ignored = run_module(lmcache_health, _args(lmcache))
    assert ignored.rc == 0
    assert ignored["l2"]["reads_ok"] is False


def test_l2_nothing_stored_fails_when_required(lmcache, run_module):
    lmcache.server.route("/metrics", 200, _l2_metrics(None, None, None))
    result = run_module(lmcache_health, _args(lmcache, l2_reads="required"))
    assert result.failed
    assert "L2 stored 0 chunk(s), expected at least 1" in result["msg"]
