"""aic_vllm_install (auto | source | wheel): the decision table, its validation errors, and the build matrix it gives.

The plan resolves the choice for the arch set (plugins/module_utils/plan.py: vllm_install_for) into
aic_plan.images.rocm.vllm_install; the role hands that to aic.stack.rocm_build_matrix, whose vllm_source is a build
arg of the stack image (so the choice is part of the image tag).
"""

from __future__ import annotations

import pathlib

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.filter.rocm import rocm_build_matrix
from ansible_collections.aic.stack.plugins.module_utils.plan import (
    DEFAULTS,
    VLLM_INSTALLS,
    PlanError,
    build_plan,
    vllm_install_for,
)

REPO = pathlib.Path(__file__).resolve().parents[3]
INDEX = "https://wheels.example/rocm/0.26.0/rocm7140"

# Arch sets: inside {gfx942, gfx950} (the wheel's arches) or not.
WHEEL_SETS = ["gfx950", "gfx942", "gfx942;gfx950", ["gfx950", "gfx942"], "GFX942, gfx950"]
OTHER_SETS = ["gfx90a", "gfx1151", "gfx942;gfx1151", ["gfx90a", "gfx942", "gfx950"], "gfx950;gfx1201"]

# (arch set inside the wheel's arches?, wheel index configured?, choice) -> result ("error" for PlanError).
TABLE = {
    (True, True, "auto"): "wheel",
    (True, False, "auto"): "source",
    (False, True, "auto"): "source",
    (False, False, "auto"): "source",
    (True, True, "source"): "source",
    (True, False, "source"): "source",
    (False, True, "source"): "source",
    (False, False, "source"): "source",
    (True, True, "wheel"): "wheel",
    (True, False, "wheel"): "error",
    (False, True, "wheel"): "error",
    (False, False, "wheel"): "error",
}
CASES = [
    (arches, inside, indexed, choice)
    for (inside, indexed, choice) in TABLE
    for arches in (WHEEL_SETS if inside else OTHER_SETS)
]


def rocm(**extra):
    return {"aic_flavour": "rocm", "aic_vllm_model": "org/m", **extra}


def test_table_covers_every_combination():
    assert set(TABLE) == {(i, x, c) for i in (True, False) for x in (True, False) for c in VLLM_INSTALLS}


@pytest.mark.parametrize("arches, inside, indexed, choice", CASES)
def test_decision_table(arches, inside, indexed, choice):
    expected = TABLE[(inside, indexed, choice)]
    index = INDEX if indexed else ""
    if expected == "error":
        with pytest.raises(PlanError) as excinfo:
            vllm_install_for(choice, arches, index, "v0.26.0")
        message = str(excinfo.value)
        assert message.startswith("aic_vllm_install: wheel does not fit: ")
        if not inside:
            assert "aic_rocm_arches has " in message and "gfx942, gfx950" in message
        if not indexed:
            assert "aic_vllm_wheel_index_url is empty" in message
        return
    assert vllm_install_for(choice, arches, index, "v0.26.0") == expected


@pytest.mark.parametrize("arches, inside, indexed, choice", CASES)
def test_plan_resolves_the_choice_and_the_matrix_follows_it(arches, inside, indexed, choice):
    expected = TABLE[(inside, indexed, choice)]
    inputs = rocm(aic_rocm_arches=arches, aic_vllm_install=choice, aic_vllm_wheel_index_url=INDEX if indexed else "")
    if expected == "error":
        with pytest.raises(PlanError, match=r"^aic_vllm_install: wheel does not fit"):
            build_plan(inputs)
        return
    plan, _dummy = build_plan(inputs)
    rocm_plan = plan["images"]["rocm"]
    assert rocm_plan["vllm_install"] == expected
    builds = rocm_build_matrix(rocm_plan["arches"], rocm_plan["vllm_install"])
    assert {b["vllm_source"] for b in builds} == {expected}
    if expected == "wheel":
        assert len(builds) == 1  # one image for the whole set
    # Consumer arches always build from source, one image each.
    for build in builds:
        if any(a.startswith(("gfx11", "gfx12")) for a in build["arches"]):
            assert build["vllm_source"] == "source" and len(build["arches"]) == 1


