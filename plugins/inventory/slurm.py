# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: slurm
short_description: Hosts of a Slurm or SPUR job allocation, with each node's own GPU ids
version_added: 0.1.0
description:
  - Turns the nodes of a job allocation into inventory hosts of one group (O(group), default C(aic_nodes)). The group
    is created first, so when the plugin fails (no job, job not running) a play on it matches no host.
  - With O(job_id) (or C(SLURM_JOB_ID) in the environment), asks the cluster for the job's node list and GPUs -
    C(scontrol show job -d -o) on Slurm, the C(squeue) table on SPUR (with C(--controller)). Otherwise it takes
    O(nodelist) (or C(SLURM_JOB_NODELIST)), as inside an allocation.
  - The hostlist (C(node[01-04,07])) is expanded with C(scontrol show hostnames); where there is no C(scontrol)
    (SPUR's login nodes) an equivalent expansion in Python is used.
  - Each host gets C(slurm_job_id) (when known), C(slurm_job_nodelist), C(slurm_node_index), when the job asked for
    GPUs C(slurm_job_gpus) (GPUs per node), and when its GPU ids are known C(slurm_job_gpu_ids) - that node's own GPU
    indices (a list of strings such as V(["0", "1"]); V([]) for a node of the job that got none), while the job holds
    its allocation (C(RUNNING), C(SUSPENDED), C(CONFIGURING); a finished job keeps its node list but has no GPUs).
  - GPU ids, dialect V(slurm) - the detail records of C(scontrol show job -d), one per set of nodes with the same
    allocation - C(Nodes=node[1-2] CPU_IDs=0-1 Mem=0 GRES=gpu:2) followed by the index list in parentheses,
    C(IDX:0-1) or C(IDX:0,2-3); typed gres such as C(gpu:mi355x:2) too. A gpu gres counted without device files
    (C(CNT:2) instead of C(IDX:...)) has no indices - those nodes get no C(slurm_job_gpu_ids).
  - GPU ids, dialect V(spur) - SPUR has no C(scontrol show job) (its GPUs come from the controller's GetJob call),
    O(gpu_ids_command) gives them; empty means unknown (no C(slurm_job_gpu_ids)).
  - >-
    O(gpu_ids_command) output format - blank lines and C(#) comments are ignored; either B(one line of ids) for every
    node of the job, separated by commas and/or spaces (C(0,1), ranges C(0-3), UUIDs C(GPU-...)), which is what
    C(.slurm/spur-gpu-allocation) prints (empty output - the job has no GPUs); or B(per-node lines) C(NODES: IDS), NODES
    a host name or a hostlist (C(node[1-2]: 0,1)), IDS possibly empty. With per-node lines a node of the job without a
    line gets V([]) and a node that is not in the job fails the inventory (a name mismatch, e.g. FQDN vs short name).
  - >-
    C(compose), C(groups) and C(keyed_groups) work as in M(ansible.builtin.constructed) (e.g. C(aic_gpus:
    slurm_job_gpu_ids)).
  - The file must be named C(*slurm.yml) or C(*slurm.yaml).
author:
  - aic.stack developers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.constructed
options:
  plugin:
    description: The name of this plugin.
    type: str
    required: true
    choices: [aic.stack.slurm]
  job_id:
    description:
      - The job whose allocation becomes the inventory; empty means C(SLURM_JOB_ID), then O(nodelist).
      - A value in the file wins over C(SLURM_JOB_ID); leave it out to follow the environment.
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
  gpu_ids_command:
    description:
      - Command whose output gives the job's GPU ids (format in the description), run on the host that reads the
        inventory without a shell; V({job_id}) and V({controller}) are replaced in each word, e.g.
        V(.slurm/spur-gpu-allocation {job_id}). It also gets C(SLURM_JOB_ID) and, with O(controller),
        C(SPUR_CONTROLLER_ADDR) in its environment. A failure (exit code, not found, bad output) fails the inventory.
      - Empty - dialect V(slurm) reads the ids from C(scontrol show job -d); dialect V(spur) leaves them unknown.
      - Used with a job id only (O(job_id) or C(SLURM_JOB_ID)), in either dialect; when set it wins over C(scontrol).
    type: str
    default: ""
    env:
      - name: AIC_SLURM_GPU_IDS_COMMAND
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
    description: Seconds each Slurm command (and O(gpu_ids_command)) may take.
    type: int
    default: 30
"""

EXAMPLES = r"""
# aic-slurm.yml: the nodes of job 4711 in group aic_nodes, each with its own GPU ids (slurm_job_gpu_ids)
plugin: aic.stack.slurm
job_id: "4711"
---
# inside an allocation (salloc/sbatch): SLURM_JOB_ID / SLURM_JOB_NODELIST are read from the environment;
# every host's aic_gpus is its own GPU ids when they are known
plugin: aic.stack.slurm
group: gpu_nodes
compose:
  ansible_host: inventory_hostname
  aic_gpus: slurm_job_gpu_ids
---
# a SPUR job: GPU ids from SPUR's GetJob call (the script prints "0,1" for the job,
# or "crsuse2-m2m-001: 0,1" lines per node)
plugin: aic.stack.slurm
dialect: spur
controller: spur-ctl:6817
job_id: "123"
gpu_ids_command: /shared_nfs/rocm-aic/.slurm/spur-gpu-allocation {job_id}
"""

import os
import subprocess

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Constructable
from ansible.utils.display import Display

from ansible_collections.aic.stack.plugins.module_utils import slurm

display = Display()
# scontrol job states in which the job holds its nodes and their GPUs.
ALLOCATED_STATES = ("RUNNING", "SUSPENDED", "CONFIGURING")


class InventoryModule(BaseInventoryPlugin, Constructable):
    NAME = "aic.stack.slurm"

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(("slurm.yml", "slurm.yaml"))

    def _run(self, argv, extra_env=None):
        env = dict(os.environ)
        env.update(extra_env or {})
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
        """(nodelist, gpus per node or None, state, {host: GPU ids or None} from scontrol or None) of a job."""
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
            return (row[-1] if state == "RUNNING" else ""), None, state, None
        # -d adds the per-node detail records (Nodes=... GRES=gpu:N(IDX:...)); -o keeps every field on one line.
        out = self._run(["scontrol", "show", "job", "-d", "-o", job_id])
        if out is None:
            raise AnsibleParserError("aic.stack.slurm: scontrol not found (install the Slurm client)")
        fields = slurm.parse_scontrol_job(out)
        nodelist = fields.get("NodeList", "")
        ids = None
        state = slurm.long_state(fields.get("JobState", ""))
        # Only a job that holds its allocation has GPU ids (a finished one keeps its NodeList and empty records).
        if state in ALLOCATED_STATES and not (self.get_option("gpu_ids_command") or "").strip():
            try:
                ids = slurm.job_gpu_ids(out, expand=self._hostnames)
            except slurm.SlurmSpecError as exc:
                # The ids are optional: an allocation Slurm prints in a form not known here leaves them unknown.
                display.warning(f"aic.stack.slurm: job {job_id}: GPU ids unknown, scontrol show job -d: {exc}")
        return (
            ("" if nodelist in ("", "(null)") else nodelist),
            slurm.gpus_per_node(fields),
            fields.get("JobState"),
            ids or None,
        )

    def _command_gpu_ids(self, job_id, hosts):
        """{host: GPU ids} from gpu_ids_command."""
        template = self.get_option("gpu_ids_command")
        controller = self.get_option("controller") or ""
        try:
            argv = slurm.gpu_ids_argv(template, job_id, controller)
        except slurm.SlurmSpecError as exc:
            raise AnsibleParserError(f"aic.stack.slurm: {exc}")
        env = {"SLURM_JOB_ID": job_id}
        if controller:
            env["SPUR_CONTROLLER_ADDR"] = controller
        out = self._run(argv, env)
        if out is None:
            raise AnsibleParserError(f"aic.stack.slurm: gpu_ids_command: {argv[0]} not found")
        try:
            return slurm.parse_gpu_ids(out, hosts, expand=self._hostnames)
        except slurm.SlurmSpecError as exc:
            raise AnsibleParserError(f"aic.stack.slurm: job {job_id}: {exc} (output: {out.strip()[:200]!r})")

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
        # The group exists even when reading the job fails below: plays on it then match no host.
        group = self.inventory.add_group(self.get_option("group"))
        job_id = (self.get_option("job_id") or "").strip()
        gpus = None
        gpu_ids = None
        if job_id:
            nodelist, gpus, state, gpu_ids = self._job(job_id)
            if not nodelist:
                raise AnsibleParserError(
                    f"aic.stack.slurm: job {job_id} has no nodes allocated (state {state or 'unknown'})"
                )
        else:
            nodelist = (self.get_option("nodelist") or "").strip()
            if not nodelist:
                raise AnsibleParserError(
                    f"aic.stack.slurm: no job to read in {path}: no job_id and no nodelist (nor SLURM_JOB_ID / "
                    "SLURM_JOB_NODELIST in the environment); run inside an allocation (salloc, sbatch), export "
                    "SLURM_JOB_ID=<job id>, or set job_id in the file"
                )
            given = str(self.get_option("gpus") or "").strip()
            if given:
                if not given.isdigit():
                    raise AnsibleParserError(f"aic.stack.slurm: gpus must be a count, got {given!r}")
                gpus = int(given)
        hosts = self._hostnames(nodelist)
        if not hosts:
            raise AnsibleParserError(f"aic.stack.slurm: the hostlist {nodelist!r} has no hosts")
        if job_id and (self.get_option("gpu_ids_command") or "").strip():
            gpu_ids = self._command_gpu_ids(job_id, hosts)
        strict = self.get_option("strict")
        for index, host in enumerate(hosts):
            self.inventory.add_host(host, group=group)
            hostvars = {"slurm_job_nodelist": nodelist, "slurm_node_index": index}
            if job_id:
                hostvars["slurm_job_id"] = job_id
            if gpus is not None:
                hostvars["slurm_job_gpus"] = gpus
            if gpu_ids is not None:
                # Known for the job: a node without a detail record (or a per-node line) got no GPU.
                ids = gpu_ids.get(host, [])
                if ids is not None:
                    hostvars["slurm_job_gpu_ids"] = list(ids)
            for key, value in hostvars.items():
                self.inventory.set_variable(host, key, value)
            self._set_composite_vars(self.get_option("compose"), hostvars, host, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, host, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, host, strict=strict)
