"""Cliff profiles: built-in data, empty overrides, unknown keys, bad values, arms."""

from __future__ import annotations

import pytest

from ansible_collections.aic.stack.plugins.module_utils.plan import DEFAULTS, build_plan
from ansible_collections.aic.stack.plugins.plugin_utils.cliff import profiles as cliff_profiles


def test_builtin_spur_l2_profile():
    p = cliff_profiles.resolve_profile("cliff-spur-l2")
    assert p["name"] == "cliff_spur_l2"
    assert p["prefix_mode"] == "per_client"
    assert p["concurrency"] == [32]
    assert p["iterations"] == 2
    assert p["gpu_memory_utilization"] == 0.40
    assert p["l1_size_gb"] == 8.0
    assert p["arms"] == ["nvme"]
    assert p["model"] == "Qwen/Qwen2.5-3B-Instruct"
    # Not set by the profile: the base defaults (ISL 20000 / prefix 18000, drain bounded at 300 s).
    assert (p["isl"], p["prefix_tokens"], p["drain_bound_s"]) == (20000, 18000, 300.0)


def test_builtin_kvd_profile():
    p = cliff_profiles.resolve_profile("cliff_kvd")
    assert p["prefix_mode"] == "shared"
    assert p["concurrency"] == [1, 8, 32, 64, 128, 250]
    assert p["iterations"] == 2
    assert p["gpu_memory_utilization"] is None  # the plan keeps its own value


@pytest.mark.parametrize("empty", ["", "   ", None])
def test_empty_override_keeps_default(empty):
    overrides = dict.fromkeys(
        ["concurrency", "iterations", "prefix_mode", "l1_size_gb", "drain_bound_s", "arms"], empty
    )
    p = cliff_profiles.resolve_profile("cliff_spur_l2", overrides)
    assert p["concurrency"] == [32]
    assert p["iterations"] == 2
    assert p["prefix_mode"] == "per_client"
    assert p["l1_size_gb"] == 8.0  # an empty L1 size must never mean 0 / unset (the fake-cliff bug)
    assert p["drain_bound_s"] == 300.0
    assert p["arms"] == ["nvme"]


def test_string_overrides_are_parsed():
    p = cliff_profiles.resolve_profile(
        "cliff_kvd", {"concurrency": "64, 1,8", "iterations": "3", "l1_size_gb": "40", "warmup_at_each_c": "false"}
    )
    assert p["concurrency"] == [1, 8, 64]
    assert p["iterations"] == 3
    assert p["l1_size_gb"] == 40.0
    assert p["warmup_at_each_c"] is False


def test_unknown_key_is_named():
    with pytest.raises(cliff_profiles.CliffConfigError, match=r"^concurrency_ladder: unknown cliff profile key"):
        cliff_profiles.resolve_profile("cliff_kvd", {"concurrency_ladder": "1,2"})


def test_unknown_profile():
    with pytest.raises(cliff_profiles.CliffConfigError, match=r"unknown cliff profile 'nope'.*cliff_kvd"):
        cliff_profiles.resolve_profile("nope")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"concurrency": []}, r"^concurrency: the concurrency ladder is empty"),
        ({"concurrency": ","}, r"^concurrency: the concurrency ladder is empty"),
        ({"concurrency": "1,eight"}, r"^concurrency: 'eight' is not an integer"),
        ({"concurrency": [1, 2.5]}, r"^concurrency: 2.5 is not an integer"),
        ({"concurrency": [True]}, r"^concurrency: True is not an integer"),
        ({"concurrency": "0,8"}, r"^concurrency: concurrency must be at least 1"),
        ({"concurrency": "8,8"}, r"^concurrency: concurrency 8 is listed twice"),
        ({"iterations": 0}, r"^iterations: must be at least 1, got 0"),
        ({"iterations": "two"}, r"^iterations: expected an integer"),
        ({"prefix_mode": "global"}, r"^prefix_mode: 'global' is not one of shared, per_client"),
        ({"gpu_memory_utilization": 1.5}, r"^gpu_memory_utilization: must be between"),
        ({"warmup_at_each_c": "maybe"}, r"^warmup_at_each_c: expected a boolean"),
        ({"isl": 100, "prefix_tokens": 100}, r"^prefix_tokens: must be smaller than isl"),
        ({"arms": "dram,ssd"}, r"^arms: unknown arm 'ssd'"),
    ],
)
def test_bad_values(overrides, message):
    with pytest.raises(cliff_profiles.CliffConfigError, match=message):
        cliff_profiles.resolve_profile("cliff_kvd", overrides)


