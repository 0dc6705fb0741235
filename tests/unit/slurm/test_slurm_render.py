"""The Slurm/SPUR renderers (plugins/module_utils/slurm.py, plugins/filter/slurm.py): golden command lines of both
dialects, the job script, bad input, and parsing what sbatch/squeue/scontrol/sacct print."""

from __future__ import annotations

import pathlib
import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.filter import slurm as slurm_filters
from ansible_collections.aic.stack.plugins.module_utils import slurm

SCRIPT = "/logs/.submit/cliff-0123456789ab.sbatch"


def spec(**overrides):
    base = {
        "name": "cliff",
        "command": "echo hello\n",
        "dialect": "slurm",
        "nodes": 1,
        "gpus": 0,
        "time_limit": "",
        "partition": "",
        "constraint": "",
        "chdir": "",
        "controller": "",
        "extra_args": [],
        "env": {},
        "logs_root": "/logs",
        "requeue": False,
    }
    base.update(overrides)
    return base


# -- golden command lines ---------------------------------------------------------------------------------------------
def test_spur_dialect_golden():
    argv = slurm.sbatch_argv(
        spec(
            dialect="spur",
            controller="spur-ctl:6817",
            gpus=1,
            time_limit="03:00:00",
            partition="amd-spur",
            constraint="",
            nodelist="crsuse2-m2m-001",
        ),
        SCRIPT,
    )
    assert argv == [
        "sbatch",
        "--controller",
        "spur-ctl:6817",
        "--job-name=cliff",
        "--nodes=1",
        "--gpus=1",
        "--gres=",
        "--time=03:00:00",
        "--partition=amd-spur",
        "--constraint=",
        "--nodelist=crsuse2-m2m-001",
        "--output=/dev/null",
        "--error=/dev/null",
        SCRIPT,
    ]
    assert "--no-requeue" not in argv
    assert "--parsable" not in argv
    assert "--wait" not in argv
    assert [a for a in argv if a.startswith("--gres")] == ["--gres="]


def test_spur_without_gpus_or_controller_still_clears_gres_and_passes_the_constraint():
    argv = slurm.sbatch_argv(spec(dialect="spur"), SCRIPT)
    assert argv == [
        "sbatch",
        "--job-name=cliff",
        "--nodes=1",
        "--gres=",
        "--constraint=",
        "--output=/dev/null",
        "--error=/dev/null",
        SCRIPT,
    ]


def test_slurm_dialect_golden():
    argv = slurm.sbatch_argv(
        spec(
            gpus=2,
            nodes=2,
            time_limit="45",
            partition="defq",
            constraint="GFX942&NVME",
            chdir="/work",
            extra_args=["--cpus-per-task=8"],
        ),
        SCRIPT,
    )
    assert argv == [
        "sbatch",
        "--parsable",
        "--job-name=cliff",
        "--nodes=2",
        "--gres=gpu:2",
        "--time=45",
        "--partition=defq",
        "--constraint=GFX942&NVME",
        "--chdir=/work",
        "--no-requeue",
        "--output=/dev/null",
        "--error=/dev/null",
        "--cpus-per-task=8",
        SCRIPT,
    ]


def test_slurm_dialect_never_renders_an_empty_gres():
    argv = slurm.sbatch_argv(spec(gpus=0, requeue=True), SCRIPT, sbatch="/usr/bin/sbatch")
    assert argv == [
        "/usr/bin/sbatch",
        "--parsable",
        "--job-name=cliff",
        "--nodes=1",
        "--output=/dev/null",
        "--error=/dev/null",
        SCRIPT,
    ]
    assert not any(a.startswith("--gres") for a in argv)
    assert not any(a.startswith("--constraint") for a in argv)  # empty: omitted on Slurm


def test_a_spec_without_a_constraint_key_renders_as_before():
    base = spec()
    del base["constraint"]
    assert "--constraint=" not in slurm.sbatch_argv(base, SCRIPT)
    assert "--constraint=" in slurm.sbatch_argv(dict(base, dialect="spur"), SCRIPT)


