"""The aic.stack.slurm inventory plugin on the REAL single-node Slurm of scripts/slurm-up.sh (2 fake gpu gres): a held
allocation of --gres=gpu:2 becomes a host with its own GPU ids, read from `scontrol show job -d`."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import uuid

import pytest

from .conftest import REPO

pytestmark = pytest.mark.integration

VENV_BIN = pathlib.Path(sys.executable).parent


def slurm(conf, *argv, check=True):
    return subprocess.run(
        list(argv), capture_output=True, text=True, env={**os.environ, "SLURM_CONF": conf}, check=check
    )


def _plain(value):
    # ansible-inventory 2.19 marks strings from plugins as unsafe in its JSON.
    if isinstance(value, dict) and "__ansible_unsafe" in value:
        return value["__ansible_unsafe"]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def ansible_inventory(config):
    """``ansible-inventory -i config --list`` outside any Slurm job: (parsed JSON, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "AIC_SLURM_"))}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-inventory"), "-i", str(config), "--list"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


@pytest.fixture
def gpu_job(slurm_conf, tmp_path):
    """A running job holding both fake GPUs (sbatch --gres=gpu:2 --wrap 'sleep 300'); cancelled at the end."""
    name = f"aic-test-slurm-inv-{uuid.uuid4().hex[:6]}"
    job_id = slurm(
        slurm_conf,
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        "--gres=gpu:2",
        "--output=/dev/null",
        f"--chdir={tmp_path}",
        "--wrap=sleep 300",
    ).stdout.strip()
    try:
        deadline = time.monotonic() + 60
        while "JobState=RUNNING" not in slurm(slurm_conf, "scontrol", "show", "job", "-o", job_id).stdout:
            assert time.monotonic() < deadline, f"job {job_id} did not start"
            time.sleep(0.3)
        yield job_id
    finally:
        slurm(slurm_conf, "scancel", job_id, check=False)


def test_the_host_of_a_gpu_job_gets_its_gpu_ids(slurm_conf, gpu_job, tmp_path):
    config = tmp_path / "aic-slurm.yml"
    config.write_text(
        f'plugin: aic.stack.slurm\njob_id: "{gpu_job}"\nslurm_conf: {slurm_conf}\n'
        "compose:\n  aic_gpus: slurm_job_gpu_ids\n"
    )
    inventory, _dummy = ansible_inventory(config)
    node = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    assert inventory["aic_nodes"]["hosts"] == [node]
    hostvars = {k: _plain(v) for k, v in inventory["_meta"]["hostvars"][node].items()}
    assert hostvars["slurm_job_gpu_ids"] == ["0", "1"]
    assert hostvars["aic_gpus"] == ["0", "1"]
    # The existing host variables are still there.
    assert hostvars["slurm_job_id"] == gpu_job
    assert hostvars["slurm_job_gpus"] == 2
    assert hostvars["slurm_job_nodelist"] == node
    assert hostvars["slurm_node_index"] == 0
    # What the plugin parsed is what Slurm prints.
    detail = slurm(slurm_conf, "scontrol", "show", "job", "-d", gpu_job).stdout
    assert f"Nodes={node} " in detail and "GRES=gpu:2(IDX:0-1)" in detail


def test_a_finished_job_has_no_gpu_ids(slurm_conf, tmp_path):
    job_id = slurm(
        slurm_conf, "sbatch", "--parsable", "--gres=gpu:1", "--output=/dev/null", f"--chdir={tmp_path}", "--wrap=true"
    ).stdout.strip()
    deadline = time.monotonic() + 60
    while "JobState=COMPLETED" not in slurm(slurm_conf, "scontrol", "show", "job", "-o", job_id).stdout:
        assert time.monotonic() < deadline, f"job {job_id} did not complete"
        time.sleep(0.3)
    config = tmp_path / "aic-slurm.yml"
    config.write_text(f'plugin: aic.stack.slurm\njob_id: "{job_id}"\nslurm_conf: {slurm_conf}\n')
    inventory, _dummy = ansible_inventory(config)
    # Slurm keeps a finished job's NodeList (the plugin lists it, as before) but no longer holds its GPUs.
    (host,) = inventory["aic_nodes"]["hosts"]
    hostvars = inventory["_meta"]["hostvars"][host]
    assert "slurm_job_gpu_ids" not in hostvars
    assert hostvars["slurm_job_gpus"] == 1
