"""The slurm_job role, the slurm_wait module and the aic.stack.slurm inventory plugin on a REAL single-node Slurm.

A session fixture starts Slurm 22.05 on localhost with scripts/slurm-up.sh (munged, slurmctld, slurmd; no systemd;
state in /var/lib/aic-slurm or $AIC_SLURM_DIR; it is idempotent, so an already running cluster is reused and left
running). Jobs are named aic-test-slurm-*; only the test's own jobs are cancelled.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import uuid

import pytest

from .conftest import REPO, changed_tasks, failures, run_playbook

pytestmark = pytest.mark.integration

PLAYBOOK = "playbooks/slurm_job.yml"
SUBMIT_TASK = ("slurm_job", "Submit the job (not in check mode)")
VENV_BIN = pathlib.Path(sys.executable).parent


def slurm(conf, *argv, check=True):
    return subprocess.run(
        list(argv), capture_output=True, text=True, env={**os.environ, "SLURM_CONF": conf}, check=check
    )


def job_ids_named(conf, name):
    """Ids of every job with this name the controller still knows (finished ones too)."""
    out = slurm(conf, "squeue", "--noheader", "--states=all", f"--name={name}", "--format=%i").stdout
    return out.split()


def job_vars(conf, logs_root, name, command, **extra):
    return {
        "slurm_job_name": name,
        "slurm_job_command": command,
        "slurm_job_logs_root": str(logs_root),
        "slurm_job_client_env": {"SLURM_CONF": conf},
        "slurm_job_poll_interval": 1,
        "slurm_job_timeout": 120,
        **extra,
    }


def facts(runner, key):
    """The last value set_fact published for ``key``."""
    value = None
    for event in runner.events:
        if event.get("event") == "runner_on_ok":
            published = event["event_data"].get("res", {}).get("ansible_facts", {})
            if key in published:
                value = published[key]
    return value


def unique(prefix):
    return f"aic-test-slurm-{prefix}-{uuid.uuid4().hex[:6]}"


def test_job_runs_to_completion_with_logs(slurm_conf, tmp_path):
    name = unique("ok")
    logs = tmp_path / "logs"
    runner = run_playbook(
        PLAYBOOK,
        tmp_path,
        extravars=job_vars(
            slurm_conf,
            logs,
            name,
            'echo hello from $SLURM_JOB_ID\necho to-stderr >&2\necho "greeting=$AIC_GREETING"\n'
            "trap 'echo body-exit-trap' EXIT\nexit 0",
            slurm_job_env={"AIC_GREETING": "hi there"},
            # Real gres: slurm-up.sh advertises 2 counted GPUs, so --gres=gpu:1 is scheduled.
            slurm_job_gpus=1,
        ),
    )
    assert runner.status == "successful", failures(runner)
    assert SUBMIT_TASK in changed_tasks(runner)
    job_id = facts(runner, "slurm_job_id")
    assert job_id and job_id.isdigit()
    assert "--gres=gpu:1" in facts(runner, "slurm_job_sbatch_argv")
    assert "--parsable" in facts(runner, "slurm_job_sbatch_argv")
    job_dir = logs / job_id
    assert (job_dir / f"{name}.exit").read_text() == "0\n"
    out = (job_dir / f"{name}.out").read_text().splitlines()
    assert out == [f"hello from {job_id}", "greeting=hi there", "body-exit-trap"]
    err = (job_dir / f"{name}.err").read_text().splitlines()
    assert err[-1] == "to-stderr"
    assert f"job {job_id} on " in err[0]
    assert (job_dir / f"{name}.sbatch").read_text() == facts(runner, "slurm_job_script")
    assert job_ids_named(slurm_conf, name) == [job_id]
    fields = slurm(slurm_conf, "scontrol", "show", "job", "-o", job_id).stdout
    assert "JobState=COMPLETED" in fields
    assert "Requeue=0" in fields  # --no-requeue reached Slurm


def test_failing_job_fails_the_play_with_its_exit_code(slurm_conf, tmp_path):
    name = unique("fail")
    logs = tmp_path / "logs"
    runner = run_playbook(
        PLAYBOOK,
        tmp_path,
        extravars=job_vars(slurm_conf, logs, name, "echo before the failure\necho boom >&2\nexit 3"),
    )
    assert runner.status == "failed"
    msgs = failures(runner)
    assert any("exited with code 3" in m for m in msgs), msgs
    assert any("boom" in m for m in msgs), msgs  # the last stderr lines are in the message
    (job_id,) = job_ids_named(slurm_conf, name)
    assert (logs / job_id / f"{name}.exit").read_text() == "3\n"
    assert (logs / job_id / f"{name}.out").read_text() == "before the failure\n"


def test_job_past_its_timeout_is_cancelled(slurm_conf, tmp_path):
    name = unique("slow")
    runner = run_playbook(
        PLAYBOOK,
        tmp_path,
        extravars=job_vars(slurm_conf, tmp_path / "logs", name, "sleep 120", slurm_job_timeout=3),
    )
    assert runner.status == "failed"
    msgs = failures(runner)
    assert any("after 3 s; cancelled it" in m for m in msgs), msgs
    (job_id,) = job_ids_named(slurm_conf, name)
    deadline = time.monotonic() + 30
    while "JobState=CANCELLED" not in slurm(slurm_conf, "scontrol", "show", "job", "-o", job_id).stdout:
        assert time.monotonic() < deadline, "the timed-out job was not cancelled"
        time.sleep(0.5)


def test_check_mode_renders_and_submits_nothing(slurm_conf, tmp_path):
    name = unique("check")
    logs = tmp_path / "logs"
    runner = run_playbook(
        PLAYBOOK,
        tmp_path,
        extravars=job_vars(slurm_conf, logs, name, "echo never"),
        cmdline="--check",
    )
    assert runner.status == "successful", failures(runner)
    argv = facts(runner, "slurm_job_sbatch_argv")
    assert argv[:3] == ["sbatch", "--parsable", f"--job-name={name}"]
    assert "echo never" in facts(runner, "slurm_job_script")
    assert facts(runner, "slurm_job_id") is None
    assert job_ids_named(slurm_conf, name) == []
    assert not logs.exists() or not [p for p in logs.iterdir() if p.name != ".submit"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"slurm_job_gpus": -1}, "slurm_job_gpus must be an integer >= 0 (got -1)"),
        ({"slurm_job_command": ""}, "slurm_job_command must be a non-empty script body"),
        ({"slurm_job_dialect": "pbs"}, "slurm_job_dialect"),
        ({"slurm_job_dialect": "spur", "slurm_job_extra_args": ["--no-requeue"]}, "not supported by SPUR"),
    ],
)
def test_bad_input_fails_before_submitting(slurm_conf, tmp_path, overrides, message):
    name = unique("bad")
    runner = run_playbook(
        PLAYBOOK,
        tmp_path,
        extravars={**job_vars(slurm_conf, tmp_path / "logs", name, "echo never"), **overrides},
    )
    assert runner.status == "failed"
    msgs = failures(runner)
    assert any(message in m for m in msgs), msgs
    assert SUBMIT_TASK not in changed_tasks(runner)
    assert job_ids_named(slurm_conf, name) == []


def _plain(value):
    # ansible-inventory 2.19 marks strings from plugins as unsafe in its JSON.
    return value["__ansible_unsafe"] if isinstance(value, dict) and "__ansible_unsafe" in value else value


def ansible_inventory(config):
    """``ansible-inventory --list`` of the inventory source ``config``, outside any Slurm job; the parsed JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
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
    return json.loads(proc.stdout)


