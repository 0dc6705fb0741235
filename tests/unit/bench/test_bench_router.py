"""bench/router.py: the medians of each mode's measured bursts, and the table of every mode with its ratio to
direct (what the README quotes)."""

from __future__ import annotations

import importlib.util
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("bench_router", REPO / "bench" / "router.py")
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def row(throughput, p95, l1, ext="", errors=0):
    return {"throughput_tok_s_prompt": str(throughput), "p50_latency_s": "0.5", "p95_latency_s": str(p95),
            "l1_hit_rate_pct": str(l1), "ext_hit_rate_pct": str(ext), "err_count": str(errors)}  # fmt: skip


def test_the_summary_is_the_median_of_each_column_and_counts_errors():
    summary = bench.summary([row(100, 1.0, 50), row(300, 3.0, 70, errors=2), row(200, 2.0, 60)])
    assert summary == {
        "throughput_tok_s_prompt": 200.0,
        "p50_latency_s": 0.5,
        "p95_latency_s": 2.0,
        "l1_hit_rate_pct": 60.0,
        "ext_hit_rate_pct": None,  # empty in every row
        "errors": 2,
        "bursts": 3,
    }


def test_the_table_gives_each_mode_its_ratio_to_direct():
    results = {
        "direct": bench.summary([row(100, 2.0, 80, 0)]),
        "cache_aware": bench.summary([row(150, 1.0, 80, 0)]),
        "round_robin": bench.summary([row(120, 1.5, 40, 30, errors=1)]),
    }
    lines = bench.table(results).splitlines()
    assert lines[0].startswith("| mode | throughput_tok_s_prompt | p50_latency_s | p95_latency_s")
    assert lines[2].startswith("| direct | 100.000 (1.00x) |")
    assert lines[3].startswith("| cache_aware | 150.000 (1.50x) | 0.500 (1.00x) | 1.000 (0.50x) | 80.000 (1.00x)")
    # A ratio to a zero base is left out; the error count ends the row.
    assert "| 30.000 | 1 |" in lines[4] and "40.000 (0.50x)" in lines[4]
