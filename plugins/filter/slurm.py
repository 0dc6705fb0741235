# Copyright: aic.stack contributors
# Apache-2.0
"""Filters that render Slurm / SPUR batch jobs (the slurm_job role); the logic is in module_utils/slurm.py."""

from __future__ import annotations

import functools
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.module_utils import slurm
from ansible_collections.aic.stack.plugins.plugin_utils.filters import as_filter

# The filters below fail the task naming the job spec field (module_utils/slurm.py SlurmSpecError).
_wrap = functools.partial(as_filter, errors=slurm.SlurmSpecError, prefix="slurm_job: ")


def slurm_job_spec(spec, var_prefix=""):
    """The validated, normalised job spec (dict); fails naming the bad field (as ``<var_prefix><field>``)."""
    try:
        return slurm.job_spec(spec)
    except slurm.SlurmSpecError as exc:
        msg = str(exc)
        field = re.match(r"^([a-z_]+)\b", msg)
        if var_prefix and field and isinstance(spec, dict) and field.group(1) in {*spec, *slurm.SPEC_FIELDS}:
            msg = var_prefix + msg
        raise AnsibleFilterError(f"slurm_job: {msg}")


@_wrap
def slurm_sbatch_argv(spec, script_path, sbatch="sbatch"):
    """The sbatch command line (list) of a job spec in its dialect."""
    return slurm.sbatch_argv(spec, script_path, sbatch=sbatch)


@_wrap
def slurm_job_script(spec, sbatch="sbatch"):
    """The batch script text of a job spec."""
    return slurm.job_script(spec, sbatch=sbatch)


@_wrap
def slurm_job_files(spec, job_id):
    """The job's directory and its .out, .err and .exit files under the logs root."""
    return slurm.job_files(spec, job_id)


@_wrap
def slurm_inner_playbook(ansible_playbook, inventories, playbook, limit, extra_vars=()):
    """The command a batch job runs to play ``playbook`` locally as host ``limit`` with the controller's inventories."""
    return slurm.inner_playbook_command(ansible_playbook, inventories, playbook, limit, extra_vars)


def slurm_node_lost(output):
    """Why Slurm no longer counts on a node (``scontrol show node -o`` output); empty when it is fine."""
    return slurm.node_lost(output)


@_wrap
def slurm_job_id(stdout, dialect="slurm"):
    """The job id printed by sbatch (``--parsable`` or "Submitted batch job N")."""
    return slurm.parse_job_id(stdout, dialect)


class FilterModule:
    def filters(self):
        return {
            "slurm_job_spec": slurm_job_spec,
            "slurm_sbatch_argv": slurm_sbatch_argv,
            "slurm_job_script": slurm_job_script,
            "slurm_job_files": slurm_job_files,
            "slurm_job_id": slurm_job_id,
            "slurm_inner_playbook": slurm_inner_playbook,
            "slurm_node_lost": slurm_node_lost,
        }
