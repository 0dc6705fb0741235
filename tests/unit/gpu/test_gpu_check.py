"""aic.stack.gpu_check, run in-process against fake GPU tools on PATH.

Everything the module probes here is a fake (see gpu_fakes.py and fixtures/README.md):
``nvidia-smi``, ``amd-smi``, ``rocm-smi`` and ``docker`` are small scripts in tmp_path that print
canned outputs of 8x H200 / MI300X / MI355X machines, the KFD sysfs tree is built in tmp_path,
and the container's torch is a fake package. The module code, its subprocess calls and the torch
probe program are the real ones.
"""

from __future__ import annotations

import sys

import pytest
from gpu_fakes import (
    AMD_SMI_LIST,
    AMD_SMI_STATIC,
    CUDA_H200_TORCH,
    MI300X_NODE,
    MI355X_NODE,
    MI355X_VRAM,
    NVIDIA_QUERY,
    ROCM_MI300X_TORCH,
    ROCM_NO_DEVICE_TORCH,
    ROCM_SMI_PRODUCT,
    fixture_text,
    make_fake_torch,
    make_kfd_topology,
)

from ansible_collections.aic.stack.plugins.module_utils import gpu
from ansible_collections.aic.stack.plugins.modules import gpu_check

NO_DEVICES = (6, "No devices were found\n", "")
DRIVER_DOWN = (
    9,
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
    "NVIDIA driver is installed and running.\n\n",
    "",
)
AMD_SMI_NO_GPU = (
    255,
    "",
    "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status (sudo modprobe amdgpu)\n",
)


def fake_h200(fake_bin, **responses):
    responses.setdefault(NVIDIA_QUERY, fixture_text("nvidia-smi-h200.csv"))
    fake_bin.tool("nvidia-smi", responses)


def fake_amd_smi(fake_bin, machine="mi355x", overrides=None):
    responses = {
        AMD_SMI_LIST: fixture_text(f"amd-smi-list-{machine}.json"),
        AMD_SMI_STATIC: fixture_text(f"amd-smi-static-{machine}.json"),
    }
    responses.update(overrides or {})
    fake_bin.tool("amd-smi", responses)


def use_kfd(monkeypatch, nodes):
    monkeypatch.setattr(gpu, "KFD_NODES_DIR", str(nodes))


# -- host: NVIDIA -----------------------------------------------------------------------------------


def test_host_fake_h200(fake_bin, run_module):
    """Fake nvidia-smi of 8 H200: vendor auto finds no AMD tool, then nvidia-smi answers."""
    fake_h200(fake_bin)

    result = run_module(gpu_check, {})

    assert result.rc == 0, result.get("msg")
    assert result["changed"] is False
    assert (result["where"], result["vendor"], result["source"]) == ("host", "nvidia", "nvidia-smi")
    assert (result["count"], result["total_count"]) == (8, 8)
    assert result["devices"][7] == {
        "index": 7,
        "physical_index": 7,
        "name": "NVIDIA H200",
        "arch": "sm_90",
        "compute_capability": "9.0",
        "uuid": "GPU-a9f61d3c-4e87-05b2-9d6a-c3e1f0b7254d",
        "memory_mb": 143771,
    }
    assert [p["probe"] for p in result["probes"]] == ["amd-smi", "rocm-smi", "kfd-sysfs", "nvidia-smi"]
    assert result["probes"][0] == {"probe": "amd-smi", "skipped": "amd-smi not found on PATH"}
    assert result["probes"][-1]["rc"] == 0
    assert result["probes"][-1]["devices"] == 8
    assert fake_bin.calls("nvidia-smi") == [NVIDIA_QUERY.split()]


def test_host_fake_h200_check_mode_and_expected_arch(fake_bin, run_module):
    fake_h200(fake_bin)

    result = run_module(gpu_check, {"vendor": "nvidia", "min_devices": 8, "expected_arch": ["sm_90"]}, check_mode=True)

    assert result.rc == 0, result.get("msg")
    assert (result["changed"], result["count"]) == (False, 8)
    assert [p["probe"] for p in result["probes"]] == ["nvidia-smi"]