def test_inventory_plugin_lists_the_nodes_of_a_running_job(slurm_conf, tmp_path):
    name = unique("alloc")
    job_id = slurm(
        slurm_conf,
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        "--gres=gpu:1",
        "--output=/dev/null",
        f"--chdir={tmp_path}",
        "--wrap=sleep 120",
    ).stdout.strip()
    try:
        deadline = time.monotonic() + 30
        while "JobState=RUNNING" not in slurm(slurm_conf, "scontrol", "show", "job", "-o", job_id).stdout:
            assert time.monotonic() < deadline, f"job {job_id} did not start"
            time.sleep(0.3)
        config = tmp_path / "aic-slurm.yml"
        config.write_text(f'plugin: aic.stack.slurm\njob_id: "{job_id}"\nslurm_conf: {slurm_conf}\n')
        inventory = ansible_inventory(config)
        node = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
        assert inventory["aic_nodes"]["hosts"] == [node]
        hostvars = {k: _plain(v) for k, v in inventory["_meta"]["hostvars"][node].items()}
        assert hostvars["slurm_job_id"] == job_id
        assert hostvars["slurm_job_gpus"] == 1
        assert hostvars["slurm_job_nodelist"] == node

        # A hostlist (no job id) is expanded by the real scontrol show hostnames.
        config.write_text(f"plugin: aic.stack.slurm\nnodelist: n[01-03]\ngroup: extra\nslurm_conf: {slurm_conf}\n")
        assert ansible_inventory(config)["extra"]["hosts"] == ["n01", "n02", "n03"]
    finally:
        slurm(slurm_conf, "scancel", job_id, check=False)
