"""image_build_where=slurm on the real single-node Slurm: the build runs as a batch job on the node, the play's
result is the job's, and the job's output lands in logs/<job id>/. A failing build fails the job and the play and
ships nothing."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from .conftest import REPO, failures, run_playbook

pytestmark = pytest.mark.integration

ARTIFACTS = REPO / ".work" / "artifacts"
CURRENT = ARTIFACTS / "aic-stack-cpu.current.json"


def snapshot():
    """Content hash of every small file and (size, mtime, inode) of every tarball of the stack image's artifacts (what
    a build writes; a rollout's distribution saves the monitoring images' next to them, which is not the build's)."""
    state = {}
    for name in sorted(n for n in os.listdir(ARTIFACTS) if n.startswith("aic-stack-cpu")):
        path = ARTIFACTS / name
        if name.endswith(".tar.zst"):
            st = path.stat()
            state[name] = (st.st_size, st.st_mtime_ns, st.st_ino)
        else:
            state[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


# A site's own playbook, outside the checkout, that uses the role's Slurm entry point: the job must still run the
# collection's build playbook from the collection's root (not from the calling playbook's directory).
SITE_PLAYBOOK = """\
- name: Build the stack in a batch job (a site's own playbook)
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Build in Slurm
      ansible.builtin.include_role:
        name: aic.stack.image_build
        tasks_from: slurm
"""


def build_in_slurm(session_tmp, slurm_conf, playbook="playbooks/build.yml", **extra):
    return run_playbook(
        playbook,
        session_tmp,
        extravars={
            "image_build_where": "slurm",
            "slurm_job_client_env": {"SLURM_CONF": slurm_conf},
            # Look at the job every second, not every 5 (the role's default): the play ends when the job does.
            "slurm_job_poll_interval": 1,
            **extra,
        },
    )


def job_id(runner):
    for event in runner.events:
        res = event.get("event_data", {}).get("res", {})
        if event.get("event") == "runner_on_ok" and "slurm_job_id" in res.get("ansible_facts", {}):
            return str(res["ansible_facts"]["slurm_job_id"])
    for event in runner.events:
        stdout = str(event.get("stdout", ""))
        if "Submitted batch job" in stdout:
            return stdout.split("Submitted batch job")[1].split()[0]
    raise AssertionError("no job id in the events")


def test_build_runs_as_a_slurm_job_and_its_log_is_collected(session_tmp, slurm_conf):
    before = snapshot()
    runner = build_in_slurm(session_tmp, slurm_conf)
    assert runner.status == "successful", failures(runner)
    out = (REPO / "logs" / job_id(runner) / "aic-build.out").read_text()
    # The job ran the build playbook itself; the images exist, so it built and saved nothing.
    assert "TASK [image_build : Compute the stack image tag from every build input]" in out
    assert "changed=0" in out and "failed=0" in out
    assert snapshot() == before


def test_a_failing_build_fails_the_job_and_the_play_and_ships_nothing(session_tmp, slurm_conf):
    before = snapshot()
    current = json.loads(CURRENT.read_text())
    site = session_tmp / "site"
    site.mkdir(exist_ok=True)
    (site / "build-in-slurm.yml").write_text(SITE_PLAYBOOK)
    runner = build_in_slurm(
        session_tmp,
        slurm_conf,
        site / "build-in-slurm.yml",
        # The site keeps its job logs where it likes (the role's default is logs/ beside the playbooks' directory).
        slurm_job_logs_root=str(site / "logs"),
        image_build_slurm_extra_vars={"image_build_extra_steps": ["echo injected build failure >&2; exit 3"]},
    )
    assert runner.status == "failed"
    message = " ".join(failures(runner))
    assert "exited with code 2" in message, message  # ansible-playbook's exit code for a failed task
    out = (site / "logs" / job_id(runner) / "aic-build.out").read_text()
    # The job ran the collection's build playbook (it failed at the build, not for a playbook it could not find).
    assert "TASK [image_build : Compute the stack image tag from every build input]" in out
    assert "injected build failure" in out
    assert snapshot() == before
    assert json.loads(CURRENT.read_text()) == current
