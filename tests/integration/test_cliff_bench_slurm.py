"""The cliff benchmark's batch job as the controller writes it (cliff_bench_where=slurm): the job it would submit asks
for its GPUs, partition and constraint in both dialects and runs playbooks/bench.yml with the operator's input and a
local connection on the node; bad input fails before anything is submitted (against the real single-node Slurm).
Check mode everywhere, so nothing is submitted and no container is touched. The benchmark really run as a job, on a
node of a cluster, with its logs and results, is in test_rehearsal (make cliff-spur-l2 on the rehearsal cluster)."""

from __future__ import annotations

import json
import shlex

import pytest

from .conftest import REPO, changed_tasks, failures, run_playbook
from .test_slurm_job import SUBMIT_TASK, VENV_BIN, facts, job_ids_named, unique

pytestmark = pytest.mark.integration

JOB_NAME = "aic-cliff-bench"


@pytest.mark.parametrize(
    ("extravars", "message"),
    [
        ({"cliff_bench_overrides": {"concurency": "1"}}, "cliff_bench: concurency: unknown cliff profile key"),
        ({"cliff_bench_overrides": {"concurrency": "1,x"}}, "cliff_bench: concurrency: 'x' is not an integer"),
        ({"cliff_bench_overrides": {"arms": "dram,gpu"}}, "cliff_bench: arms: unknown arm 'gpu'"),
        ({"cliff_bench_where": "cluster"}, "cliff_bench_where must be one of: host, slurm, got: cluster"),
    ],
)
def test_bad_input_fails_before_anything_is_submitted(slurm_conf, tmp_path, extravars, message):
    name = unique("cliff-bad")
    runner = run_playbook(
        "playbooks/bench.yml",
        tmp_path,
        extravars={
            "cliff_bench_where": "slurm",
            "cliff_bench_slurm_job_name": name,
            "slurm_job_client_env": {"SLURM_CONF": slurm_conf},
            **extravars,
        },
    )
    assert runner.status == "failed"
    assert any(message in f for f in failures(runner)), failures(runner)
    assert SUBMIT_TASK not in changed_tasks(runner)
    assert job_ids_named(slurm_conf, name) == []
    # The benchmark play never started on the controller either (no preflight, no container touched).
    assert not [e for e in runner.events if e.get("event_data", {}).get("role") == "preflight"]


def test_spur_dialect_submits_the_bench_playbook_with_the_operators_input(tmp_path):
    overrides = {"concurrency": "1,2", "iterations": "", "arms": "dram"}
    runner = run_playbook(
        "playbooks/bench.yml",
        tmp_path,
        extravars={
            "cliff_bench_where": "slurm",
            "cliff_bench_profile": "cliff-spur-l2",
            "cliff_bench_overrides": overrides,
            "cliff_bench_job_id": "spur-run",
            "cliff_bench_target": "router",
            "cliff_bench_slurm_extra_vars": {"cliff_bench_arm_timeout": 600, "cliff_bench_job_id": "loses"},
            "cliff_bench_slurm_gpus": 1,
            "cliff_bench_slurm_partition": "amd-spur",
            "cliff_bench_slurm_constraint": "",
            "slurm_job_dialect": "spur",
            "slurm_job_controller": "spur-ctl:6817",
        },
        cmdline="--check",
    )
    assert runner.status == "successful", failures(runner)
    argv = facts(runner, "slurm_job_sbatch_argv")
    script_path = argv[-1]
    assert script_path.startswith(f"{REPO}/logs/.submit/{JOB_NAME}-") and script_path.endswith(".sbatch")
    assert argv[:-1] == [
        "sbatch",
        "--controller",
        "spur-ctl:6817",
        f"--job-name={JOB_NAME}",
        "--nodes=1",
        "--gpus=1",  # SPUR has no GPU gres: --gpus=N, and an empty --gres= that clears one
        "--gres=",
        "--time=03:00:00",  # the cliff_spur_l2 profile's slurm_time
        "--partition=amd-spur",
        "--constraint=",  # passed even when empty: SPUR wants it
        f"--chdir={REPO}",
        "--output=/dev/null",
        "--error=/dev/null",
    ]
    script = facts(runner, "slurm_job_script")
    (line,) = [ln for ln in script.splitlines() if ln.startswith(str(VENV_BIN / "ansible-playbook"))]
    command = shlex.split(line)
    assert command[:6] == [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        str(REPO / "inventories" / "local"),
        str(REPO / "playbooks" / "bench.yml"),
        "--limit",
        "localhost",
    ]
    assert command[6] == "-e"
    assert json.loads(command[7]) == {
        "cliff_bench_arm_timeout": 600,
        "cliff_bench_profile": "cliff-spur-l2",
        "cliff_bench_overrides": overrides,
        # The operator's target travels with the job (CLIFF_TARGET=router).
        "cliff_bench_target": "router",
        "cliff_bench_job_id": "spur-run",
    }
    assert command[8:] == ["-e", "cliff_bench_where=host", "-e", "ansible_connection=local"]
    assert facts(runner, "slurm_job_id") is None
    assert SUBMIT_TASK not in changed_tasks(runner)


