"""Every job the collection submits (the cliff benchmark, the build) asks for its GPUs, partition and constraint,
taken from the inventory: the include_role vars of roles/*/tasks/slurm.yml resolved against the role defaults and
inventories/spur's group_vars, then rendered by the sbatch renderer of both dialects (plugins/filter/slurm.py)."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.aic.stack.plugins.filter import slurm as slurm_filters

REPO = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = "/logs/.submit/job.sbatch"
SPUR_VARS = yaml.safe_load((REPO / "inventories" / "spur" / "group_vars" / "all" / "main.yml").read_text())
JOBS = {"cliff_bench": "cliff_bench_slurm_", "image_build": "image_build_slurm_"}


def _load(path):
    return yaml.safe_load((REPO / path).read_text())


def _resolve(value, variables):
    """A ``{{ name }}`` reference resolved against ``variables`` (what these include vars are), else the value."""
    match = re.fullmatch(r"\{\{\s*([a-z_]+)\s*\}\}", value) if isinstance(value, str) else None
    return variables[match.group(1)] if match else value


def job_spec(role, inventory_vars, **extra):
    """The slurm_job spec the role's slurm.yml submits, for an inventory's variables (extra vars last)."""
    variables = {**_load("roles/slurm_job/defaults/main.yml"), **_load(f"roles/{role}/defaults/main.yml")}
    # The node the job must run on depends on the limit host's hostvars (test_the_job_runs_on_the_limit_host_s_node).
    variables[f"{JOBS[role]}nodelist"] = ""
    variables.update(inventory_vars)
    # The collection's root, which slurm.yml sets as a fact before the include.
    variables[f"_{role}_root"] = "/repo"
    include = next(t for t in _load(f"roles/{role}/tasks/slurm.yml") if "ansible.builtin.include_role" in t)
    job_vars = {k: _resolve(v, variables) for k, v in include["vars"].items()}
    variables.update(job_vars)
    # Paths and the command are the playbook's; not what this test is about.
    variables.update(slurm_job_command="true", slurm_job_logs_root="/logs", slurm_job_chdir="/repo")
    variables.update(extra)
    # Expressions beyond a plain reference (the cliff job's time: its override or the profile's) are given by the test.
    unresolved = [k for k, v in variables.items() if k.startswith("slurm_job_") and "{{" in str(v)]
    assert not unresolved, f"give {unresolved} to job_spec()"
    template = _load("roles/slurm_job/vars/main.yml")["_slurm_job_input"]
    spec = {key: _resolve(value, variables) for key, value in template.items()}
    return slurm_filters.slurm_job_spec(spec, "slurm_job_")


def argv(spec):
    return slurm_filters.slurm_sbatch_argv(spec, SCRIPT)


@pytest.mark.parametrize("role", sorted(JOBS))
def test_the_job_takes_gpus_partition_and_constraint_from_the_inventory(role):
    prefix = JOBS[role]
    include = next(t for t in _load(f"roles/{role}/tasks/slurm.yml") if "ansible.builtin.include_role" in t)
    for key in ("gpus", "partition", "constraint"):
        assert include["vars"][f"slurm_job_{key}"] == f"{{{{ {prefix}{key} }}}}"
    # The role's defaults and argument specs agree on them.
    defaults = _load(f"roles/{role}/defaults/main.yml")
    specs = _load(f"roles/{role}/meta/argument_specs.yml")["argument_specs"]
    for entry in ("main", "slurm"):
        for key in ("gpus", "partition", "constraint"):
            option = specs[entry]["options"][f"{prefix}{key}"]
            assert option["default"] == defaults[f"{prefix}{key}"], (entry, key)
            assert option["type"] == ("int" if key == "gpus" else "str")


def test_spur_cliff_job_asks_for_one_gpu_amd_spur_and_an_empty_constraint():
    spec = job_spec("cliff_bench", SPUR_VARS, slurm_job_time_limit="03:00:00", slurm_job_controller="spur-ctl:6817")
    assert argv(spec)[:-1] == [
        "sbatch",
        "--controller",
        "spur-ctl:6817",
        "--job-name=aic-cliff-bench",
        "--nodes=1",
        "--gpus=1",
        "--gres=",
        "--time=03:00:00",
        "--partition=amd-spur",
        "--constraint=",
        "--chdir=/repo",
        "--output=/dev/null",
        "--error=/dev/null",
    ]


def test_spur_build_job_asks_for_no_gpu_amd_spur_and_an_empty_constraint():
    args = argv(job_spec("image_build", SPUR_VARS))
    assert "--partition=amd-spur" in args
    assert "--constraint=" in args
    assert "--gres=" in args
    assert not [a for a in args if a.startswith("--gpus")]


def test_slurm_dialect_cliff_job_asks_with_gres_and_a_constraint():
    site = {
        "slurm_job_dialect": "slurm",
        "cliff_bench_slurm_partition": "defq",
        "cliff_bench_slurm_constraint": "GFX942&NVME",
        "cliff_bench_slurm_gpus": 1,
    }
    args = argv(job_spec("cliff_bench", site, slurm_job_time_limit="02:00:00"))
    assert args[:4] == ["sbatch", "--parsable", "--job-name=aic-cliff-bench", "--nodes=1"]
    assert "--gres=gpu:1" in args
    assert "--partition=defq" in args
    assert "--constraint=GFX942&NVME" in args
    assert not [a for a in args if a.startswith("--gpus")]


def test_slurm_dialect_build_job_on_alola_asks_for_cpuonly_and_no_gpu():
    site = {"image_build_slurm_partition": "defq", "image_build_slurm_constraint": "CPUONLY"}
    args = argv(job_spec("image_build", site))
    assert "--partition=defq" in args
    assert "--constraint=CPUONLY" in args
    assert not [a for a in args if a.startswith(("--gres", "--gpus"))]


def test_role_defaults_the_cliff_job_takes_one_gpu_and_the_build_none():
    cliff = argv(job_spec("cliff_bench", {}, slurm_job_time_limit=""))
    build = argv(job_spec("image_build", {}))
    assert "--gres=gpu:1" in cliff
    assert not [a for a in build if a.startswith("--gres")]
    # Empty partition and constraint: the cluster's default partition, no --constraint on Slurm.
    assert not [a for a in cliff + build if a.startswith(("--partition", "--constraint"))]


@pytest.mark.parametrize("role", sorted(JOBS))
def test_the_job_runs_on_the_limit_host_s_node_when_that_host_came_from_a_job(role):
    prefix = JOBS[role]
    include = next(t for t in _load(f"roles/{role}/tasks/slurm.yml") if "ansible.builtin.include_role" in t)
    assert include["vars"]["slurm_job_nodelist"] == f"{{{{ {prefix}nodelist }}}}"
    default = _load(f"roles/{role}/defaults/main.yml")[f"{prefix}nodelist"]
    # Rendered by Ansible's own templar against a job's host and a host listed by hand.

    hostvars = {"crsuse2-m2m-007": {"slurm_job_nodelist": "crsuse2-m2m-[007-008]"}, "localhost": {}}
    for limit, expected in (("crsuse2-m2m-007", "crsuse2-m2m-007"), ("localhost", "")):
        templar = Templar(DataLoader(), variables={"hostvars": hostvars, f"{prefix}limit": limit})
        assert templar.template(trust_as_template(default)) == expected, limit
    spec = job_spec(role, {}, slurm_job_time_limit="", **{"slurm_job_nodelist": "crsuse2-m2m-007"})
    assert "--nodelist=crsuse2-m2m-007" in argv(spec)