def test_host_fake_h200_wrong_arch(fake_bin, run_module):
    fake_h200(fake_bin)

    result = run_module(gpu_check, {"expected_arch": ["gfx942", "gfx950"]})

    assert result.rc == 1
    assert result.failed
    assert result["msg"] == (
        "gpu_check on host (vendor auto): devices 0, 1, 2, 3, 4, 5, 6, 7 (NVIDIA H200) have arch sm_90, "
        "expected one of: gfx942, gfx950. Probed: amd-smi: amd-smi not found on PATH; "
        "rocm-smi: rocm-smi not found on PATH; "
        f"kfd-sysfs: {gpu.KFD_NODES_DIR} does not exist (amdgpu driver not loaded?); "
        "nvidia-smi: `nvidia-smi --query-gpu=index,name,uuid,memory.total,compute_cap --format=csv,noheader,nounits` "
        "exited 0, 8 GPU(s)"
    )
    assert result["count"] == 8  # what was seen is still returned


def test_host_fake_h200_visible_devices(fake_bin, run_module):
    fake_h200(fake_bin)

    result = run_module(
        gpu_check, {"visible_devices": {"CUDA_VISIBLE_DEVICES": "5,GPU-6d0a9c53", "HIP_VISIBLE_DEVICES": "1"}}
    )

    assert result.rc == 0, result.get("msg")
    assert (result["count"], result["total_count"]) == (2, 8)
    assert [(d["index"], d["physical_index"]) for d in result["devices"]] == [(0, 5), (1, 2)]
    assert result["visible_devices"] == {"CUDA_VISIBLE_DEVICES": "5,GPU-6d0a9c53"}


def test_host_fake_h200_all_hidden(fake_bin, run_module):
    fake_h200(fake_bin)

    result = run_module(gpu_check, {"visible_devices": {"CUDA_VISIBLE_DEVICES": ""}})

    assert result.rc == 1
    assert result["msg"].startswith(
        "gpu_check on host (vendor auto): 0 GPU(s) seen, expected at least 1. "
        "Probed: nvidia-smi found 8 GPU(s), 0 visible with CUDA_VISIBLE_DEVICES=''; "
    )
    assert (result["count"], result["total_count"]) == (0, 8)


def test_host_fake_nvidia_smi_no_devices(fake_bin, run_module):
    """Fake nvidia-smi on a node whose GPUs are gone: the message names every probe and what it printed."""
    fake_h200(fake_bin, **{NVIDIA_QUERY: NO_DEVICES})

    result = run_module(gpu_check, {})

    assert result.rc == 1
    nodes = gpu.KFD_NODES_DIR
    assert result["msg"] == (
        "gpu_check on host (vendor auto): 0 GPU(s) seen, expected at least 1. "
        "Probed: amd-smi: amd-smi not found on PATH; rocm-smi: rocm-smi not found on PATH; "
        f"kfd-sysfs: {nodes} does not exist (amdgpu driver not loaded?); "
        "nvidia-smi: `nvidia-smi --query-gpu=index,name,uuid,memory.total,compute_cap "
        "--format=csv,noheader,nounits` exited 6, printed: No devices were found"
    )
    assert (result["vendor"], result["source"], result["count"], result["devices"]) == ("none", None, 0, [])


