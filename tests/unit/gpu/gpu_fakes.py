"""Fakes for the gpu_check tests: KFD sysfs trees, vendor tools, docker and torch.

None of the GPUs here exist: the AMD machines (MI300X, MI355X, Strix Halo) and the H200 are
stand-ins built from the shapes the real tools print (see fixtures/README.md). The fake
executables are small Python scripts put first (and alone) on PATH in ``tmp_path``.
"""

from __future__ import annotations

import json
import pathlib
import stat
import sys

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def fixture_text(name):
    return (FIXTURES / name).read_text()


# -- fake KFD topology ---------------------------------------------------------------------------

# What /sys/class/kfd/kfd/topology/nodes/<n>/properties holds, trimmed to the usual keys.
CPU_NODE = {
    "cpu_cores_count": 96,
    "simd_count": 0,
    "mem_banks_count": 1,
    "caches_count": 0,
    "io_links_count": 9,
    "p2p_links_count": 0,
    "cpu_core_id_base": 0,
    "simd_id_base": 0,
    "max_waves_per_simd": 0,
    "lds_size_in_kb": 0,
    "gds_size_in_kb": 0,
    "wave_front_size": 0,
    "array_count": 0,
    "gfx_target_version": 0,
    "vendor_id": 0,
    "device_id": 0,
    "location_id": 0,
    "drm_render_minor": 0,
    "local_mem_size": 0,
    "unique_id": 0,
}

MI300X_NODE = {
    "cpu_cores_count": 0,
    "simd_count": 1216,
    "mem_banks_count": 1,
    "caches_count": 430,
    "io_links_count": 1,
    "p2p_links_count": 7,
    "cpu_core_id_base": 0,
    "simd_id_base": 2147487744,
    "max_waves_per_simd": 8,
    "lds_size_in_kb": 64,
    "gds_size_in_kb": 0,
    "num_gws": 64,
    "wave_front_size": 64,
    "array_count": 32,
    "simd_arrays_per_engine": 1,
    "cu_per_simd_array": 10,
    "simd_per_cu": 4,
    "max_slots_scratch_cu": 32,
    "gfx_target_version": 90402,
    "vendor_id": 4098,
    "device_id": 29857,  # 0x74a1
    "location_id": 3072,
    "domain": 0,
    "drm_render_minor": 128,
    "hive_id": 4283343339775398765,
    "num_sdma_engines": 2,
    "num_sdma_xgmi_engines": 6,
    "local_mem_size": 0,
    "fw_version": 165,
    "capability": 746324608,
    "unique_id": 10123046208118138036,
    "num_xcc": 8,
    "max_engine_clk_ccompute": 3250,
}
MI300X_VRAM = 196592 * 1024 * 1024

MI355X_NODE = dict(
    MI300X_NODE,
    simd_count=1024,
    gfx_target_version=90500,
    device_id=30115,  # 0x75a3
    unique_id=5478623517043913414,
    max_engine_clk_fcompute=2400,
)
MI355X_VRAM = 294896 * 1024 * 1024

# Strix Halo (Ryzen AI Max+ 395): an APU, its GPU is a KFD node of its own; memory is system RAM.
GFX1151_NODE = dict(
    MI300X_NODE,
    simd_count=80,
    gfx_target_version=110501,
    device_id=5510,  # 0x1586
    unique_id=0,
    num_xcc=1,
    wave_front_size=32,
)


def _write_props(path, props):
    path.mkdir(parents=True, exist_ok=True)
    (path / "properties").write_text("".join(f"{key} {value}\n" for key, value in props.items()))


def make_kfd_topology(root, gpu_nodes, cpu_nodes=2, vram=MI300X_VRAM, heap_type=1, name="ip discovery"):
    """A fake ``/sys/class/kfd/kfd/topology/nodes`` under ``root``: ``cpu_nodes`` CPU nodes first,
    then one node per entry of ``gpu_nodes`` (property dicts, unique_id made distinct).
    Returns the ``nodes`` directory."""
    nodes = pathlib.Path(root) / "topology" / "nodes"
    for node in range(cpu_nodes):
        _write_props(nodes / str(node), dict(CPU_NODE, cpu_core_id_base=node * 96))
        (nodes / str(node) / "name").write_text("\n")
        _write_props(nodes / str(node) / "mem_banks" / "0", {"heap_type": 0, "size_in_bytes": 811748802560})
    for offset, props in enumerate(gpu_nodes):
        node = cpu_nodes + offset
        props = dict(props, location_id=props["location_id"] + 0x1000 * offset)
        if props.get("unique_id"):
            props["unique_id"] = props["unique_id"] + offset
        _write_props(nodes / str(node), props)
        (nodes / str(node) / "name").write_text(name + "\n")
        if vram:
            _write_props(nodes / str(node) / "mem_banks" / "0", {"heap_type": heap_type, "size_in_bytes": vram})
    return nodes


# -- fake executables -----------------------------------------------------------------------------

FAKE_TOOL = '''#!{python}
"""Fake {name} written by the gpu_check tests: canned output per argument list."""
import json
import sys

with open({log!r}, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
responses = json.loads({responses!r})
key = " ".join(sys.argv[1:])
if key not in responses:
    sys.stderr.write("fake {name}: unexpected arguments: " + key + "\\n")
    sys.exit(2)
rc, out, err = responses[key]
sys.stdout.write(out)
sys.stderr.write(err)
sys.exit(rc)
'''

