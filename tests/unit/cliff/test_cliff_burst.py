"""The burst runner and the per-arm ladder against a fake vLLM (a real local HTTP server)."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from ansible_collections.aic.stack.plugins.plugin_utils.cliff import burst as cliff_burst
from ansible_collections.aic.stack.plugins.plugin_utils.cliff import counters as cliff_counters
from ansible_collections.aic.stack.plugins.plugin_utils.cliff import profiles
from ansible_collections.aic.stack.plugins.plugin_utils.cliff import prompts as cliff_prompts
from ansible_collections.aic.stack.plugins.plugin_utils.cliff import results as cliff_results
from ansible_collections.aic.stack.plugins.plugin_utils.cliff import runner as cliff_runner

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def load_bench_cli():
    spec = importlib.util.spec_from_file_location("bench_cliff", os.path.join(REPO, "bench", "cliff.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("concurrency", [1, 8, 32])
def test_burst_reaches_concurrency(fake_vllm, concurrency):
    fake_vllm.delay = 0.3
    prompts = [f"client {i} hello there" for i in range(concurrency)]
    result = cliff_burst.run_burst(fake_vllm.url, "fake-model", prompts, concurrency, timeout=10)
    # Measured on the server side: all c requests were in flight together.
    assert fake_vllm.max_in_flight == concurrency
    assert result.max_in_flight == concurrency
    s = result.summary
    assert (s["ok_count"], s["err_count"], s["errors"]) == (concurrency, 0, {})
    assert s["total_prompt_tokens"] == 4 * concurrency  # from the response usage
    assert s["total_output_tokens"] == concurrency
    # One wave: the burst takes about one delay, not c of them.
    assert 0.3 <= result.wall_s < 0.3 * 3
    assert 0.3 <= s["p50_latency_s"] <= s["p95_latency_s"] < 0.3 * 3
    assert s["requests_per_s"] == pytest.approx(concurrency / result.wall_s)
    assert s["throughput_tok_s_prompt"] == pytest.approx(4 * concurrency / result.wall_s)
    bodies = fake_vllm.completions
    assert sorted(b["prompt"] for b in bodies) == sorted(prompts)
    assert {(b["max_tokens"], b["temperature"], b["stream"], b["model"]) for b in bodies} == {
        (1, 0, False, "fake-model")
    }


def test_more_prompts_than_concurrency_is_closed_loop(fake_vllm):
    fake_vllm.delay = 0.1
    result = cliff_burst.run_burst(fake_vllm.url, "fake-model", [f"p {i}" for i in range(12)], 4, timeout=10)
    assert fake_vllm.max_in_flight == 4
    assert result.summary["ok_count"] == 12
    assert result.wall_s >= 0.3  # three waves of four


def test_errors_are_counted_not_raised(fake_vllm, closed_port):
    fake_vllm.delay = 0.05
    fake_vllm.fail_every = 2
    result = cliff_burst.run_burst(fake_vllm.url, "fake-model", [f"p {i}" for i in range(4)], 4, timeout=10)
    s = result.summary
    assert (s["ok_count"], s["err_count"]) == (2, 2)
    assert list(s["errors"]) == ['HTTP 503: {"detail": "overloaded"}']
    refused = cliff_burst.run_burst(f"http://127.0.0.1:{closed_port}", "m", ["a", "b"], 2, timeout=5)
    assert refused.summary["err_count"] == 2
    assert refused.summary["p95_latency_s"] is None
    assert all(r.status is None and "ConnectionError" in r.error for r in refused.records)


def test_bad_concurrency():
    with pytest.raises(profiles.CliffConfigError, match="concurrency"):
        cliff_burst.run_burst("http://127.0.0.1:1", "m", ["a"], 0)


def test_percentile():
    assert cliff_burst.percentile([], 50) is None
    assert cliff_burst.percentile([3.0], 95) == 3.0
    assert cliff_burst.percentile([1, 2, 3, 4], 50) == 2.5
    assert cliff_burst.percentile(range(1, 101), 95) == pytest.approx(95.05)


def tiny_profile(**extra):
    overrides = {
        "isl": 48,
        "prefix_tokens": 40,
        "concurrency": "1,4",
        "iterations": 2,
        "drain_bound_s": 0.3,
        "drain_settle_s": 0.05,
        "drain_interval_s": 0.02,
        "metrics_bound_s": 0.3,
        "metrics_settle_s": 0.05,
        "metrics_interval_s": 0.02,
        "request_timeout_s": 10,
    }
    overrides.update(extra)
    return profiles.resolve_profile("cliff_kvd", overrides)


def test_run_arm_against_fake_vllm(fake_vllm, http_server, test_tokenizer):
    fake_vllm.delay = 0.05
    http_server.route("/metrics", body="")  # a fresh LMCache: no lookup counters yet
    profile = tiny_profile()
    logs = []
    rows = cliff_runner.run_arm(
        profile, "dram", fake_vllm.url, "fake-model", test_tokenizer, lmcache_url=http_server.url, log=logs.append
    )
    assert [(r["arm"], r["concurrency"], r["iter"]) for r in rows] == [
        ("dram", 1, 0),
        ("dram", 1, 1),
        ("dram", 4, 0),
        ("dram", 4, 1),
    ]
    for row in rows:
        assert row["err_count"] == 0
        assert row["total_prompt_tokens"] == 48 * row["concurrency"]  # exact ISL per request
        assert row["l1_cache_queries"] == 48 * row["concurrency"]  # the delta covers exactly this burst
        assert row["l1_hit_rate_pct"] == pytest.approx(50.0)
        assert row["ext_hit_rate_pct"] == 0.0
        assert row["lmcache_l2_hit_rate_pct"] == 0.0
        assert row["drained"] is True
    # Warmup at each c (1 + 4 requests) plus 2 iterations x (1 + 4).
    assert len(fake_vllm.completions) == 5 + 10
    assert fake_vllm.max_in_flight == 4
    # Shared mode: every prompt starts with the same prefix.
    prefixes = {b["prompt"].split(cliff_prompts.QUESTION)[0] for b in fake_vllm.completions}
    assert len(prefixes) == 1
    assert any("drain: settled" in line for line in logs)


def test_cli_dry_run(capsys):
    cli = load_bench_cli()
    assert (
        cli.main(["--profile", "cliff-spur-l2", "--set", "iterations=", "--set", "concurrency=8,16", "--dry-run"]) == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile"]["iterations"] == 2
    assert doc["profile"]["concurrency"] == [8, 16]
    assert doc["arms"]["nvme"]["plan_overrides"]["aic_lmcache_l2_backend"] == "nixl_posix"
    assert cli.main(["--profile", "cliff_kvd", "--set", "bogus=1", "--dry-run"]) == 2
    assert "bogus: unknown cliff profile key" in capsys.readouterr().err
    assert cli.main(["--profile", "cliff_kvd", "--arm", "dram,gds", "--dry-run"]) == 2
    assert "--arm: unknown arm 'gds'" in capsys.readouterr().err


def test_cli_runs_one_arm_and_appends(fake_vllm, tmp_path, capsys):
    fake_vllm.delay = 0.02
    cli = load_bench_cli()
    sets = []
    for key, value in {
        "isl": 48,
        "prefix_tokens": 40,
        "concurrency": "1,2",
        "iterations": 1,
        "drain_bound_s": 0.2,
        "drain_settle_s": 0.05,
        "drain_interval_s": 0.02,
        "metrics_bound_s": 0.2,
        "metrics_settle_s": 0.05,
        "metrics_interval_s": 0.02,
    }.items():
        sets += ["--set", f"{key}={value}"]
    results = tmp_path / "results"
    common = ["--profile", "cliff_kvd", "--vllm-url", fake_vllm.url, "--results-dir", str(results), *sets]
    # vram: no LMCache URL is scraped at all (the default URL would be refused).
    assert cli.main([*common, "--arm", "vram", "--lmcache-url", "http://127.0.0.1:9"]) == 0
    assert cli.main([*common, "--arm", "nvme", "--lmcache-url", fake_vllm.url]) == 0
    out = capsys.readouterr().out
    assert '"arm": "nvme"' in out
    rows = cliff_results.read_csv(results / cliff_results.CSV_NAME)
    assert [(r["arm"], r["concurrency"]) for r in rows] == [("vram", 1), ("vram", 2), ("nvme", 1), ("nvme", 2)]
    doc = json.loads((results / cliff_results.JSON_NAME).read_text())
    assert set(doc["arms"]) == {"vram", "nvme"}
    assert (results / cliff_results.HTML_NAME).exists()


def test_run_arm_through_the_router_sums_the_counters_of_every_instance(
    vllm_router, fake_vllms, http_server, test_tokenizer
):
    """CLIFF_TARGET=router: the bursts go through the real vllm-router (round robin) to two vLLM stand-ins, and each
    row's counters are the sum of both instances' (the requests the arm sent, wherever they were served)."""
    first, second = fake_vllms(2, delay=0.02)
    target = vllm_router([first.url, second.url], policy="round_robin")
    http_server.route("/metrics", body="")
    rows = cliff_runner.run_arm(
        tiny_profile(), "dram", [first.url, second.url], "fake-model", test_tokenizer,
        lmcache_url=http_server.url, log=lambda _line: None, target_url=target,
    )  # fmt: skip
    # Every request went through the router, which spread them over both instances.
    assert len(first.completions) + len(second.completions) == 5 + 10
    assert first.completions and second.completions
    for row in rows:
        assert row["err_count"] == 0
        # 48 prompt tokens per request, counted by whichever instance served it: the sum is the burst's.
        assert row["l1_cache_queries"] == 48 * row["concurrency"]


def test_the_metrics_reader_sums_the_instances(fake_vllms):
    first, second = fake_vllms(2, delay=0)
    for server, prompt in ((first, "alpha beta"), (second, "gamma delta epsilon")):
        server.complete({"prompt": prompt, "max_tokens": 1})
    one = cliff_counters.MetricsReader(first.url).counters()
    two = cliff_counters.MetricsReader(second.url).counters()
    both = cliff_counters.MetricsReader([first.url, second.url]).counters()
    assert both["l1_cache_queries"] == one["l1_cache_queries"] + two["l1_cache_queries"] > 0
    with pytest.raises(ValueError, match="no vLLM URL"):
        cliff_counters.MetricsReader([])
