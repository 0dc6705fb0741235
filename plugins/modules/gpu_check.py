#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_check
short_description: Check the GPUs a node or a container sees (count, arch) and report them
version_added: 0.1.0
description:
  - Formerly C(aic.stack.gpu_info); that name still works until 1.0.0, with a deprecation warning (it was renamed
    because an C(_info) module promises read-only facts, and this one fails when a check does not hold).
  - Reports the GPUs seen from one of two vantage points, and fails with a message naming the
    vantage point, what was probed and what it printed when a check asked for does not hold
    (O(min_devices), O(expected_arch)).
  - With O(where=host), the GPUs of the managed node. AMD GPUs are read from
    C(amd-smi list --json) and C(amd-smi static --asic --vram --json), else
    C(rocm-smi --showproductname --json), else the KFD topology in sysfs
    (C(/sys/class/kfd/kfd/topology/nodes/*/properties), where C(gfx_target_version) 90402 is
    C(gfx942) and nodes with C(simd_count) 0 are CPUs). NVIDIA GPUs are read from
    C(nvidia-smi --query-gpu=index,name,uuid,memory.total,compute_cap --format=csv,noheader,nounits).
    The first probe that finds at least one GPU answers.
  - With O(where=container), what PyTorch sees inside a running container. The module runs
    C(docker exec <container> <python> -c <probe>); the probe imports torch and reports
    torch.cuda.is_available(), torch.cuda.device_count(), C(torch.version.hip),
    C(torch.version.cuda) and, per device, torch.cuda.get_device_properties(i) (name,
    C(gcnArchName) on ROCm, compute capability on CUDA), plus whether C(/dev/kfd), the
    C(/dev/dri/renderD*) nodes and C(/dev/nvidia*) exist in the container. This is the check
    that catches a vLLM container whose torch sees 0 devices.
  - The module never changes anything, so it always returns RV(ignore:changed=false) and probes
    in check mode too.
author:
  - aic.stack developers (!UNKNOWN)
requirements:
  - For O(where=host), C(amd-smi), C(rocm-smi) or the amdgpu kernel driver (KFD sysfs) for AMD GPUs,
    C(nvidia-smi) for NVIDIA GPUs.
  - For O(where=container), the C(docker) CLI on the managed node and torch in the container.
extends_documentation_fragment:
  - aic.stack.attributes
attributes:
  check_mode:
    details:
      - The module only reads; the probes run in check mode as well.
options:
  where:
    description:
      - The vantage point. V(host) probes the managed node with the vendor tools or sysfs;
        V(container) asks torch inside O(container).
    type: str
    choices: [host, container]
    default: host
  container:
    description:
      - Name or ID of the running container to probe, with C(docker exec).
      - Required with O(where=container).
    type: str
  python:
    description:
      - Python interpreter in the container that can import torch, as a command name or a path.
    type: str
    default: python3
  vendor:
    description:
      - GPU vendor to look for.
      - With O(where=host), V(auto) tries the AMD probes first, then C(nvidia-smi); V(amd) or
        V(nvidia) run only that vendor's probes.
      - With O(where=container), V(amd) or V(nvidia) fails unless torch is a ROCm or a CUDA build
        respectively.
    type: str
    choices: [auto, amd, nvidia]
    default: auto
  min_devices:
    description:
      - Fail when fewer GPUs than this are seen (after O(visible_devices) is applied).
      - V(0) turns the check off.
    type: int
    default: 1
  expected_arch:
    description:
      - Fail when a GPU seen has an arch that is not in this list.
      - AMD arches are LLVM target names such as V(gfx942) (MI300X), V(gfx950) (MI350X/MI355X) or
        V(gfx1151); a name without features matches any feature set (V(gfx942) matches
        C(gfx942:sramecc+:xnack-)).
      - NVIDIA arches are V(sm_90) style names; the compute capability (V(9.0)) is accepted as well.
    type: list
    elements: str
  visible_devices:
    description:
      - Visibility variables to report the GPUs a process started with them would see, as a
        mapping of variable name to value. Supported names are C(ROCR_VISIBLE_DEVICES),
        C(HIP_VISIBLE_DEVICES) and C(CUDA_VISIBLE_DEVICES); values are comma separated device
        indices or UUIDs, and the empty string hides every GPU.
      - With O(where=host), the module applies them itself as the runtimes do. AMD -
        C(ROCR_VISIBLE_DEVICES) selects among all GPUs, then C(HIP_VISIBLE_DEVICES) (or
        C(CUDA_VISIBLE_DEVICES) when C(HIP_VISIBLE_DEVICES) is not given) among those. NVIDIA -
        C(CUDA_VISIBLE_DEVICES) only. The list stops at the first invalid, out of range or repeated
        entry. Visible GPUs are renumbered from 0 and keep the probe's number in C(physical_index).
      - With O(where=container), they are passed to C(docker exec -e), so torch applies them.
      - When omitted, all GPUs the probe finds are reported; the visibility variables of the
        module's own environment are not consulted (C(amd-smi), C(rocm-smi), KFD sysfs and
        C(nvidia-smi) ignore them anyway), but the container's own environment applies with
        O(where=container).
    type: dict
  timeout:
    description:
      - Seconds each probe command may run before it is abandoned (importing torch may take a while).
    type: int
    default: 120
notes:
  - GPU numbering is the probe's. C(nvidia-smi) numbers by PCI bus ID, CUDA by default fastest
    first (the same order on nodes of identical GPUs; set C(CUDA_DEVICE_ORDER=PCI_BUS_ID) in the
    workload to be sure). The KFD topology lists GPUs in the order the ROCm runtime enumerates them.
  - KFD sysfs lists every GPU of the node, including ones a container's cgroup does not grant
    access to; use O(where=container) to see what a workload really gets.
  - With O(where=host) and AMD GPUs, UUIDs in O(visible_devices) are compared with the UUID the
    probe reports (C(GPU-<unique_id>) from KFD sysfs, the C(amd-smi) UUID otherwise).
seealso:
  - module: aic.stack.vllm_health
"""

EXAMPLES = r"""
- name: The node has 8 MI355X GPUs
  aic.stack.gpu_check:
    vendor: amd
    min_devices: 8
    expected_arch: [gfx950]

- name: What a process started with ROCR_VISIBLE_DEVICES=2,3 would see
  aic.stack.gpu_check:
    visible_devices:
      ROCR_VISIBLE_DEVICES: "2,3"
  register: gpus

- name: Torch in the vLLM container sees the GPUs
  aic.stack.gpu_check:
    where: container
    container: vllm
    python: /opt/venv/bin/python3
    min_devices: "{{ vllm_tensor_parallel_size | default(1) }}"
    expected_arch: [gfx942, gfx950]

- name: An NVIDIA node, for reporting only
  aic.stack.gpu_check:
    vendor: nvidia
    min_devices: 0
  register: nvidia

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ nvidia.count }} GPU(s) from {{ nvidia.source }}: {{ nvidia.devices | map(attribute='name') | list }}"
"""

RETURN = r"""
where:
  description: The vantage point, O(where).
  returned: always
  type: str
  sample: host
vendor:
  description:
    - V(amd) or V(nvidia); V(none) when O(vendor=auto) found no GPU on the host or torch is a CPU-only
      build (or cannot be imported).
  returned: always
  type: str
  sample: amd
devices:
  description:
    - The GPUs seen, after O(visible_devices) is applied.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: Device number as the process sees it (0 based).
      type: int
      sample: 0
    name:
      description: Marketing name, or C(AMD GPU <arch> [<device id>]) when only KFD sysfs answered.
      type: str
      sample: AMD Instinct MI300X
    arch:
      description: C(gfx942) style LLVM target (AMD) or C(sm_90) style arch (NVIDIA); null when unknown.
      type: str
      sample: gfx942
    uuid:
      description: Device UUID when the probe reports one.
      type: str
      sample: GPU-8c7c2a0ec7d4b1b4
    memory_mb:
      description: Device memory in MiB when the probe reports it.
      type: int
      sample: 196592
    compute_capability:
      description: NVIDIA compute capability.
      type: str
      returned: NVIDIA GPUs
      sample: "9.0"
    gcn_arch_name:
      description: C(gcnArchName) as torch reports it, with features.
      type: str
      returned: O(where=container) with a ROCm build of torch
      sample: "gfx942:sramecc+:xnack-"
    physical_index:
      description: The device number the probe reported, before O(visible_devices) renumbering.
      type: int
      returned: O(where=host)
      sample: 2
  sample:
    - index: 0
      name: AMD Instinct MI355X
      arch: gfx950
      uuid: 4bff75a3-0000-1000-8039-b2a4e1d4f0c6
      memory_mb: 294896
      physical_index: 0
count:
  description: Number of GPUs in RV(devices).
  returned: always
  type: int
  sample: 8
total_count:
  description: GPUs the probe found before O(visible_devices) was applied.
  returned: O(where=host)
  type: int
  sample: 8
source:
  description:
    - The probe that answered - C(amd-smi), C(rocm-smi), C(kfd-sysfs), C(nvidia-smi) or C(torch);
      null when no probe found a GPU.
  returned: always
  type: str
  sample: amd-smi
visible_devices:
  description: The visibility variables that were applied.
  returned: always
  type: dict
  sample: {ROCR_VISIBLE_DEVICES: "2,3"}
torch:
  description: What the torch probe saw in the container.
  returned: O(where=container) and the probe printed its report
  type: dict
  contains:
    version:
      description: C(torch.__version__), null when torch could not be imported.
      type: str
      sample: 2.9.0+rocm7.0
    hip:
      description: C(torch.version.hip).
      type: str
      sample: 7.0.51831
    cuda:
      description: C(torch.version.cuda).
      type: str
      sample: null
    is_available:
      description: torch.cuda.is_available().
      type: bool
      sample: true
    device_count:
      description: torch.cuda.device_count().
      type: int
      sample: 8
    python:
      description: Version of the container's Python.
      type: str
      sample: 3.12.3
    executable:
      description: C(sys.executable) of the container's Python.
      type: str
      sample: /opt/venv/bin/python3
    env:
      description: The visibility variables set in the container's process.
      type: dict
      sample: {HIP_VISIBLE_DEVICES: "0,1"}
    dev_kfd:
      description: Whether C(/dev/kfd) exists in the container (needed by ROCm).
      type: bool
      sample: true
    render_nodes:
      description: C(/dev/dri/renderD*) nodes in the container.
      type: list
      elements: str
      sample: [renderD128, renderD136]
    nvidia_nodes:
      description: C(/dev/nvidia<N>) nodes in the container.
      type: list
      elements: str
      sample: []
    error:
      description: Why torch could not be imported or queried, null otherwise.
      type: str
      sample: null
probes:
  description:
    - Every probe that was tried, in order, with the command, its exit status, an excerpt of
      what it printed and the number of GPUs it found (or why it was skipped).
  returned: always
  type: list
  elements: dict
  sample:
    - probe: amd-smi
      command: amd-smi static --asic --vram --json
      rc: 0
      output: '[ { "gpu": 0, "asic": { "market_name": "AMD Instinct MI300X", ...'
      devices: 8
"""

import os
import shlex
import subprocess

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aic.stack.plugins.module_utils import gpu

AMD_SOURCES = ("amd-smi", "rocm-smi", "kfd-sysfs")


class ProbeFailed(Exception):
    """The probe could not answer at all (as opposed to answering with too few GPUs)."""


class Runner:
    """Run probe commands with a timeout and record each attempt for the result and messages."""

    def __init__(self, module, timeout):
        self.module = module
        self.timeout = timeout
        self.probes = []

    def which(self, name):
        return self.module.get_bin_path(name, required=False)

    def skip(self, probe, why):
        self.probes.append({"probe": probe, "skipped": why})

    def tool(self, name):
        """The path of the probe command ``name``, or None with the probe recorded as skipped."""
        binary = self.which(name)
        if not binary:
            self.skip(name, f"{name} not found on PATH")
        return binary

    def run(self, probe, argv, shown=None):
        """Run ``argv``; return ``(rc, stdout, stderr, record)``; rc is None when it did not run."""
        record = {"probe": probe, "command": shown or " ".join(shlex.quote(a) for a in argv)}
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            record.update(rc=None, output=f"timed out after {self.timeout}s")
            self.probes.append(record)
            return None, "", "", record
        except OSError as exc:
            record.update(rc=None, output=f"could not run: {exc}")
            self.probes.append(record)
            return None, "", "", record
        stdout = proc.stdout.decode("utf-8", errors="replace")
        stderr = proc.stderr.decode("utf-8", errors="replace")
        record.update(rc=proc.returncode, output=gpu.excerpt(stdout + ("\n" + stderr if stderr.strip() else "")))
        self.probes.append(record)
        return proc.returncode, stdout, stderr, record


def describe_probes(probes):
    parts = []
    for p in probes:
        if "skipped" in p:
            parts.append(f"{p['probe']}: {p['skipped']}")
            continue
        what = f"{p['probe']}: `{p['command']}`"
        what += f" exited {p['rc']}" if p.get("rc") is not None else ""
        if "devices" in p:
            what += f", {p['devices']} GPU(s)"
        # What a probe printed only matters when it did not answer.
        if p.get("error") or p.get("rc") not in (0, None) or not p.get("devices"):
            what += f", printed: {p['output'] or '(nothing)'}"
        if p.get("error"):
            what += f" ({p['error']})"
        parts.append(what)
    return "; ".join(parts) or "nothing"


# -- host probes -----------------------------------------------------------------------------------


def _fill_arch_from_kfd(devices):
    """Old amd-smi has no target_graphics_version: look the arch up by KFD node id."""
    if all(d.get("arch") for d in devices) or not os.path.isdir(gpu.KFD_NODES_DIR):
        return
    try:
        by_node = {d["node_id"]: d for d in gpu.parse_kfd_topology(gpu.KFD_NODES_DIR)}
    except OSError:
        return
    for device in devices:
        if not device.get("arch") and device.get("node_id") in by_node:
            device["arch"] = by_node[device["node_id"]]["arch"]


def probe_amd_smi(runner):
    binary = runner.tool("amd-smi")
    if not binary:
        return None
    rc, listed, _err, list_record = runner.run("amd-smi", [binary, "list", "--json"], "amd-smi list --json")
    rc, static, _err, record = runner.run(
        "amd-smi", [binary, "static", "--asic", "--vram", "--json"], "amd-smi static --asic --vram --json"
    )
    devices = parsed(record, rc, gpu.parse_amd_smi_json, static, listed if list_record.get("rc") == 0 else None)
    if devices is None:
        return None
    _fill_arch_from_kfd(devices)
    if list_record.get("rc") == 0:
        list_record["devices"] = len(devices)
    return devices


def parsed(record, rc, parse, *args):
    """Devices that ``parse(*args)`` reads from a probe that exited ``rc``, counted in its record; None when the
    probe failed or its output could not be read (the reason recorded)."""
    if rc != 0:
        return None
    try:
        devices = parse(*args)
    except gpu.GpuProbeError as exc:
        record["error"] = str(exc)
        return None
    record["devices"] = len(devices)
    return devices


def probe_rocm_smi(runner):
    binary = runner.tool("rocm-smi")
    if not binary:
        return None
    rc, out, _err, record = runner.run(
        "rocm-smi", [binary, "--showproductname", "--json"], "rocm-smi --showproductname --json"
    )
    return parsed(record, rc, gpu.parse_rocm_smi_json, out)


def probe_kfd_sysfs(runner):
    nodes_dir = gpu.KFD_NODES_DIR
    if not os.path.isdir(nodes_dir):
        runner.skip("kfd-sysfs", f"{nodes_dir} does not exist (amdgpu driver not loaded?)")
        return None
    record = {"probe": "kfd-sysfs", "command": f"read {nodes_dir}/*/properties", "rc": None}
    runner.probes.append(record)
    try:
        devices = gpu.parse_kfd_topology(nodes_dir)
    except OSError as exc:
        record["output"] = f"cannot read: {exc}"
        return None
    record["output"] = ", ".join(f"node {d['node_id']}: {d['arch']}" for d in devices) or "only CPU nodes"
    record["devices"] = len(devices)
    return devices


def probe_nvidia_smi(runner):
    binary = runner.tool("nvidia-smi")
    if not binary:
        return None
    fields = list(gpu.NVIDIA_QUERY_FIELDS)
    while True:
        query = "--query-gpu=" + ",".join(fields)
        argv = [binary, query, "--format=csv,noheader,nounits"]
        rc, out, err, record = runner.run("nvidia-smi", argv, "nvidia-smi " + " ".join(argv[1:]))
        # Drivers older than 510 do not know compute_cap: ask again without it.
        if rc != 0 and "compute_cap" in fields and "compute_cap" in out + err:
            fields.remove("compute_cap")
            continue
        break
    return parsed(record, rc, gpu.parse_nvidia_smi_csv, out)


PROBES = {
    "amd-smi": probe_amd_smi,
    "rocm-smi": probe_rocm_smi,
    "kfd-sysfs": probe_kfd_sysfs,
    "nvidia-smi": probe_nvidia_smi,
}


def probe_host(runner, vendor):
    """Return ``(vendor, source, devices)`` from the first probe that finds a GPU."""
    sources = []
    if vendor in ("auto", "amd"):
        sources += [("amd", s) for s in AMD_SOURCES]
    if vendor in ("auto", "nvidia"):
        sources.append(("nvidia", "nvidia-smi"))
    for found_vendor, source in sources:
        devices = PROBES[source](runner)
        if devices:
            return found_vendor, source, devices
    return (vendor if vendor != "auto" else "none"), None, []


# -- container probe -------------------------------------------------------------------------------


def probe_container(runner, container, python, variables):
    docker = runner.which("docker")
    if not docker:
        raise ProbeFailed("the docker CLI is not on PATH")
    env_args = []
    for name, value in sorted(variables.items()):
        env_args += ["-e", f"{name}={value}"]
    argv = [docker, "exec", *env_args, container, python, "-c", gpu.TORCH_PROBE]
    shown = " ".join(shlex.quote(a) for a in ["docker", "exec", *env_args, container, python, "-c"]) + " <torch probe>"
    rc, out, err, record = runner.run("torch", argv, shown)
    if rc is None:
        raise ProbeFailed(f"`{shown}` {record['output']}")
    try:
        report = gpu.parse_torch_probe(out)
    except gpu.GpuProbeError as exc:
        record["error"] = str(exc)
        raise ProbeFailed(f"`{shown}` exited {rc}: {gpu.excerpt(err + ' ' + out) or '(nothing printed)'}")
    record["devices"] = len(report["devices"])
    report["stderr"] = err
    return report


# -- main ------------------------------------------------------------------------------------------


def _visibility(module):
    variables = {}
    for name, value in (module.params["visible_devices"] or {}).items():
        if name not in gpu.VISIBILITY_VARIABLES:
            module.fail_json(
                msg=f"visible_devices: unsupported variable {name!r}, expected one of {', '.join(gpu.VISIBILITY_VARIABLES)}"
            )
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        variables[name] = str(value)
    return variables


def main():
    module = AnsibleModule(
        argument_spec={
            "where": {"type": "str", "choices": ["host", "container"], "default": "host"},
            "container": {"type": "str"},
            "python": {"type": "str", "default": "python3"},
            "vendor": {"type": "str", "choices": ["auto", "amd", "nvidia"], "default": "auto"},
            "min_devices": {"type": "int", "default": 1},
            "expected_arch": {"type": "list", "elements": "str"},
            "visible_devices": {"type": "dict"},
            "timeout": {"type": "int", "default": 120},
        },
        required_if=[("where", "container", ["container"])],
        supports_check_mode=True,
    )
    params = module.params
    variables = _visibility(module)
    runner = Runner(module, params["timeout"])
    result = {
        "changed": False,
        "where": params["where"],
        "vendor": "none",
        "devices": [],
        "count": 0,
        "source": None,
        "visible_devices": {},
        "probes": runner.probes,
    }

    if params["where"] == "host":
        vantage = "on host"
        vendor, source, found = probe_host(runner, params["vendor"])
        devices, applied = gpu.apply_visibility(found, vendor, variables)
        result.update(vendor=vendor, source=source, total_count=len(found), visible_devices=applied)
        detail = describe_probes(runner.probes)
        if found and applied:
            hidden = " ".join(f"{k}={v!r}" for k, v in applied.items())
            detail = f"{source} found {len(found)} GPU(s), {len(devices)} visible with {hidden}; {detail}"
    else:
        vantage = f"in container {params['container']!r}"
        try:
            report = probe_container(runner, params["container"], params["python"], variables)
        except ProbeFailed as exc:
            module.fail_json(msg=f"gpu_check {vantage}: the torch probe failed: {exc}", **result)
        devices = report["devices"]
        result.update(vendor=report["vendor"], source="torch", torch=report["torch"], visible_devices=variables)
        shown = runner.probes[-1]["command"]
        detail = f"`{shown}` printed: {gpu.describe_torch(report['torch'])}"
        if report["stderr"].strip():
            detail += f"; stderr: {gpu.excerpt(report['stderr'])}"
        if report["torch"].get("error") and not report["torch"].get("version"):
            module.fail_json(msg=f"gpu_check {vantage}: {params['python']} cannot import torch: {detail}", **result)
        if params["vendor"] != "auto" and report["vendor"] != params["vendor"]:
            build = {"amd": "a ROCm", "nvidia": "a CUDA", "none": "a CPU-only"}[report["vendor"]]
            module.fail_json(
                msg=f"gpu_check {vantage}: torch is {build} build, expected vendor {params['vendor']}: {detail}",
                **result,
            )

    result.update(devices=devices, count=len(devices))
    problems = gpu.check_devices(devices, params["min_devices"], params["expected_arch"])
    if problems:
        what = "torch" if params["where"] == "container" else f"vendor {params['vendor']}"
        module.fail_json(msg=f"gpu_check {vantage} ({what}): {'; '.join(problems)}. Probed: {detail}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
