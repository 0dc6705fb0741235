"""Filters the cliff_bench role uses: profile resolution, per-arm plan overrides, the runner's --set arguments."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.filter.cliff import (
    cliff_arm_overrides,
    cliff_cli_sets,
    cliff_overrides,
    cliff_profile,
)
from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan


def test_profile_with_empty_overrides_keeps_the_defaults():
    profile = cliff_profile("cliff_kvd", {"concurrency": "", "iterations": None})
    assert profile["concurrency"] == [1, 8, 32, 64, 128, 250]
    assert profile["iterations"] == 2


def test_operator_overrides_win_over_the_sites_unless_empty():
    site = {"isl": 200, "prefix_tokens": 128, "drain_bound_s": 60}
    operator = {"isl": "", "prefix_tokens": 64, "concurrency": "1,2", "iterations": None, "arms": "  "}
    assert cliff_overrides(site, operator) == {
        "isl": 200,
        "prefix_tokens": 64,
        "drain_bound_s": 60,
        "concurrency": "1,2",
    }
    assert site == {"isl": 200, "prefix_tokens": 128, "drain_bound_s": 60}  # not modified
    assert cliff_overrides(None, None) == {}


def test_overrides_that_are_not_mappings_are_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="^cliff_bench: overrides: expected a mapping"):
        cliff_overrides({}, "concurrency=1")
    with pytest.raises(AnsibleFilterError, match="^cliff_bench: site overrides: expected a mapping"):
        cliff_overrides(["isl"], {})


def test_bad_profile_input_is_a_filter_error_naming_the_key():
    with pytest.raises(AnsibleFilterError, match="^cliff_bench: concurrency"):
        cliff_profile("cliff_kvd", {"concurrency": "1,x"})
    with pytest.raises(AnsibleFilterError, match="unknown cliff profile"):
        cliff_profile("nope")


@pytest.mark.parametrize(
    "arm, backend, lmcache", [("vram", "none", False), ("dram", "none", True), ("nvme", "nixl_posix", True)]
)
def test_arm_overrides_are_real_plan_inputs(arm, backend, lmcache):
    overrides = cliff_arm_overrides(cliff_profile("cliff_kvd"), arm)
    assert overrides["aic_lmcache_l2_backend"] == backend
    assert overrides["aic_vllm_lmcache"] is lmcache
    plan = build_plan(overrides)[0]  # the plan accepts them as they are
    assert plan["vllm"]["lmcache"] is lmcache


def test_cli_sets_join_lists_and_drop_empty_values():
    assert cliff_cli_sets({"concurrency": [1, 2, 4], "iterations": 1, "arms": "", "isl": None, "x": True}) == [
        "--set=concurrency=1,2,4",
        "--set=iterations=1",
        "--set=x=true",
    ]