def test_slurm_dialect_asks_for_the_gpus_partition_and_constraint_of_the_inventory(tmp_path):
    runner = run_playbook(
        "playbooks/bench.yml",
        tmp_path,
        extravars={
            "cliff_bench_where": "slurm",
            "cliff_bench_slurm_gpus": 2,
            "cliff_bench_slurm_partition": "debug",
            "cliff_bench_slurm_constraint": "GFX942&NVME",
        },
        cmdline="--check",
    )
    assert runner.status == "successful", failures(runner)
    argv = facts(runner, "slurm_job_sbatch_argv")
    assert argv[:-1] == [
        "sbatch",
        "--parsable",
        f"--job-name={JOB_NAME}",
        "--nodes=1",
        "--gres=gpu:2",
        "--time=02:00:00",  # the cliff_kvd profile's slurm_time
        "--partition=debug",
        "--constraint=GFX942&NVME",
        f"--chdir={REPO}",
        "--no-requeue",
        "--output=/dev/null",
        "--error=/dev/null",
    ]
    assert SUBMIT_TASK not in changed_tasks(runner)


def test_inventories_spur_group_vars_shape_the_spur_job(tmp_path):
    """SPUR's group_vars as they are (dialect, partition amd-spur, --constraint=, --gpus=1), on a static inventory of
    one node whose GPU ids are its own; check mode, so nothing is submitted."""
    inventory = tmp_path / "spur-site"
    inventory.mkdir()
    (inventory / "group_vars").symlink_to(REPO / "inventories" / "spur" / "group_vars")
    (inventory / "hosts.yml").write_text(
        "all:\n  children:\n    aic_nodes:\n      hosts:\n        crsuse2-m2m-001:\n"
        "          ansible_connection: local\n          slurm_job_gpu_ids: ['3']\n"
    )
    runner = run_playbook(
        "playbooks/bench.yml",
        tmp_path,
        inventory=inventory,
        extravars={"cliff_bench_profile": "cliff_spur_l2", "slurm_job_controller": "spur-ctl:6817"},
        cmdline="--check",
    )
    assert runner.status == "successful", failures(runner)
    argv = facts(runner, "slurm_job_sbatch_argv")
    assert argv[:-1] == [
        "sbatch",
        "--controller",
        "spur-ctl:6817",
        f"--job-name={JOB_NAME}",
        "--nodes=1",
        "--gpus=1",
        "--gres=",
        "--time=03:00:00",
        "--partition=amd-spur",
        "--constraint=",
        f"--chdir={REPO}",
        "--output=/dev/null",
        "--error=/dev/null",
    ]
    script = facts(runner, "slurm_job_script")
    (line,) = [ln for ln in script.splitlines() if ln.startswith(str(VENV_BIN / "ansible-playbook"))]
    assert shlex.split(line)[1:6] == [
        "-i",
        str(inventory),
        str(REPO / "playbooks" / "bench.yml"),
        "--limit",
        "crsuse2-m2m-001",
    ]