@pytest.mark.parametrize("ref", ["main", "8a3f2c1d", "releases/v0.26", "feature/x"])
def test_wheels_exist_for_releases_only(ref):
    assert vllm_install_for("auto", "gfx950", INDEX, ref) == "source"
    with pytest.raises(PlanError) as excinfo:
        vllm_install_for("wheel", "gfx950", INDEX, ref)
    assert f"aic_vllm_ref {ref!r} is not a release" in str(excinfo.value)


@pytest.mark.parametrize("ref", ["v0.26.0", "0.26.0", "v0.26", "v0.26.0rc1", "v0.26.0.post1"])
def test_release_refs_take_the_wheel(ref):
    assert vllm_install_for("auto", "gfx942;gfx950", INDEX, ref) == "wheel"


def test_wheel_error_names_every_field_that_does_not_fit():
    message = str(pytest.raises(PlanError, vllm_install_for, "wheel", "gfx942;gfx1151;gfx90a", "", "main").value)
    for part in (
        "aic_vllm_install",
        "aic_rocm_arches has gfx1151, gfx90a",
        "aic_vllm_wheel_index_url is empty",
        "aic_vllm_ref 'main' is not a release",
        "aic_vllm_install: source",
    ):
        assert part in message, (part, message)


def test_wheel_with_an_empty_arch_set_fails():
    with pytest.raises(PlanError, match=r"aic_rocm_arches is empty"):
        vllm_install_for("wheel", [], INDEX, "v0.26.0")
    assert vllm_install_for("auto", [], INDEX, "v0.26.0") == "source"  # the matrix then reports the empty set


@pytest.mark.parametrize("choice", ["pip", "Wheel", "prebuilt", "true", "src"])
def test_unknown_choice_names_the_field_and_the_choices(choice):
    with pytest.raises(PlanError) as excinfo:
        build_plan(rocm(aic_vllm_install=choice))
    assert str(excinfo.value) == f"aic_vllm_install: {choice!r} is not one of auto, source, wheel"


@pytest.mark.parametrize("choice", ["", None, "  "])
def test_unset_choice_means_auto(choice):
    plan, _dummy = build_plan(rocm(aic_vllm_install=choice, aic_vllm_wheel_index_url=INDEX))
    assert plan["images"]["rocm"]["vllm_install"] == "wheel"  # default arches: gfx950


def test_defaults_build_from_source():
    """No wheel index is configured by default (none was published for ROCm 7.14 with AMD's torch)."""
    assert DEFAULTS["aic_vllm_install"] == "auto"
    assert DEFAULTS["aic_vllm_wheel_index_url"] == ""
    for inputs in ({}, rocm()):
        plan, _dummy = build_plan(inputs)
        assert plan["images"]["rocm"]["vllm_install"] == "source"
        assert plan["images"]["rocm"]["vllm_wheel_index_url"] == ""


@pytest.mark.parametrize("index", ["ftp://x/", "https://a b/", "https://x/$HOME", "wheels.example/rocm", 'https://x/"'])
def test_a_bad_wheel_index_names_the_field(index):
    with pytest.raises(PlanError, match=r"^aic_vllm_wheel_index_url: .* is not an http\(s\) URL"):
        build_plan(rocm(aic_vllm_wheel_index_url=index))


def test_spur_builds_vllm_from_source():
    values = yaml.safe_load((REPO / "inventories" / "spur" / "group_vars" / "all" / "main.yml").read_text())
    assert values["aic_vllm_install"] == "source"
    values["aic_gpus"] = "2"
    plan, _dummy = build_plan(values)
    assert plan["images"]["rocm"]["vllm_install"] == "source"
    # Even where a site configures a wheel index, SPUR's choice stays source.
    plan, _dummy = build_plan(dict(values, aic_vllm_wheel_index_url=INDEX))
    assert plan["images"]["rocm"]["vllm_install"] == "source"
    assert rocm_build_matrix(plan["images"]["rocm"]["arches"], "source") == [
        {"arches": ["gfx950"], "arch_list": "gfx950", "vllm_source": "source", "suffix": "gfx950"}
    ]


@pytest.mark.parametrize("value", ["auto", None, 1])
def test_matrix_takes_only_a_resolved_choice(value):
    with pytest.raises(AnsibleFilterError, match=r"^aic_vllm_install: rocm_build_matrix needs wheel or source"):
        rocm_build_matrix("gfx950", value)
