"""The cliff-point finder: knee, no knee, noise, p95 rule."""

from __future__ import annotations

import random

import pytest

from ansible_collections.aic.stack.plugins.plugin_utils.cliff import finder as cliff_finder

LADDER = [1, 8, 32, 64, 128, 250]


def test_clear_knee_in_throughput():
    tput = {1: 1000, 8: 7000, 32: 20000, 64: 26000, 128: 9000, 250: 8000}
    assert cliff_finder.find_cliff(tput) == 128


def test_monotonic_without_knee_is_none():
    assert cliff_finder.find_cliff({1: 1000, 8: 7000, 32: 20000, 64: 26000, 128: 27000, 250: 27500}) is None


def test_saturation_plateau_is_not_a_cliff():
    assert cliff_finder.find_cliff({1: 1000, 8: 8000, 32: 30000, 64: 30100, 128: 29800, 250: 30000}) is None


def test_single_point_or_empty_is_none():
    assert cliff_finder.find_cliff({32: 1000}) is None
    assert cliff_finder.find_cliff({}) is None


def test_drop_threshold_is_relative_to_the_running_peak():
    # 64 is 9% below the peak at 32 (noise), 128 is 12% below it: the cliff.
    tput = {1: 100, 32: 1000, 64: 910, 128: 880}
    assert cliff_finder.find_cliff(tput, drop_pct=10) == 128
    assert cliff_finder.find_cliff(tput, drop_pct=15) is None


def test_noisy_data_uses_the_median_of_iterations():
    rng = random.Random(7)
    base = {1: 1000, 8: 7500, 32: 24000, 64: 30000, 128: 30500, 250: 31000}
    noisy = [(c, v * rng.uniform(0.95, 1.05)) for c, v in base.items() for _dummy in range(3)]
    assert cliff_finder.find_cliff(noisy) is None
    # One outlier iteration (a 60% dip) is outvoted by the other two.
    assert cliff_finder.find_cliff(noisy + [(64, 12000)]) is None
    dropped = noisy + [
        (c, v * rng.uniform(0.95, 1.05) * 0.5) for c, v in base.items() if c >= 128 for _dummy in range(5)
    ]
    assert cliff_finder.find_cliff(dropped) == 128


def test_p95_rule():
    # p95 grows about linearly with c while the cache holds (p95/c flat or falling) ...
    healthy = {1: 0.5, 8: 0.9, 32: 3.0, 64: 6.1, 128: 12.5, 250: 24.0}
    assert cliff_finder.find_cliff(healthy, "p95") is None
    # ... and p95/c jumps more than 2x when requests recompute their prefixes.
    broken = {**healthy, 128: 40.0, 250: 90.0}
    assert cliff_finder.find_cliff(broken, "p95") == 128
    assert cliff_finder.find_cliff(broken, "p95", p95_factor=4.0) is None


def test_unknown_metric():
    with pytest.raises(ValueError, match="metric"):
        cliff_finder.find_cliff({1: 1, 2: 2}, "ttft")


def test_arm_cliffs_from_rows():
    rows = []
    for arm, tput, p95 in (
        ("vram", [100, 800, 2000, 1200, 600, 300], [0.1, 0.1, 0.2, 1.0, 3.0, 9.0]),
        ("nvme", [100, 800, 2000, 2600, 2700, 2700], [0.1, 0.1, 0.2, 0.4, 0.8, 1.6]),
    ):
        for c, t, p in zip(LADDER, tput, p95, strict=True):
            rows.append({"arm": arm, "concurrency": c, "throughput_tok_s_prompt": t, "p95_latency_s": p})
    out = cliff_finder.arm_cliffs(rows)
    assert out["vram"] == {"throughput": 64, "p95": 64, "cliff": 64, "peak_c": 32}
    assert out["nvme"] == {"throughput": None, "p95": None, "cliff": None, "peak_c": 128}