# -- the job script ---------------------------------------------------------------------------------------------------
def test_job_script_writes_logs_and_exit_file():
    text = slurm.job_script(spec(env={"HF_HOME": "/shared nfs/hf", "N": 3}, command="trap 'exit 0' EXIT\nexit 3"))
    assert text.startswith("#!/bin/bash\n")
    assert "_aic_dir=/logs/$_aic_job_id" in text
    assert 'exec >>"$_aic_dir"/cliff.out 2>>"$_aic_dir"/cliff.err' in text
    assert "export HF_HOME='/shared nfs/hf'" in text
    assert "export N=3" in text
    assert "(\ntrap 'exit 0' EXIT\nexit 3\n)\n_aic_rc=$?" in text
    assert text.rstrip().endswith('exit "$_aic_rc"')
    assert not [line for line in text.splitlines() if line.startswith("#SBATCH")]
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_job_script_runs_and_records_exit_code(tmp_path):
    """Run the rendered script with bash as Slurm would: the body's exit code lands in the .exit file, and a body
    whose EXIT trap would turn it into 0 cannot clobber it."""
    text = slurm.job_script(
        spec(logs_root=str(tmp_path), command="trap 'echo bye' EXIT\necho out; echo err >&2; exit 3", env={"X": "a b"})
    )
    proc = subprocess.run(["bash", "-c", text], env={"SLURM_JOB_ID": "77", "PATH": "/usr/bin:/bin"}, check=False)
    assert proc.returncode == 3
    files = slurm.job_files(spec(logs_root=str(tmp_path)), "77")
    assert pathlib.Path(files["exit"]).read_text() == "3\n"
    assert pathlib.Path(files["out"]).read_text() == "out\nbye\n"
    assert pathlib.Path(files["err"]).read_text().splitlines()[-1] == "err"


def test_job_files():
    assert slurm.job_files(spec(logs_root="/a/b/"), 12) == {
        "dir": "/a/b/12",
        "out": "/a/b/12/cliff.out",
        "err": "/a/b/12/cliff.err",
        "exit": "/a/b/12/cliff.exit",
    }


