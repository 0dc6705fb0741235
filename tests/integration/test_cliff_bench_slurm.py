"""make cliff-kvd CLIFF_WHERE=slurm on the real single-node Slurm: the controller resolves the profile and submits
one batch job that runs playbooks/bench.yml with a local connection on the node; the play's result is the job's, its
output lands in logs/<job id>/ and, CLIFF_JOB being empty, the results in logs/<job id>/results/. The job asks for
its GPU (the single-node Slurm advertises 2 fake gpu gres), partition and constraint in both dialects. Bad input fails
before anything is submitted. The spur dialect's command line is checked in check mode (nothing submitted), with the
local inventory and with inventories/spur's own group_vars."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from .conftest import REPO, changed_tasks, failures, run_playbook
from .test_slurm_job import SUBMIT_TASK, VENV_BIN, facts, job_ids_named, slurm, unique

pytestmark = pytest.mark.integration

JOB_NAME = "aic-cliff-bench"


@pytest.fixture(scope="module")
def bench_job(slurm_conf):
    """Run the one-arm, one-level benchmark as a Slurm job through make; (job id, make's stdout)."""
    env = {**os.environ, "VENV": str(REPO / ".venv"), "SLURM_CONF": slurm_conf}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    proc = subprocess.run(
        [
            "make",
            "cliff-kvd",
            "CLIFF_WHERE=slurm",
            "CLIFF_CONCURRENCY=1",
            "CLIFF_ITERATIONS=1",
            "CLIFF_ARMS=dram",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    match = re.search(rf"job (\d+) \({JOB_NAME}\): exit 0, COMPLETED", proc.stdout)
    assert match, proc.stdout[-4000:]
    return match.group(1), proc.stdout


def test_the_benchmark_runs_in_the_job_not_on_the_controller(bench_job, slurm_conf):
    job_id, stdout = bench_job
    assert job_id in job_ids_named(slurm_conf, JOB_NAME)
    fields = slurm(slurm_conf, "scontrol", "show", "job", "-o", job_id).stdout
    assert "JobState=COMPLETED" in fields
    assert "TimeLimit=02:00:00" in fields  # the cliff_kvd profile's slurm_time
    # The job asked for its GPU (cliff_bench_slurm_gpus, 1 by default) and ran in the cluster's default partition.
    assert "TresPerNode=gres:gpu:1" in fields
    assert "Partition=debug" in fields
    assert "--gres=gpu:1" in stdout  # the "Submitting: sbatch ..." line
    assert "--constraint" not in stdout  # empty: none on Slurm
    job_dir = REPO / "logs" / job_id
    assert (job_dir / f"{JOB_NAME}.exit").read_text() == "0\n"
    out = (job_dir / f"{JOB_NAME}.out").read_text()
    # The job ran the benchmark play itself (cliff_bench_where=host there) and measured the dram arm ...
    assert "TASK [cliff_bench : Run the ladder of the arm (warm-up, drain wait, bursts)]" in out
    assert re.search(r"localhost\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", out), out[-3000:]
    # ... while the controller only submitted and followed it.
    assert "Run the ladder of the arm" not in stdout
    assert "Deploy LMCache for the arm" not in stdout


def test_results_land_next_to_the_job_output_when_cliff_job_is_empty(bench_job):
    job_id, _ = bench_job
    results = REPO / "logs" / job_id / "results"
    with open(results / "cliff-results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["arm"], int(r["concurrency"]), int(r["iter"])) for r in rows] == [("dram", 1, 0)]
    assert int(rows[0]["ok_count"]) == 1 and int(rows[0]["err_count"]) == 0
    assert int(float(rows[0]["lmcache_requested_tokens"])) > 0  # the dram arm went through LMCache
    doc = json.loads((results / "cliff-results.json").read_text())
    assert doc["profile"]["concurrency"] == [1]
    assert doc["profile"]["arms"] == ["dram"]
    assert sorted(doc["cliffs"]) == ["dram"]


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


def test_restore_the_inventory_stack(local_stack):
    # The dram arm left LMCache without its L2 tier; the next tests expect the inventory's stack.
    # The session's default deploy (conftest.py): the next module that needs the default stack, or the end of the
    # session, deploys nothing more.
    runner = local_stack.deploy()
    assert runner.status == "successful", failures(runner)
