"""Counter reads from real exposition text, deltas and hit rates (zero denominators included)."""

from __future__ import annotations

import pytest

from ansible_collections.aic.stack.plugins.plugin_utils.cliff import counters as cliff_counters

# Shapes copied from a live vLLM 0.32 (cpu) and lmcache 0.5.6 MP server on this machine.
VLLM_TEXT = """\
# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny-llama"} 5000.0
vllm:prefix_cache_queries_total{engine="1",model_name="tiny-llama"} 1000.0
vllm:prefix_cache_queries_created{engine="0",model_name="tiny-llama"} 1.796003189657036e+09
# HELP vllm:prefix_cache_hits Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny-llama"} 1500.0
vllm:prefix_cache_hits_total{engine="1",model_name="tiny-llama"} 0.0
# HELP vllm:external_prefix_cache_queries External prefix cache queries.
# TYPE vllm:external_prefix_cache_queries counter
vllm:external_prefix_cache_queries_total{engine="0",model_name="tiny-llama"} 4500.0
# HELP vllm:external_prefix_cache_hits External prefix cache hits.
# TYPE vllm:external_prefix_cache_hits counter
vllm:external_prefix_cache_hits_total{engine="0",model_name="tiny-llama"} 900.0
"""

LMCACHE_TEXT = """\
# TYPE lmcache_mp_lookup_requested_tokens_total counter
lmcache_mp_lookup_requested_tokens_total{cache_salt="",model_name="m"} 4000.0
# TYPE lmcache_mp_lookup_hit_l1_tokens_total counter
lmcache_mp_lookup_hit_l1_tokens_total{cache_salt="",model_name="m"} 1000.0
# TYPE lmcache_mp_lookup_hit_l2_tokens_total counter
lmcache_mp_lookup_hit_l2_tokens_total{cache_salt="",model_name="m"} 2000.0
# TYPE lmcache_mp_l1_eviction_loop_ticks_total counter
lmcache_mp_l1_eviction_loop_ticks_total 72.0
# TYPE lmcache_mp_l2_store_completed_objects_chunks_total counter
lmcache_mp_l2_store_completed_objects_chunks_total{l2_name="nixl_store"} 12.0
lmcache_mp_l2_store_completed_objects_chunks_total{l2_name="other"} 3.0
# TYPE lmcache_mp_l2_usage_bytes gauge
lmcache_mp_l2_usage_bytes{l2_name="nixl_store"} 4096.0
"""


def test_read_vllm_counters_sums_engines():
    assert cliff_counters.read_named_counters(VLLM_TEXT, cliff_counters.VLLM_COUNTERS) == {
        "l1_cache_queries": 6000.0,
        "l1_cache_hits": 1500.0,
        "ext_cache_queries": 4500.0,
        "ext_cache_hits": 900.0,
    }


def test_missing_counters_read_zero():
    # OTel drops zero observations: a fresh LMCache exposes none of the lookup counters.
    assert cliff_counters.read_named_counters("", cliff_counters.LMCACHE_COUNTERS) == dict.fromkeys(
        cliff_counters.LMCACHE_COUNTERS, 0.0
    )


def test_drain_signature_skips_tick_counters():
    assert cliff_counters.drain_signature(LMCACHE_TEXT) == {
        "lmcache_mp_l2_store_completed_objects_chunks_total": 15.0,
        "lmcache_mp_l2_usage_bytes": 4096.0,
    }


def test_counter_delta():
    before = {"a": 10.0, "b": 5.0, "gone": 1.0}
    after = {"a": 25.0, "b": 2.0, "new": 4.0}
    # b went backwards (restart): its new value counts; missing keys are 0.
    assert cliff_counters.counter_delta(before, after) == {"a": 15.0, "b": 2.0, "gone": 0.0, "new": 4.0}
    assert cliff_counters.counter_delta({}, {}) == {}
    assert cliff_counters.counter_delta(None, {"a": 1}) == {"a": 1.0}


@pytest.mark.parametrize(
    ("hits", "queries", "pct"), [(50, 200, 25.0), (0, 0, 0.0), (5, 0, 0.0), (None, None, 0.0), (3, 3, 100.0)]
)
def test_hit_rate_pct(hits, queries, pct):
    assert cliff_counters.hit_rate_pct(hits, queries) == pct


def test_hit_rates_from_delta():
    before = {
        **cliff_counters.read_named_counters("", cliff_counters.VLLM_COUNTERS),
        **cliff_counters.read_named_counters("", cliff_counters.LMCACHE_COUNTERS),
    }
    after = {
        **cliff_counters.read_named_counters(VLLM_TEXT, cliff_counters.VLLM_COUNTERS),
        **cliff_counters.read_named_counters(LMCACHE_TEXT, cliff_counters.LMCACHE_COUNTERS),
    }
    assert cliff_counters.hit_rates(cliff_counters.counter_delta(before, after)) == {
        "l1_hit_rate_pct": 25.0,
        "ext_hit_rate_pct": 20.0,
        "lmcache_l1_hit_rate_pct": 25.0,
        "lmcache_l2_hit_rate_pct": 50.0,
    }


def test_hit_rates_all_zero_never_divide_by_zero():
    assert cliff_counters.hit_rates({}) == {
        "l1_hit_rate_pct": 0.0,
        "ext_hit_rate_pct": 0.0,
        "lmcache_l1_hit_rate_pct": 0.0,
        "lmcache_l2_hit_rate_pct": 0.0,
    }


def test_metrics_reader_against_fake_vllm(fake_vllm, http_server):
    http_server.route("/metrics", body=LMCACHE_TEXT)
    reader = cliff_counters.MetricsReader(fake_vllm.url, http_server.url)
    values = reader.counters()
    assert values["lmcache_hit_l2_tokens"] == 2000.0
    assert values["l1_cache_queries"] == 0.0
    drain = reader.drain_counters()
    assert drain["lmcache_mp_l2_store_completed_objects_chunks_total"] == 15.0
    # Without an LMCache URL (vram arm) the LMCache columns read 0.
    assert cliff_counters.MetricsReader(fake_vllm.url).counters()["lmcache_requested_tokens"] == 0.0