def test_host_fake_nvidia_driver_down(fake_bin, run_module):
    fake_h200(fake_bin, **{NVIDIA_QUERY: DRIVER_DOWN})

    result = run_module(gpu_check, {"vendor": "nvidia", "min_devices": 2})

    assert result.rc == 1
    assert result["msg"].startswith(
        "gpu_check on host (vendor nvidia): 0 GPU(s) seen, expected at least 2. Probed: nvidia-smi: "
        "`nvidia-smi --query-gpu=index,name,uuid,memory.total,compute_cap --format=csv,noheader,nounits` exited 9, "
        "printed: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )
    assert result["vendor"] == "nvidia"


def test_host_fake_old_nvidia_driver_without_compute_cap(fake_bin, run_module):
    """Fake nvidia-smi of a pre-510 driver: compute_cap is unknown, the query is retried without it."""
    fake_bin.tool(
        "nvidia-smi",
        {
            NVIDIA_QUERY: (2, 'Field "compute_cap" is not a valid field to query.\n\n', ""),
            "--query-gpu=index,name,uuid,memory.total --format=csv,noheader,nounits": (
                "0, Tesla V100-SXM2-32GB, GPU-8d6f2a51-0c3e-4b7d-a9e2-1f5c6b3d7e08, 32768\n"
            ),
        },
    )

    result = run_module(gpu_check, {"vendor": "nvidia"})
    assert result.rc == 0, result.get("msg")
    assert result["devices"][0]["arch"] is None
    assert [p["rc"] for p in result["probes"]] == [2, 0]

    result = run_module(gpu_check, {"vendor": "nvidia", "expected_arch": ["sm_70"]})
    assert result.rc == 1
    assert "device 0 (Tesla V100-SXM2-32GB) has arch unknown, expected one of: sm_70" in result["msg"]


def test_host_nothing_installed(fake_bin, run_module):
    result = run_module(gpu_check, {"min_devices": 0})

    assert result.rc == 0, result.get("msg")
    assert (result["vendor"], result["source"], result["count"]) == ("none", None, 0)
    assert [p.get("skipped", "").split(" ")[0] for p in result["probes"]] == [
        "amd-smi",
        "rocm-smi",
        gpu.KFD_NODES_DIR,
        "nvidia-smi",
    ]


# -- host: AMD ----------------------------------------------------------------------------------------


def test_host_fake_amd_smi_mi355x(fake_bin, run_module):
    """Fake amd-smi 26.x of 8 MI355X; nvidia-smi is never asked once AMD answered."""
    fake_amd_smi(fake_bin, "mi355x")
    fake_h200(fake_bin)

    result = run_module(gpu_check, {"min_devices": 8, "expected_arch": ["gfx950"]})

    assert result.rc == 0, result.get("msg")
    assert (result["vendor"], result["source"], result["count"]) == ("amd", "amd-smi", 8)
    assert result["devices"][0] == {
        "index": 0,
        "physical_index": 0,
        "name": "AMD Instinct MI355X",
        "arch": "gfx950",
        "uuid": "4bff75a3-0000-1000-80b2-b2a4e1d4f0c6",
        "memory_mb": 294896,
        "bdf": "0000:05:00.0",
        "node_id": 2,
    }
    assert fake_bin.calls("amd-smi") == [AMD_SMI_LIST.split(), AMD_SMI_STATIC.split()]
    assert fake_bin.calls("nvidia-smi") == []


def test_host_fake_amd_smi_mi300x_expected_mi355x(fake_bin, run_module):
    """Fake amd-smi 24.x of 8 MI300X where MI355X (gfx950) were expected."""
    fake_amd_smi(fake_bin, "mi300x")

    result = run_module(gpu_check, {"vendor": "amd", "expected_arch": ["gfx950"]})

    assert result.rc == 1
    assert result["msg"] == (
        "gpu_check on host (vendor amd): devices 0, 1, 2, 3, 4, 5, 6, 7 (AMD Instinct MI300X) have arch gfx942, "
        "expected one of: gfx950. Probed: amd-smi: `amd-smi list --json` exited 0, 8 GPU(s); "
        "amd-smi: `amd-smi static --asic --vram --json` exited 0, 8 GPU(s)"
    )
    assert result["source"] == "amd-smi"


def test_host_fake_amd_smi_mi300x_rocr_and_hip_visibility(fake_bin, run_module):
    fake_amd_smi(fake_bin, "mi300x")

    result = run_module(
        gpu_check,
        {"visible_devices": {"ROCR_VISIBLE_DEVICES": "2,3,4", "HIP_VISIBLE_DEVICES": [2, 0]}, "min_devices": 2},
    )

    assert result.rc == 0, result.get("msg")
    assert [(d["index"], d["physical_index"], d["bdf"]) for d in result["devices"]] == [
        (0, 4, "0000:9f:00.0"),
        (1, 2, "0000:38:00.0"),
    ]
    assert result["visible_devices"] == {"ROCR_VISIBLE_DEVICES": "2,3,4", "HIP_VISIBLE_DEVICES": "2,0"}


def test_host_amd_smi_broken_falls_back_to_rocm_smi(fake_bin, run_module):
    """Fake amd-smi that finds no GPU, fake rocm-smi of 8 MI300X."""
    fake_amd_smi(fake_bin, overrides={AMD_SMI_LIST: AMD_SMI_NO_GPU, AMD_SMI_STATIC: AMD_SMI_NO_GPU})
    fake_bin.tool("rocm-smi", {ROCM_SMI_PRODUCT: fixture_text("rocm-smi-productname-mi300x.json")})

    result = run_module(gpu_check, {"vendor": "amd"})

    assert result.rc == 0, result.get("msg")
    assert (result["source"], result["count"]) == ("rocm-smi", 8)
    assert result["devices"][0]["name"] == "AMD Instinct MI300X OAM"
    assert [(p["probe"], p.get("rc")) for p in result["probes"]] == [
        ("amd-smi", 255),
        ("amd-smi", 255),
        ("rocm-smi", 0),
    ]


def test_host_kfd_sysfs_only(fake_bin, run_module, tmp_path, monkeypatch):
    """No AMD tool, only a fake KFD tree of 8 MI355X (as in a container without ROCm userland)."""
    use_kfd(monkeypatch, make_kfd_topology(tmp_path / "kfd", [MI355X_NODE] * 8, vram=MI355X_VRAM))

    result = run_module(gpu_check, {"expected_arch": ["gfx950"], "min_devices": 8})

    assert result.rc == 0, result.get("msg")
    assert (result["vendor"], result["source"], result["count"]) == ("amd", "kfd-sysfs", 8)
    assert result["devices"][1] == {
        "index": 1,
        "physical_index": 1,
        "name": "AMD GPU gfx950 [0x75a3]",
        "arch": "gfx950",
        "uuid": f"GPU-{MI355X_NODE['unique_id'] + 1:016x}",
        "memory_mb": 294896,
        "node_id": 3,
    }
    assert result["probes"][-1]["output"].startswith("node 2: gfx950, node 3: gfx950")


def test_host_kfd_sysfs_only_cpus(fake_bin, run_module, tmp_path, monkeypatch):
    """Fake KFD tree with CPU nodes only (amdgpu loaded, no GPU bound)."""
    use_kfd(monkeypatch, make_kfd_topology(tmp_path / "kfd", [], cpu_nodes=2))

    result = run_module(gpu_check, {"vendor": "amd"})

    assert result.rc == 1
    assert result["msg"] == (
        "gpu_check on host (vendor amd): 0 GPU(s) seen, expected at least 1. "
        "Probed: amd-smi: amd-smi not found on PATH; rocm-smi: rocm-smi not found on PATH; "
        f"kfd-sysfs: `read {gpu.KFD_NODES_DIR}/*/properties`, 0 GPU(s), printed: only CPU nodes"
    )


def test_host_old_amd_smi_arch_from_kfd(fake_bin, run_module, tmp_path, monkeypatch):
    """Fake old amd-smi without target_graphics_version: the arch comes from the fake KFD tree by node id."""
    static = fixture_text("amd-smi-static-mi300x.json").replace('"target_graphics_version": "gfx942"', '"x": 1')
    fake_amd_smi(fake_bin, "mi300x", {AMD_SMI_STATIC: static})
    use_kfd(monkeypatch, make_kfd_topology(tmp_path / "kfd", [MI300X_NODE] * 8))

    result = run_module(gpu_check, {"expected_arch": ["gfx942"]})

    assert result.rc == 0, result.get("msg")
    assert result["source"] == "amd-smi"
    assert {d["arch"] for d in result["devices"]} == {"gfx942"}


def test_host_bad_visible_devices_key(fake_bin, run_module):
    fake_h200(fake_bin)

    result = run_module(gpu_check, {"visible_devices": {"NVIDIA_VISIBLE_DEVICES": "0"}})

    assert result.rc == 1
    assert result["msg"] == (
        "visible_devices: unsupported variable 'NVIDIA_VISIBLE_DEVICES', expected one of "
        "ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES"
    )


# -- container ----------------------------------------------------------------------------------------


_MI300X = object()


def container(fake_bin, tmp_path, torch_config=_MI300X, **spec):
    """A fake docker knowing container ``vllm``, whose python has a fake torch (default: ROCM_MI300X_TORCH; None: no
    torch)."""
    if torch_config is _MI300X:
        torch_config = ROCM_MI300X_TORCH
    pythonpath = str(make_fake_torch(tmp_path / "site", torch_config)) if torch_config else str(tmp_path / "empty")
    spec = {"running": True, "env": {}, "pythonpath": pythonpath, "pythons": {"python3": sys.executable}, **spec}
    fake_bin.docker({"vllm": spec})


def test_container_fake_rocm_torch(fake_bin, run_module, tmp_path):
    """Fake docker + fake ROCm torch on 8 fake MI300X."""
    container(fake_bin, tmp_path)

    result = run_module(
        gpu_check, {"where": "container", "container": "vllm", "min_devices": 8, "expected_arch": ["gfx942"]}
    )

    assert result.rc == 0, result.get("msg")
    assert (result["where"], result["vendor"], result["source"], result["count"]) == ("container", "amd", "torch", 8)
    assert result["devices"][0] == {
        "index": 0,
        "name": "AMD Instinct MI300X",
        "arch": "gfx942",
        "gcn_arch_name": "gfx942:sramecc+:xnack-",
        "uuid": "08ff74a1-0000-1000-80d1-3c23a9580550",
        "memory_mb": 196288,
    }
    torch = result["torch"]
    assert (torch["version"], torch["hip"], torch["cuda"]) == ("2.9.0+rocm6.4", "6.4.43482-0f2d60242", None)
    assert (torch["is_available"], torch["device_count"], torch["error"]) == (True, 8, None)
    assert torch["executable"] == sys.executable
    (call,) = fake_bin.calls("docker")
    assert call[:4] == ["exec", "vllm", "python3", "-c"]
    assert call[4] == gpu.TORCH_PROBE
    assert result["probes"][0]["command"] == "docker exec vllm python3 -c <torch probe>"


def test_container_visible_devices_are_passed_to_docker_exec(fake_bin, run_module, tmp_path):
    container(fake_bin, tmp_path, env={"HIP_VISIBLE_DEVICES": "0,1,2,3"})

    result = run_module(
        gpu_check,
        {"where": "container", "container": "vllm", "visible_devices": {"HIP_VISIBLE_DEVICES": "7,5"}},
    )

    assert result.rc == 0, result.get("msg")
    assert [d["uuid"][:2] for d in result["devices"]] == ["78", "58"]
    assert result["torch"]["env"] == {"HIP_VISIBLE_DEVICES": "7,5"}
    assert fake_bin.calls("docker")[0][:4] == ["exec", "-e", "HIP_VISIBLE_DEVICES=7,5", "vllm"]


def test_container_torch_sees_zero_devices(fake_bin, run_module, tmp_path):
    """Fake ROCm torch that sees no device (container started without /dev/kfd): the vLLM failure mode."""
    container(fake_bin, tmp_path, ROCM_NO_DEVICE_TORCH, env={"HIP_VISIBLE_DEVICES": "0"})

    result = run_module(gpu_check, {"where": "container", "container": "vllm"})

    assert result.rc == 1
    msg = result["msg"]
    assert msg.startswith(
        "gpu_check in container 'vllm' (torch): 0 GPU(s) seen, expected at least 1. "
        "Probed: `docker exec vllm python3 -c <torch probe>` printed: torch 2.9.0+rocm6.4 (hip 6.4.43482-0f2d60242); "
        "torch.cuda.is_available()=False; torch.cuda.device_count()=0; "
    )
    assert "HIP_VISIBLE_DEVICES='0'" in msg
    assert "; stderr: UserWarning: HIP initialization: Unexpected error from hipGetDeviceCount()." in msg
    assert (result["vendor"], result["count"], result["torch"]["device_count"]) == ("amd", 0, 0)


def test_container_without_torch(fake_bin, run_module, tmp_path):
    container(fake_bin, tmp_path, torch_config=None)

    result = run_module(gpu_check, {"where": "container", "container": "vllm"})

    assert result.rc == 1
    assert result["msg"].startswith(
        "gpu_check in container 'vllm': python3 cannot import torch: `docker exec vllm python3 -c <torch probe>` "
        "printed: import torch failed: ModuleNotFoundError: No module named 'torch'; python "
    )
    assert result["torch"]["version"] is None


def test_container_python_not_found(fake_bin, run_module, tmp_path):
    container(fake_bin, tmp_path)

    result = run_module(gpu_check, {"where": "container", "container": "vllm", "python": "/opt/venv/bin/python3"})

    assert result.rc == 1
    assert result["msg"] == (
        "gpu_check in container 'vllm': the torch probe failed: `docker exec vllm /opt/venv/bin/python3 -c <torch probe>` "
        "exited 127: OCI runtime exec failed: exec failed: unable to start container process: exec: "
        '"/opt/venv/bin/python3": executable file not found in $PATH: unknown'
    )


@pytest.mark.parametrize(
    ("name", "spec", "error"),
    [
        ("other", {}, "Error response from daemon: No such container: other"),
        ("vllm", {"running": False}, "Error response from daemon: container 3f9a0c2d71b4 is not running"),
    ],
)
def test_container_not_there(fake_bin, run_module, tmp_path, name, spec, error):
    container(fake_bin, tmp_path, **spec)

    result = run_module(gpu_check, {"where": "container", "container": name})

    assert result.rc == 1
    assert result["msg"] == (
        f"gpu_check in container '{name}': the torch probe failed: `docker exec {name} python3 -c <torch probe>` "
        f"exited 1: {error}"
    )


def test_container_wrong_vendor(fake_bin, run_module, tmp_path):
    container(fake_bin, tmp_path, CUDA_H200_TORCH)

    result = run_module(gpu_check, {"where": "container", "container": "vllm", "vendor": "amd"})

    assert result.rc == 1
    assert result["msg"].startswith(
        "gpu_check in container 'vllm': torch is a CUDA build, expected vendor amd: "
        "`docker exec vllm python3 -c <torch probe>` printed: torch 2.9.0+cu128 (cuda 12.8); "
        "torch.cuda.is_available()=True; torch.cuda.device_count()=4; "
    )


def test_container_fake_cuda_torch_arch(fake_bin, run_module, tmp_path):
    container(fake_bin, tmp_path, CUDA_H200_TORCH)

    result = run_module(
        gpu_check, {"where": "container", "container": "vllm", "expected_arch": ["9.0"], "min_devices": 4}
    )

    assert result.rc == 0, result.get("msg")
    assert (result["vendor"], result["count"]) == ("nvidia", 4)
    assert {d["arch"] for d in result["devices"]} == {"sm_90"}


def test_container_requires_container(fake_bin, run_module):
    result = run_module(gpu_check, {"where": "container"})

    assert result.rc == 1
    assert result["msg"] == "where is container but all of the following are missing: container"


def test_container_without_docker_cli(fake_bin, run_module):
    result = run_module(gpu_check, {"where": "container", "container": "vllm"})

    assert result.rc == 1
    assert result["msg"] == "gpu_check in container 'vllm': the torch probe failed: the docker CLI is not on PATH"