FAKE_DOCKER = '''#!{python}
"""Fake docker written by the gpu_check tests: ``docker exec [-e K=V]... CONTAINER CMD...``.

Containers are described in {config!r}; the command runs on this machine with the container's
environment (its PYTHONPATH points at a fake torch), like docker exec would run it inside.
"""
import json
import os
import sys

with open({config!r}) as handle:
    containers = json.load(handle)
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(json.dumps(args) + "\\n")
if not args or args[0] != "exec":
    sys.stderr.write("fake docker: only exec is emulated\\n")
    sys.exit(2)
args = args[1:]
extra = {{}}
while args and args[0] == "-e":
    key, _, value = args[1].partition("=")
    extra[key] = value
    args = args[2:]
name, command = args[0], args[1:]
container = containers.get(name)
if container is None:
    sys.stderr.write("Error response from daemon: No such container: %s\\n" % name)
    sys.exit(1)
if not container.get("running", True):
    sys.stderr.write("Error response from daemon: container 3f9a0c2d71b4 is not running\\n")
    sys.exit(1)
program = container.get("pythons", {{}}).get(command[0])
if program is None:
    sys.stderr.write(
        "OCI runtime exec failed: exec failed: unable to start container process: exec: "
        '"%s": executable file not found in $PATH: unknown\\n' % command[0]
    )
    sys.exit(127)
env = dict(container.get("env", {{}}), **extra)
env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
if container.get("pythonpath"):
    env["PYTHONPATH"] = container["pythonpath"]
os.execve(program, [program] + command[1:], env)
'''

FAKE_TORCH = '''"""Fake torch written by the gpu_check tests: {label}."""
import os
import sys
import types

_CONFIG = {config!r}
__version__ = _CONFIG["version"]
version = types.SimpleNamespace(hip=_CONFIG["hip"], cuda=_CONFIG["cuda"])


def _visible():
    n = len(_CONFIG["devices"])
    value = os.environ.get("HIP_VISIBLE_DEVICES") if _CONFIG["hip"] else None
    if value is None:
        value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(range(n))
    chosen = []
    for token in value.split(",") if value.strip() else []:
        if not token.strip().isdigit() or int(token) >= n or int(token) in chosen:
            break
        chosen.append(int(token))
    return chosen


class _Properties:
    def __init__(self, spec):
        for key, value in spec.items():
            setattr(self, key, value)


class cuda:
    @staticmethod
    def is_available():
        if not _visible() and _CONFIG.get("warning"):
            sys.stderr.write(_CONFIG["warning"] + "\\n")
        return bool(_visible())

    @staticmethod
    def device_count():
        return len(_visible())

    @staticmethod
    def get_device_properties(index):
        return _Properties(_CONFIG["devices"][_visible()[index]])
'''

ROCM_MI300X_TORCH = {
    "version": "2.9.0+rocm6.4",
    "hip": "6.4.43482-0f2d60242",
    "cuda": None,
    "devices": [
        {
            "name": "AMD Instinct MI300X",
            "major": 9,
            "minor": 4,
            "total_memory": 205822885888,
            "gcnArchName": "gfx942:sramecc+:xnack-",
            "uuid": f"{i}8ff74a1-0000-1000-80d1-3c23a958055{i}",
        }
        for i in range(8)
    ],
}
ROCM_NO_DEVICE_TORCH = dict(
    ROCM_MI300X_TORCH,
    devices=[],
    warning="UserWarning: HIP initialization: Unexpected error from hipGetDeviceCount(). Did you run some cuda "
    "functions before calling NumHipDevices() that might have already set an error? Error 100: hipErrorNoDevice",
)
CUDA_H200_TORCH = {
    "version": "2.9.0+cu128",
    "hip": None,
    "cuda": "12.8",
    "devices": [
        {
            "name": "NVIDIA H200",
            "major": 9,
            "minor": 0,
            "total_memory": 150754820096,
            "uuid": f"2f5c1a3e-8d4b-7c61-0e9f-5a3b2d1c4e6{i}",
        }
        for i in range(4)
    ],
}


def make_fake_torch(root, config, label="a ROCm build on 8 MI300X"):
    """A directory holding a fake ``torch`` package answering as ``config`` describes."""
    root = pathlib.Path(root)
    (root / "torch").mkdir(parents=True, exist_ok=True)
    (root / "torch" / "__init__.py").write_text(FAKE_TORCH.format(label=label, config=config))
    return root


class FakeBin:
    """A ``bin`` directory that is the whole PATH, for fake vendor tools and docker."""

    def __init__(self, path):
        self.path = path
        self.path.mkdir()

    def _write(self, name, text):
        exe = self.path / name
        exe.write_text(text)
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return exe

    def tool(self, name, responses):
        """``responses`` maps the space-joined arguments to ``(rc, stdout, stderr)`` or ``stdout``."""
        normalized = {k: list(v) if isinstance(v, tuple) else [0, v, ""] for k, v in responses.items()}
        return self._write(
            name,
            FAKE_TOOL.format(
                python=sys.executable, name=name, log=str(self.log(name)), responses=json.dumps(normalized)
            ),
        )

    def docker(self, containers):
        config = self.path.parent / "docker-containers.json"
        config.write_text(json.dumps(containers))
        return self._write(
            "docker", FAKE_DOCKER.format(python=sys.executable, config=str(config), log=str(self.log("docker")))
        )

    def log(self, name):
        return self.path.parent / f"{name}.calls"

    def calls(self, name):
        log = self.log(name)
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


NVIDIA_QUERY = "--query-gpu=index,name,uuid,memory.total,compute_cap --format=csv,noheader,nounits"
AMD_SMI_LIST = "list --json"
AMD_SMI_STATIC = "static --asic --vram --json"
ROCM_SMI_PRODUCT = "--showproductname --json"
