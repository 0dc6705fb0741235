# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: slurm
short_description: Hosts of a Slurm or SPUR job allocation
version_added: 0.1.0
description:
  - Turns the nodes of a job allocation into inventory hosts of one group (O(group), default C(aic_nodes)).
  - With O(job_id) (or C(SLURM_JOB_ID) in the environment), asks the cluster for the job's node list and GPUs -
    C(scontrol show job -o) on Slurm, the C(squeue) table on SPUR (with C(--controller)). Otherwise it takes
    O(nodelist) (or C(SLURM_JOB_NODELIST)), as inside an allocation.
  - The hostlist (C(node[01-04,07])) is expanded with C(scontrol show hostnames); where there is no C(scontrol)
    (SPUR's login nodes) an equivalent expansion in Python is used.
  - Each host gets C(slurm_job_id) (when known), C(slurm_job_nodelist), C(slurm_node_index) and, when the job asked
    for GPUs, C(slurm_job_gpus) (GPUs per node). C(compose), C(groups) and C(keyed_groups) work as in
    M(ansible.builtin.constructed).
  - The file must be named C(*slurm.yml) or C(*slurm.yaml).
author:
  - aic.stack developers
extends_documentation_fragment:
  - ansible.builtin.constructed
options:
  plugin:
    description: The name of this plugin.
    type: str
    required: true
    choices: [aic.stack.slurm]
  job_id:
    description: The job whose allocation becomes the inventory; empty means C(SLURM_JOB_ID), then O(nodelist).
    type: str
    default: ""
    env:
      - name: SLURM_JOB_ID
  nodelist:
    description: A Slurm hostlist used when there is no job id (C(SLURM_JOB_NODELIST) inside an allocation).
    type: str
    default: ""
    env:
      - name: SLURM_JOB_NODELIST
  gpus:
    description: GPUs per node for O(nodelist) (a job id gives its own); empty means C(SLURM_GPUS_ON_NODE) or unknown.
    type: str
    default: ""
    env:
      - name: SLURM_GPUS_ON_NODE
  group:
    description: Group the hosts are added to.
    type: str
    default: aic_nodes
  dialect:
    description: V(slurm) or V(spur) (SPUR has no C(scontrol show job); its C(squeue) needs C(--controller)).
    type: str
    choices: [slurm, spur]
    default: slurm
  controller:
    description: SPUR controller address (C(--controller)); dialect V(spur) only.
    type: str
    default: ""
  slurm_conf:
    description: C(SLURM_CONF) for the Slurm commands (e.g. the single-node cluster of C(scripts/slurm-up.sh)).
    type: str
    default: ""
  command_timeout:
    description: Seconds each Slurm command may take.
    type: int
    default: 30
"""

EXAMPLES = r"""
# aic-slurm.yml: the nodes of job 4711 in group aic_nodes
plugin: aic.stack.slurm
job_id: "4711"
---
# inside an allocation (salloc/sbatch): SLURM_JOB_ID / SLURM_JOB_NODELIST are read from the environment
plugin: aic.stack.slurm
group: gpu_nodes
compose:
  ansible_host: inventory_hostname
---
# a SPUR job
plugin: aic.stack.slurm
dialect: spur
controller: spur-ctl:6817
job_id: "123"
"""

import os
import subprocess

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Constructable

from ansible_collections.aic.stack.plugins.module_utils import slurm


class InventoryModule(BaseInventoryPlugin, Constructable):
    NAME = "aic.stack.slurm"

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(("slurm.yml", "slurm.yaml"))

    def _run(self, argv):
        env = dict(os.environ)
        if self.get_option("slurm_conf"):
            env["SLURM_CONF"] = self.get_option("slurm_conf")
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env=env,
                timeout=self.get_option("command_timeout"),
                check=False,
            )
        except FileNotFoundError:
            return None
        except subprocess.TimeoutExpired:
            raise AnsibleParserError(f"aic.stack.slurm: {' '.join(argv)} timed out")
        if proc.returncode != 0:
            raise AnsibleParserError(
                f"aic.stack.slurm: {' '.join(argv)} failed (rc {proc.returncode}): "
                f"{proc.stderr.strip() or proc.stdout.strip()}"
            )
        return proc.stdout

    def _job(self, job_id):
        """(nodelist, gpus per node or None, state) of a job."""
        if not slurm.JOB_ID_RE.match(job_id):
            raise AnsibleParserError(f"aic.stack.slurm: job_id must be a Slurm job id (digits), got {job_id!r}")
        if self.get_option("dialect") == "spur":
            controller = self.get_option("controller")
            out = self._run(["squeue", *(["--controller", controller] if controller else [])])
            if out is None:
                raise AnsibleParserError("aic.stack.slurm: squeue not found")
            state = slurm.parse_squeue_state(out, job_id, "spur")
            if state is None:
                raise AnsibleParserError(f"aic.stack.slurm: job {job_id} is not in SPUR's queue")
            row = next(line.split() for line in out.splitlines() if line.split()[:1] == [job_id])
            return (row[-1] if state == "RUNNING" else ""), None, state
        out = self._run(["scontrol", "show", "job", "-o", job_id])
        if out is None:
            raise AnsibleParserError("aic.stack.slurm: scontrol not found (install the Slurm client)")
        fields = slurm.parse_scontrol_job(out)
        nodelist = fields.get("NodeList", "")
        return ("" if nodelist in ("", "(null)") else nodelist), slurm.gpus_per_node(fields), fields.get("JobState")

    def _hostnames(self, nodelist):
        if self.get_option("dialect") != "spur":
            out = self._run(["scontrol", "show", "hostnames", nodelist])
            if out is not None:
                return [line.strip() for line in out.splitlines() if line.strip()]
        try:
            return slurm.expand_hostlist(nodelist)
        except slurm.SlurmSpecError as exc:
            raise AnsibleParserError(f"aic.stack.slurm: {exc}")

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        job_id = (self.get_option("job_id") or "").strip()
        gpus = None
        if job_id:
            nodelist, gpus, state = self._job(job_id)
            if not nodelist:
                raise AnsibleParserError(
                    f"aic.stack.slurm: job {job_id} has no nodes allocated (state {state or 'unknown'})"
                )
        else:
            nodelist = (self.get_option("nodelist") or "").strip()
            if not nodelist:
                raise AnsibleParserError(
                    "aic.stack.slurm: no job_id and no nodelist (nor SLURM_JOB_ID / SLURM_JOB_NODELIST) to read"
                )
            given = str(self.get_option("gpus") or "").strip()
            if given:
                if not given.isdigit():
                    raise AnsibleParserError(f"aic.stack.slurm: gpus must be a count, got {given!r}")
                gpus = int(given)
        hosts = self._hostnames(nodelist)
        if not hosts:
            raise AnsibleParserError(f"aic.stack.slurm: the hostlist {nodelist!r} has no hosts")
        group = self.inventory.add_group(self.get_option("group"))
        strict = self.get_option("strict")
        for index, host in enumerate(hosts):
            self.inventory.add_host(host, group=group)
            hostvars = {"slurm_job_nodelist": nodelist, "slurm_node_index": index}
            if job_id:
                hostvars["slurm_job_id"] = job_id
            if gpus is not None:
                hostvars["slurm_job_gpus"] = gpus
            for key, value in hostvars.items():
                self.inventory.set_variable(host, key, value)
            self._set_composite_vars(self.get_option("compose"), hostvars, host, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, host, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, host, strict=strict)