def test_user_profiles_merge_over_builtins():
    users = {
        # Same name as a built-in: merges over it; empty values keep the built-in's.
        "cliff-kvd": {"concurrency": "1,2", "iterations": ""},
        # A new profile extending a built-in.
        "my_l2": {"extends": "cliff_spur_l2", "concurrency": [16, 32, 48], "l1_size_gb": 4},
        # A new profile without extends: the base defaults.
        "tiny": {"isl": 64, "prefix_tokens": 48, "concurrency": [1]},
    }
    kvd = cliff_profiles.resolve_profile("cliff_kvd", user_profiles=users)
    assert kvd["concurrency"] == [1, 2]
    assert kvd["iterations"] == 2
    assert kvd["prefix_mode"] == "shared"
    mine = cliff_profiles.resolve_profile("my-l2", {"iterations": 1}, users)
    assert (mine["concurrency"], mine["l1_size_gb"], mine["prefix_mode"], mine["iterations"]) == (
        [16, 32, 48],
        4.0,
        "per_client",
        1,
    )
    tiny = cliff_profiles.resolve_profile("tiny", user_profiles=users)
    assert (tiny["isl"], tiny["iterations"], tiny["arms"]) == (64, 3, ["vram", "dram", "nvme"])
    assert "tiny" in cliff_profiles.available_profiles(users)
    with pytest.raises(
        cliff_profiles.CliffConfigError, match=r"^bogus: unknown cliff profile key in user profile tiny"
    ):
        cliff_profiles.resolve_profile("tiny", user_profiles={"tiny": {"bogus": 1}})
    with pytest.raises(cliff_profiles.CliffConfigError, match=r"^extends: unknown built-in profile"):
        cliff_profiles.resolve_profile("x", user_profiles={"x": {"extends": "nope", "iterations": 1}})


def test_builtin_data_is_not_mutated():
    p = cliff_profiles.resolve_profile("cliff_kvd")
    p["concurrency"].append(999)
    assert cliff_profiles.resolve_profile("cliff_kvd")["concurrency"] == [1, 8, 32, 64, 128, 250]


def test_parse_arms():
    assert cliff_profiles.parse_arms("dram,nvme") == ["dram", "nvme"]
    assert cliff_profiles.parse_arms(" vram  nvme ") == ["vram", "nvme"]
    assert cliff_profiles.parse_arms(["nvme"]) == ["nvme"]
    with pytest.raises(
        cliff_profiles.CliffConfigError, match=r"^AIC_CLIFF_ARMS: unknown arm 'gds' \(choose from vram, dram, nvme\)"
    ):
        cliff_profiles.parse_arms("nvme,gds", key="AIC_CLIFF_ARMS")
    with pytest.raises(cliff_profiles.CliffConfigError, match="listed twice"):
        cliff_profiles.parse_arms("nvme,nvme")
    with pytest.raises(cliff_profiles.CliffConfigError, match="empty"):
        cliff_profiles.parse_arms("")


def test_arm_plan_overrides():
    p = cliff_profiles.resolve_profile("cliff_spur_l2")
    assert cliff_profiles.arm_plan_overrides(p, "nvme") == {
        "aic_lmcache_l2_backend": "nixl_posix",
        "aic_vllm_model": "Qwen/Qwen2.5-3B-Instruct",
        "aic_vllm_gpu_memory_utilization": 0.40,
        "aic_lmcache_l1_size_gb": 8.0,
        # The plan default /dev/shm (2 GiB) is smaller than the 8 GB L1: raised, else the plan refuses it.
        "aic_lmcache_shm_size_gb": 8,
        # No Docker healthcheck in the arms: its completions would land in the counters the ladder measures.
        "aic_vllm_healthcheck_interval": 0,
    }
    # SPUR's inventory already has 64 GiB of shm: left alone; an empty value means the default (2).
    assert "aic_lmcache_shm_size_gb" not in cliff_profiles.arm_plan_overrides(
        p, "nvme", {"aic_lmcache_shm_size_gb": 64}
    )
    assert cliff_profiles.arm_plan_overrides(p, "nvme", {"aic_lmcache_shm_size_gb": ""})["aic_lmcache_shm_size_gb"] == 8
    # vram runs without LMCache: no L1 size.
    assert "aic_lmcache_l1_size_gb" not in cliff_profiles.arm_plan_overrides(p, "vram")
    assert cliff_profiles.arm_uses_lmcache("vram") is False
    assert cliff_profiles.arm_plan_overrides(cliff_profiles.resolve_profile("cliff_kvd"), "dram") == {
        "aic_lmcache_l2_backend": "none",
        "aic_vllm_healthcheck_interval": 0,
    }


def test_an_operator_keeps_the_arms_healthcheck_by_setting_its_interval():
    p = cliff_profiles.resolve_profile("cliff_kvd", {"vllm_healthcheck_interval": "5"})
    assert cliff_profiles.arm_plan_overrides(p, "vram")["aic_vllm_healthcheck_interval"] == 5
    with pytest.raises(cliff_profiles.CliffConfigError, match="vllm_healthcheck_interval"):
        cliff_profiles.resolve_profile("cliff_kvd", {"vllm_healthcheck_interval": -1})


@pytest.mark.parametrize("arm", list(cliff_profiles.ARMS))
def test_arm_overrides_are_real_plan_variables(arm):
    overrides = cliff_profiles.arm_plan_overrides(cliff_profiles.resolve_profile("cliff_spur_l2"), arm)
    assert set(overrides) <= set(DEFAULTS)
    # ... and the plan accepts them (rocm flavour needs a model).
    plan, _dummy = build_plan({"aic_flavour": "rocm", "aic_gpus": [0], **overrides})
    assert plan["lmcache"]["l2_backend"] == overrides["aic_lmcache_l2_backend"]
    assert plan["vllm"]["healthcheck"]["interval"] == 0


def test_shm_default_matches_the_plan():
    assert DEFAULTS["aic_lmcache_shm_size_gb"] == cliff_profiles.DEFAULT_SHM_SIZE_GB
