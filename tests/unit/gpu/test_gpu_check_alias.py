"""The old module name aic.stack.gpu_info still runs aic.stack.gpu_check, through Ansible's own plugin routing
(meta/runtime.yml), with a deprecation warning that names the new module and the release that removes the alias."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]


def run_adhoc(module):
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"), "ANSIBLE_NOCOLOR": "1"}
    env.pop("ANSIBLE_CONFIG", None)
    return subprocess.run(
        [str(pathlib.Path(sys.executable).parent / "ansible"), "localhost", "-m", module, "-a", "min_devices=0"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_the_old_name_runs_the_new_module_and_says_so():
    proc = run_adhoc("aic.stack.gpu_info")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, out
    assert "localhost | SUCCESS" in out and re.search(r'count"?: 0\b', out), out
    assert "aic.stack.gpu_info is now aic.stack.gpu_check" in out
    assert "removed from collection 'aic.stack' version 1.0.0" in out


def test_the_new_name_runs_without_a_deprecation():
    proc = run_adhoc("aic.stack.gpu_check")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "gpu_info" not in out


def test_the_routing_points_at_a_module_that_exists():
    routing = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["plugin_routing"]["modules"]
    for old, route in routing.items():
        new = route["redirect"].removeprefix("aic.stack.")
        assert (REPO / "plugins" / "modules" / f"{new}.py").is_file(), (old, new)
        assert not (REPO / "plugins" / "modules" / f"{old}.py").exists(), old
