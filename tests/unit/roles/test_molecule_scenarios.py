"""Every role has a molecule scenario, and CI (scripts/run-tests.sh) runs every scenario exactly once: a scenario
added to molecule/ but not to CI's list would never run, one listed twice would run twice."""

from __future__ import annotations

import pathlib
import re

import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


def ci_molecule_calls():
    """The scenario names of each `molecule/run.sh ...` call in scripts/run-tests.sh (continuation lines joined)."""
    text = (REPO / "scripts" / "run-tests.sh").read_text().replace("\\\n", " ")
    calls = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        match = re.search(r"molecule/run\.sh((?:\s+[a-z_0-9]+)+)", line)
        if match:
            calls.append(match.group(1).split())
    return calls


def test_ci_runs_every_scenario_once():
    listed = [name for call in ci_molecule_calls() for name in call]
    assert sorted(listed) == SCENARIOS


# Roles tested through other scenarios: the internal exporter helper (node_exporter's and amd_metrics_exporter's
# scenarios run it) and the deprecated name of l2_dirs (the l2_dirs scenario's verify runs it with its old inputs).
THROUGH_OTHERS = {"exporter": "node_exporter", "nvme_slab": "l2_dirs"}


def test_every_role_that_touches_a_host_has_a_scenario():
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
    missing = sorted(set(roles) - set(SCENARIOS) - set(THROUGH_OTHERS))
    assert missing == []
    assert set(THROUGH_OTHERS.values()) <= set(SCENARIOS)


def test_every_scenario_runs_on_the_instance_image_and_starts_at_create():
    for name in SCENARIOS:
        config = yaml.safe_load((REPO / "molecule" / name / "molecule.yml").read_text())
        sequence = config["scenario"]["test_sequence"]
        # run.sh removes what a killed run left; base_image and image_build drop their test images first.
        assert sequence[:2] in (["dependency", "create"], ["dependency", "cleanup"]), (name, sequence)
        assert sequence[-1] == "destroy", (name, sequence)
        for platform in config["platforms"]:
            if "image" in platform:
                assert platform["image"] == "${AIC_MOLECULE_IMAGE:-aic-base:latest}", (name, platform)
