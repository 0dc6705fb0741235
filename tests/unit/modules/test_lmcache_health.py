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


def _l2_metrics(stored, hits, loaded, submitted=None, requested=None, hit_any=None, adapters=1, alloc_failures=None):
    lines = ["# TYPE lmcache_mp_l1_usage_ratio gauge", "lmcache_mp_l1_usage_ratio 0.5"]
    if adapters is not None:
        lines += [
            "# TYPE lmcache_mp_l2_store_adapters gauge",
            f'lmcache_mp_l2_store_adapters{{l1_tag="_default",state="active"}} {adapters}',
            'lmcache_mp_l2_store_adapters{l1_tag="_default",state="draining"} 0',
        ]
    if alloc_failures is not None:
        lines += [
            "# TYPE lmcache_mp_l1_allocation_failure_chunks counter",
            f'lmcache_mp_l1_allocation_failure_chunks_total{{during="l1_store"}} {alloc_failures}',
        ]
    for name, value in (
        ("lmcache_mp_l2_store_completed_objects_chunks_total", stored),
        ("lmcache_mp_l2_store_submitted_objects_chunks_total", submitted),
        ("lmcache_mp_lookup_hit_l2_tokens_total", hits),
        ("lmcache_mp_l2_prefetch_load_completed_chunks_total", loaded),
        ("lmcache_mp_lookup_requested_tokens_total", requested),
        ("lmcache_mp_lookup_hit_tokens_total", hit_any),
    ):
        if value is not None:
            lines += [f"# TYPE {name[:-6]} counter", f'{name}{{model_name="m"}} {value}']
    return "\n".join(lines) + "\n"


def test_l2_reads_ok_when_stored_chunks_come_back(lmcache, run_module):
    lmcache.server.route("/metrics", 200, _l2_metrics(12, 256, 2, submitted=12, requested=3328, hit_any=512))
    result = run_module(lmcache_health, _args(lmcache, l2_reads="required"))
    assert result.rc == 0, result.get("msg")
    assert result["l2"] == {
        "submitted_chunks": 12.0,
        "stored_chunks": 12.0,
        "hit_tokens": 256.0,
        "loaded_chunks": 2.0,
        "lookup_requested_tokens": 3328.0,
        "lookup_hit_tokens": 512.0,
        "reads_ok": True,
    }


def test_l2_reads_stuck_at_zero_while_l1_hits_names_the_nixl_failure(lmcache, run_module):
    lmcache.server.route("/metrics", 200, _l2_metrics(30, 0, None, submitted=30, requested=1024, hit_any=256))
    result = run_module(lmcache_health, _args(lmcache, l2_reads="required"))
    assert result.failed
    assert result["msg"].startswith(f"LMCache at {lmcache.url}/metrics: L2 reads stuck at zero while L2 stores grew")
    assert "30 chunks stored" in result["msg"]
    assert "silent NIXL failure" in result["msg"]
    assert "IPC" not in result["msg"]
    # Without the option the same metrics pass, and the counters are still reported.
    ignored = run_module(lmcache_health, _args(lmcache))
    assert ignored.rc == 0
    assert ignored["l2"]["reads_ok"] is False


def test_no_lookup_ever_hitting_names_unshared_ipc(lmcache, run_module):
    # Real numbers from a local stack whose vLLM ran with its own IPC namespace.
    lmcache.server.route("/metrics", 200, _l2_metrics(24, 0, None, submitted=24, requested=3328, hit_any=0))
    result = run_module(lmcache_health, _args(lmcache, l2_reads="required"))
    assert result.failed
    assert "every LMCache lookup missed (3328 tokens requested, 0 hit in L1 or L2)" in result["msg"]
    assert "does not share LMCache's IPC namespace" in result["msg"]


def test_l2_writes_failing_name_the_l2_directory(lmcache, run_module):
    # Real numbers from a local stack whose L2 directory was made immutable: 24 submitted, none stored.
    lmcache.server.route("/metrics", 200, _l2_metrics(None, 0, None, submitted=24, requested=3328, hit_any=0))
    result = run_module(lmcache_health, _args(lmcache, l2_reads="required"))
    assert result.failed
    assert "L2 writes fail: 24 chunk(s) submitted to L2, 0 stored" in result["msg"]
    assert "L2 directory is not writable" in result["msg"]


def test_l2_nothing_stored_fails_when_required(lmcache, run_module):
    lmcache.server.route("/metrics", 200, _l2_metrics(None, None, None))
    result = run_module(lmcache_health, _args(lmcache, l2_reads="required"))
    assert result.failed
    assert "L2 stored 0 chunk(s), expected at least 1" in result["msg"]
    assert "never overflowed L1" in result["msg"]


def test_no_active_l2_adapter_is_named(lmcache, run_module):
    lmcache.server.route("/metrics", 200, _l2_metrics(None, None, None, requested=512, hit_any=0, adapters=0))
    result = run_module(lmcache_health, _args(lmcache, l2_reads="required"))
    assert result.failed
    assert "no active L2 adapter" in result["msg"]


def test_unshared_ipc_with_l1_stuck_full_and_nothing_in_l2_names_the_ipc_namespace(lmcache, run_module):
    # Real numbers from a local stack whose vLLM ran in its own IPC namespace: L1 filled, never drained to L2.
    lmcache.server.route("/metrics", 200, _l2_metrics(None, None, None, requested=3072, hit_any=0, alloc_failures=16))
    result = run_module(lmcache_health, _args(lmcache, l2_reads="required"))
    assert result.failed
    assert "nothing reached L2 (0 chunks submitted; 16 L1 allocation failures)" in result["msg"]
    assert "does not share LMCache's IPC namespace" in result["msg"]
