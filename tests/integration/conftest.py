"""Shared fixtures for integration tests: run real playbooks through ansible-runner."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import ansible_runner
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
LOCAL_INVENTORY = REPO / "inventories" / "local"


def run_playbook(playbook, tmp_path, inventory=LOCAL_INVENTORY, extravars=None, cmdline=None):
    """Run ``playbook`` (relative to the repo) with ansible-runner; return the Runner (status, stats, events)."""
    private = tmp_path / f"runner-{pathlib.Path(playbook).stem}"
    if private.exists():
        shutil.rmtree(private)
    private.mkdir(parents=True)
    env = {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        # ansible-runner execs ansible-playbook: use the one of this interpreter's venv.
        "PATH": os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    return ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(REPO),
        playbook=str(REPO / playbook),
        inventory=str(inventory),
        extravars=extravars or {},
        envvars=env,
        cmdline=cmdline,
        quiet=True,
    )


def failures(runner):
    """Human-readable failure messages from a runner's events."""
    out = []
    for event in runner.events:
        if event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            data = event["event_data"]
            res = data.get("res", {})
            out.append(f"{data.get('task')}: {res.get('msg')}")
            # Loops: every failed item's own message.
            out.extend(f"{data.get('task')}: {r.get('msg')}" for r in res.get("results", []) if r.get("failed"))
    return out


def changed_tasks(runner):
    """(role, task) of every task that reported changed."""
    out = []
    for event in runner.events:
        if event.get("event") == "runner_on_ok" and event["event_data"].get("res", {}).get("changed"):
            data = event["event_data"]
            out.append((data.get("role"), data.get("task")))
    return out


@pytest.fixture(scope="session")
def session_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("integration")


@pytest.fixture(scope="session")
def slurm_conf():
    """Start (or keep) the single-node Slurm of scripts/slurm-up.sh; the path of its slurm.conf."""
    state = os.environ.get("AIC_SLURM_DIR") or "/var/lib/aic-slurm"
    proc = subprocess.run(
        [str(REPO / "scripts" / "slurm-up.sh"), state],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/slurm-up.sh failed (rc {proc.returncode}; scripts/host-deps.sh installs slurm-wlm and munge):\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
    conf = f"{state}/etc/slurm.conf"
    assert f"SLURM_CONF={conf}" in proc.stdout
    return conf
