"""Every task a role runs carries the role's tags, the way prometheus-community's roles tag theirs: ``<role>`` (the
whole role) and one phase, ``<role>_install`` (images and packages), ``<role>_configure`` (files and directories)
or ``<role>_run`` (containers, checks, jobs). An operator's own play that uses a role (``roles: [aic.stack.vllm]``)
can then run one phase with ``--tags vllm_run``; the preflight role's tasks are ``always`` (nothing runs on an
unvalidated plan). Checked on the task files as written (every top-level task; tasks in a block inherit its tags),
and through ansible-playbook --list-tasks on a play that uses two roles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
PHASES = ("install", "configure", "run")


def task_files(role):
    return sorted((REPO / "roles" / role / "tasks").glob("*.yml"))


@pytest.mark.parametrize("role", ROLES)
def test_every_task_of_the_role_is_tagged_with_the_role_and_one_phase(role):
    untagged = []
    for path in task_files(role):
        for task in yaml.safe_load(path.read_text()) or []:
            tags = task.get("tags") or []
            if role == "preflight":
                ok = "always" in tags
            else:
                ok = role in tags and len([t for t in tags if t in {f"{role}_{p}" for p in PHASES}]) == 1
            if not ok:
                untagged.append(f"{path.name}: {task.get('name')!r} has tags {tags}")
    assert not untagged, "\n".join(untagged)


def test_a_phase_tag_picks_that_roles_tasks_only(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [{"name": "Two roles", "hosts": "localhost", "gather_facts": False, "roles": ["l2_dirs", "vllm"]}]
        )
    )
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play), "--list-tasks",
         "--tags", "vllm_run"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    listed = [line.strip() for line in out.splitlines() if " : " in line]
    vllm = [line for line in listed if line.startswith("vllm : ") and "Validating arguments" not in line]
    assert vllm and all("vllm_run" in line for line in vllm), out
    assert not [line for line in listed if line.startswith("l2_dirs : ") and "Validating arguments" not in line], out