# -- bad input --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dialect": "pbs"}, "dialect must be one of slurm, spur"),
        ({"gpus": -1}, "gpus must be an integer >= 0 (got -1)"),
        ({"gpus": "two"}, "gpus must be an integer >= 0"),
        ({"nodes": 0}, "nodes must be an integer >= 1"),
        ({"command": ""}, "command must be a non-empty script body"),
        ({"command": "  \n"}, "command must be a non-empty script body"),
        ({"name": "my job"}, "name must be made of"),
        ({"logs_root": "logs"}, "logs_root must be an absolute path"),
        ({"controller": "ctl:6817"}, "controller is only used by the spur dialect"),
        ({"extra_args": ["--gres=gpu:1"]}, "is set by the role itself"),
        ({"extra_args": ["--constraint=CPUONLY"]}, "is set by the role itself"),
        ({"extra_args": ["-C", "CPUONLY"]}, "is set by the role itself"),
        ({"extra_args": ["--nodelist=node1"]}, "is set by the role itself"),
        ({"extra_args": ["-w", "node1"]}, "is set by the role itself"),
        ({"nodelist": "node1 node2"}, "nodelist must not contain whitespace"),
        ({"nodelist": ["node1"]}, "nodelist must be a Slurm hostlist string"),
        ({"constraint": ["CPUONLY"]}, "constraint must be a string"),
        ({"constraint": "GFX942 & NVME"}, "constraint must not contain whitespace"),
        ({"extra_args": "--exclusive"}, "extra_args must be a list of strings"),
        ({"dialect": "spur", "extra_args": ["--no-requeue"]}, "not supported by SPUR"),
        ({"dialect": "spur", "extra_args": ["--parsable"]}, "not supported by SPUR"),
        ({"env": {"1X": "a"}}, "not a valid environment variable name"),
        ({"time_limit": "an hour"}, "time_limit must be a Slurm time"),
    ],
)
def test_bad_input(overrides, message):
    with pytest.raises(slurm.SlurmSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        slurm.sbatch_argv(spec(**overrides), SCRIPT)


def test_filter_names_the_role_variable():
    with pytest.raises(AnsibleFilterError, match=r"slurm_job: slurm_job_gpus must be an integer >= 0 \(got -1\)"):
        slurm_filters.slurm_job_spec(spec(gpus=-1), "slurm_job_")
    with pytest.raises(AnsibleFilterError, match="slurm_job: dialect must be one of"):
        slurm_filters.slurm_sbatch_argv(spec(dialect="lsf"), SCRIPT)


def test_filters_are_registered():
    names = slurm_filters.FilterModule().filters()
    assert set(names) == {
        "slurm_job_spec",
        "slurm_sbatch_argv",
        "slurm_job_script",
        "slurm_job_files",
        "slurm_job_id",
        "slurm_inner_playbook",
        "slurm_node_lost",
    }


def test_the_slurm_dialect_passes_a_nodelist_too():
    argv = slurm.sbatch_argv(spec(nodelist="node[1-2]"), SCRIPT)
    assert "--nodelist=node[1-2]" in argv
    assert not [a for a in slurm.sbatch_argv(spec(), SCRIPT) if a.startswith("--nodelist")]


def test_the_inner_playbook_keeps_every_inventory_in_order_and_quotes_each_word():
    command = slurm_filters.slurm_inner_playbook(
        "/venv/bin/ansible-playbook",
        ["inventories/spur", "inventories/rehearsal", "/var/lib/x/bed.yml"],
        "/repo/playbooks/bench.yml",
        "node1",
        ['{"cliff_bench_job_id": "a b"}', "ansible_connection=local"],
    )
    assert command == (
        "/venv/bin/ansible-playbook -i inventories/spur -i inventories/rehearsal -i /var/lib/x/bed.yml "
        '/repo/playbooks/bench.yml --limit node1 -e \'{"cliff_bench_job_id": "a b"}\' -e ansible_connection=local'
    )


@pytest.mark.parametrize(
    ("inventories", "limit", "message"),
    [([], "node1", "inventories must be a non-empty list"), ("inventories/spur", "node1", "inventories must be"),
     (["inventories/spur"], "", "limit must name the inventory host")],
)  # fmt: skip
def test_the_inner_playbook_refuses_what_cannot_run(inventories, limit, message):
    with pytest.raises(AnsibleFilterError, match=message):
        slurm_filters.slurm_inner_playbook("ansible-playbook", inventories, "bench.yml", limit)


# -- parsing ----------------------------------------------------------------------------------------------------------
def test_parse_job_id():
    assert slurm.parse_job_id("42\n") == "42"
    assert slurm.parse_job_id("42;cluster\n") == "42"
    assert slurm.parse_job_id("Submitted batch job 4711\n", "spur") == "4711"
    with pytest.raises(slurm.SlurmSpecError, match="no 'Submitted batch job N'"):
        slurm.parse_job_id("error: connection refused localhost:6817", "spur")
    with pytest.raises(slurm.SlurmSpecError, match="printed no job id"):
        slurm.parse_job_id("", "slurm")


def test_parse_squeue_state():
    assert slurm.parse_squeue_state("41|RUNNING\n42|PENDING\n", "42") == "PENDING"
    assert slurm.parse_squeue_state("41|RUNNING\n", "42") is None
    table = (
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
        "               142  amd-spur    other     bob  R       1:01      1 crsuse2-m2m-002\n"
        "                42  amd-spur    cliff    alice CG      0:01      1 crsuse2-m2m-001\n"
    )
    assert slurm.parse_squeue_state(table, "42", "spur") == "COMPLETING"
    assert slurm.parse_squeue_state(table, "4", "spur") is None
    assert slurm.squeue_argv("spur", "ctl:1") == ["squeue", "--controller", "ctl:1"]
    assert slurm.squeue_argv() == ["squeue", "--noheader", "--format=%i|%T"]


def test_scontrol_and_sacct():
    fields = slurm.parse_scontrol_job(
        "JobId=4 JobName=wrap JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 NodeList=vm NumNodes=1 "
        "TRES=cpu=1,node=1,billing=1 TresPerNode=gres:gpu:1"
    )
    assert slurm.exit_code_from_scontrol(fields) == ("FAILED", 3)
    assert slurm.gpus_per_node(fields) == 1
    assert slurm.exit_code_from_scontrol({"JobState": "CANCELLED", "ExitCode": "0:15"}) == ("CANCELLED", 143)
    assert slurm.gpus_per_node({"TRES": "cpu=8,gres/gpu=4", "NumNodes": "2"}) == 2
    assert slurm.gpus_per_node({"TRES": "cpu=1"}) is None
    assert slurm.parse_sacct("9|COMPLETED|0:0\n", "9") == ("COMPLETED", 0)
    assert slurm.parse_sacct("", "9") == (None, None)


def test_expand_hostlist():
    assert slurm.expand_hostlist("n[01-03,7],gpu-a[1-2]x,login") == [
        "n01",
        "n02",
        "n03",
        "n7",
        "gpu-a1x",
        "gpu-a2x",
        "login",
    ]
    assert slurm.expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    with pytest.raises(slurm.SlurmSpecError, match="unbalanced"):
        slurm.expand_hostlist("n[1-2")
