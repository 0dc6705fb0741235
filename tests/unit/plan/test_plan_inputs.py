"""The aic_* inputs checked against the preflight role's argument spec (entry point ``inputs``) by Ansible's own
ArgumentSpecValidator, after the empty-means-default step - the real spec file, no stand-in."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.aic.stack.plugins.module_utils.plan import DEFAULTS, PlanError, build_plan
from ansible_collections.aic.stack.plugins.module_utils.plan_inputs import (
    check_inputs,
    input_options,
    spec_path,
    validator_spec,
)

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def options():
    return input_options(yaml.safe_load(pathlib.Path(spec_path()).read_text()))


def test_the_spec_is_the_preflight_roles_inputs_entry_point(options):
    assert pathlib.Path(spec_path()).resolve() == REPO / "roles" / "preflight" / "meta" / "argument_specs.yml"
    assert list(options) == list(DEFAULTS)


@pytest.mark.parametrize(
    ("inputs", "checked"),
    [
        ({}, {"aic_vllm_port": 8000, "aic_flavour": "cpu"}),
        # An empty string (or null) means the default, for integers, floats and booleans too: the default is checked.
        (
            {"aic_vllm_port": "", "aic_vllm_gpu_memory_utilization": None, "aic_vllm_lmcache": "  "},
            {"aic_vllm_port": 8000, "aic_vllm_gpu_memory_utilization": 0.9, "aic_vllm_lmcache": True},
        ),
        # Strings from -e or an inventory that convert pass as given (the plan converts them).
        (
            {"aic_vllm_port": "8001", "aic_vllm_gpu_memory_utilization": "0.5", "aic_vllm_lmcache": "false"},
            {"aic_vllm_port": "8001", "aic_vllm_gpu_memory_utilization": "0.5", "aic_vllm_lmcache": "false"},
        ),
        # A list given as a string (the plan splits it, ';' too for arch sets), and list items that are numbers.
        ({"aic_rocm_arches": "gfx942;gfx950", "aic_gpus": [4, 5]}, {"aic_rocm_arches": "gfx942;gfx950"}),
        # rocm: its own defaults; aic_vllm_model has none there and, unset, is left to the plan (which names it).
        ({"aic_flavour": "rocm"}, {"aic_vllm_kv_cache_dtype": "fp8", "aic_vllm_model": None}),
    ],
)
def test_valid_inputs_pass_with_the_defaults_applied(options, inputs, checked):
    result = check_inputs(inputs, options)
    assert set(result) <= set(DEFAULTS)
    for name, value in checked.items():
        assert result.get(name) == value, name


def test_unknown_aic_names_are_not_this_checks_business(options):
    # The plan warns about them; a value no type would take does not fail here.
    assert "aic_no_such_input" not in check_inputs({"aic_no_such_input": object()}, options)


@pytest.mark.parametrize(
    ("inputs", "named", "says"),
    [
        ({"aic_vllm_port": "80x"}, "aic_vllm_port", "convert to int"),
        ({"aic_vllm_port": [8000]}, "aic_vllm_port", "convert to int"),
        ({"aic_vllm_gpu_memory_utilization": "most"}, "aic_vllm_gpu_memory_utilization", "convert to float"),
        ({"aic_vllm_lmcache": "maybe"}, "aic_vllm_lmcache", "convert to bool"),
        ({"aic_flavour": "gpu"}, "aic_flavour", "must be one of: cpu, rocm"),
        ({"aic_vllm_install": "pip"}, "aic_vllm_install", "must be one of"),
        ({"aic_gpus": {"a": 1}}, "aic_gpus", "convert to list"),
    ],
)
def test_wrong_types_and_choices_are_named(options, inputs, named, says):
    with pytest.raises(PlanError) as err:
        check_inputs(inputs, options)
    assert named in str(err.value) and says in str(err.value)


def test_every_wrong_input_is_named_at_once(options):
    with pytest.raises(PlanError) as err:
        check_inputs({"aic_vllm_port": "x", "aic_lmcache_port": "y"}, options)
    assert "aic_vllm_port" in str(err.value) and "aic_lmcache_port" in str(err.value)


def test_an_unknown_flavour_does_not_hide_the_other_errors(options):
    with pytest.raises(PlanError) as err:
        check_inputs({"aic_flavour": "gpu", "aic_vllm_port": "x"}, options)
    assert "aic_flavour" in str(err.value) and "aic_vllm_port" in str(err.value)


def test_ranges_stay_with_the_plan(options):
    # The spec has no ranges: a port of 70000 is an int (passes here) and the plan refuses it, naming it.
    check_inputs({"aic_vllm_port": 70000}, options)
    with pytest.raises(PlanError, match="aic_vllm_port: 70000 is outside"):
        build_plan({"aic_vllm_port": 70000})


def test_a_spec_that_lacks_a_plan_input_is_refused(options):
    partial = {k: v for k, v in options.items() if k != "aic_vllm_port"}
    with pytest.raises(PlanError, match="lacks the plan inputs aic_vllm_port"):
        check_inputs({}, partial)


def test_a_document_without_the_entry_point_is_refused():
    with pytest.raises(PlanError, match="no entry point 'inputs'"):
        input_options({"argument_specs": {"main": {"options": {}}}})
    with pytest.raises(PlanError, match="has no options"):
        input_options({"argument_specs": {"inputs": {"options": {}}}})


def test_the_validator_gets_types_not_documentation(options):
    spec = validator_spec(
        {
            "x": {"type": "list", "elements": "str", "default": [], "description": ["d"]},
            "y": {"type": "dict", "options": {"z": {"type": "int", "description": "d", "default": 1}}},
        }
    )
    assert spec == {"x": {"type": "list", "elements": "str"}, "y": {"type": "dict", "options": {"z": {"type": "int"}}}}
    assert all("description" not in o and "default" not in o for o in validator_spec(options).values())
