"""module_utils/gpu.py: the parsers, visibility rules and checks, on fake probe outputs.

Every GPU here is a fake: the amd-smi / rocm-smi / nvidia-smi outputs under fixtures/ and the KFD
sysfs trees built in tmp_path stand in for MI300X, MI355X, Strix Halo and H200 machines that the
tests cannot run on. Only TORCH_PROBE itself runs for real, with this Python (and a fake torch).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gpu_fakes import (
    CUDA_H200_TORCH,
    GFX1151_NODE,
    MI300X_NODE,
    MI355X_NODE,
    MI355X_VRAM,
    ROCM_MI300X_TORCH,
    fixture_text,
    make_fake_torch,
    make_kfd_topology,
)

from ansible_collections.aic.stack.plugins.module_utils import gpu

# -- arch names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "arch"),
    [
        (90402, "gfx942"),  # MI300X / MI325X
        (90500, "gfx950"),  # MI350X / MI355X
        (110501, "gfx1151"),  # Strix Halo
        (90010, "gfx90a"),  # MI210 / MI250X: stepping 10 is printed in hex
        (90008, "gfx908"),
        (90012, "gfx90c"),
        (100300, "gfx1030"),
        (110000, "gfx1100"),
        (120001, "gfx1201"),
        ("90402", "gfx942"),
        (0, None),  # CPU nodes
        (None, None),
        ("junk", None),
    ],
)
def test_gfx_from_target_version(value, arch):
    assert gpu.gfx_from_target_version(value) == arch


@pytest.mark.parametrize(
    ("name", "arch"),
    [
        ("gfx942", "gfx942"),
        ("gfx942:sramecc+:xnack-", "gfx942"),
        ("GFX950", "gfx950"),
        ("gfx9010", "gfx90a"),  # old rocm-smi prints the stepping in decimal
        ("gfx906", "gfx906"),
        ("gfx1100", "gfx1100"),
        ("N/A", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_gfx(name, arch):
    assert gpu.normalize_gfx(name) == arch


# -- KFD sysfs --------------------------------------------------------------------------------------


def test_kfd_topology_fake_mi355x(tmp_path):
    """Fake KFD tree of an 8x MI355X node with 2 CPU sockets (nodes 0-1 are CPUs)."""
    nodes = make_kfd_topology(tmp_path, [MI355X_NODE] * 8, cpu_nodes=2, vram=MI355X_VRAM)

    devices = gpu.parse_kfd_topology(str(nodes))

    assert [d["index"] for d in devices] == list(range(8))
    assert [d["node_id"] for d in devices] == list(range(2, 10))
    assert {d["arch"] for d in devices} == {"gfx950"}
    assert {d["name"] for d in devices} == {"AMD GPU gfx950 [0x75a3]"}  # KFD names it "ip discovery"
    assert {d["memory_mb"] for d in devices} == {294896}
    assert devices[0]["uuid"] == f"GPU-{MI355X_NODE['unique_id']:016x}"
    assert len({d["uuid"] for d in devices}) == 8


def test_kfd_topology_nodes_sort_numerically(tmp_path):
    """Fake KFD tree with 4 CPU NUMA nodes: GPU nodes 4..11, so node 10 must come after node 9."""
    nodes = make_kfd_topology(tmp_path, [MI300X_NODE] * 8, cpu_nodes=4)

    devices = gpu.parse_kfd_topology(str(nodes))

    assert [d["node_id"] for d in devices] == list(range(4, 12))
    assert [d["index"] for d in devices] == list(range(8))
    assert {d["arch"] for d in devices} == {"gfx942"}
    assert {d["memory_mb"] for d in devices} == {196592}


def test_kfd_topology_fake_strix_halo_apu(tmp_path):
    """Fake KFD tree of a Strix Halo APU: one CPU node, one gfx1151 node without VRAM or unique_id."""
    nodes = make_kfd_topology(
        tmp_path, [GFX1151_NODE], cpu_nodes=1, vram=512 * 1024 * 1024, heap_type=0, name="gfx1151"
    )

    (device,) = gpu.parse_kfd_topology(str(nodes))

    assert device == {
        "index": 0,
        "name": "gfx1151",
        "arch": "gfx1151",
        "uuid": None,
        "memory_mb": None,  # system memory heap, not VRAM
        "node_id": 1,
    }


def test_kfd_topology_only_cpus(tmp_path):
    nodes = make_kfd_topology(tmp_path, [], cpu_nodes=2)
    assert gpu.parse_kfd_topology(str(nodes)) == []


def test_kfd_topology_missing_dir(tmp_path):
    with pytest.raises(OSError):
        gpu.parse_kfd_topology(str(tmp_path / "nope"))


def test_parse_kfd_properties_ignores_junk():
    assert gpu.parse_kfd_properties("simd_count 1216\nbogus\nname x y\ngfx_target_version 90402\n") == {
        "simd_count": 1216,
        "gfx_target_version": 90402,
    }


# -- amd-smi / rocm-smi ---------------------------------------------------------------------------


def test_amd_smi_fake_mi355x_gpu_data_envelope():
    """Fake amd-smi 26.x output (wrapped in gpu_data) for 8x MI355X."""
    devices = gpu.parse_amd_smi_json(
        fixture_text("amd-smi-static-mi355x.json"), fixture_text("amd-smi-list-mi355x.json")
    )

    assert len(devices) == 8
    assert devices[0] == {
        "index": 0,
        "name": "AMD Instinct MI355X",
        "arch": "gfx950",
        "uuid": "4bff75a3-0000-1000-80b2-b2a4e1d4f0c6",
        "memory_mb": 294896,
        "bdf": "0000:05:00.0",
        "node_id": 2,
    }
    assert [d["index"] for d in devices] == list(range(8))
    assert {d["arch"] for d in devices} == {"gfx950"}


def test_amd_smi_fake_mi300x_bare_list_without_list_output():
    """Fake amd-smi 24.x output (a bare list) for 8x MI300X; without `amd-smi list` there is no UUID."""
    devices = gpu.parse_amd_smi_json(fixture_text("amd-smi-static-mi300x.json"))

    assert len(devices) == 8
    assert devices[7] == {
        "index": 7,
        "name": "AMD Instinct MI300X",
        "arch": "gfx942",
        "uuid": None,
        "memory_mb": 196592,
    }


def test_amd_smi_na_fields_and_string_sizes():
    static = json.dumps(
        [
            {"gpu": 1, "asic": {"market_name": "N/A", "device_id": "0x74a1", "target_graphics_version": "N/A"}},
            {"gpu": 0, "asic": {"market_name": "AMD Instinct MI300X"}, "vram": {"size": "192 GB"}},
        ]
    )
    devices = gpu.parse_amd_smi_json(static)
    assert devices == [
        {"index": 0, "name": "AMD Instinct MI300X", "arch": None, "uuid": None, "memory_mb": 196608},
        {"index": 1, "name": "AMD GPU [0x74a1]", "arch": None, "uuid": None, "memory_mb": None},
    ]


def test_amd_smi_warnings_before_json():
    text = "WARNING: AMD SMI is running as a non-root user\n" + fixture_text("amd-smi-static-mi300x.json")
    assert len(gpu.parse_amd_smi_json(text)) == 8


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status (sudo modprobe amdgpu)",
        '{"error": "nope"}',
        "[1, 2]",
    ],
)
def test_amd_smi_garbage(text):
    with pytest.raises(gpu.GpuProbeError, match="amd-smi static"):
        gpu.parse_amd_smi_json(text)


def test_rocm_smi_fake_mi300x():
    """Fake rocm-smi --showproductname --json for 8x MI300X."""
    devices = gpu.parse_rocm_smi_json(fixture_text("rocm-smi-productname-mi300x.json"))

    assert len(devices) == 8
    assert devices[3] == {
        "index": 3,
        "name": "AMD Instinct MI300X OAM",
        "arch": "gfx942",
        "uuid": None,
        "memory_mb": None,
    }


def test_rocm_smi_old_gfx_version_and_system_key():
    """Fake rocm-smi 5.x output for an MI250X: it printed gfx90a as gfx9010."""
    text = json.dumps(
        {
            "card0": {"Card Series": "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2", "GFX Version": "gfx9010"},
            "system": {"Driver version": "6.7.0"},
        }
    )
    assert gpu.parse_rocm_smi_json(text) == [
        {
            "index": 0,
            "name": "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2",
            "arch": "gfx90a",
            "uuid": None,
            "memory_mb": None,
        }
    ]


# -- nvidia-smi -----------------------------------------------------------------------------------


def test_nvidia_smi_fake_h200():
    """Fake nvidia-smi --query-gpu CSV for 8x H200."""
    devices = gpu.parse_nvidia_smi_csv(fixture_text("nvidia-smi-h200.csv"))

    assert len(devices) == 8
    assert devices[0] == {
        "index": 0,
        "name": "NVIDIA H200",
        "arch": "sm_90",
        "compute_capability": "9.0",
        "uuid": "GPU-2f5c1a3e-8d4b-7c61-0e9f-5a3b2d1c4e6f",
        "memory_mb": 143771,
    }


def test_nvidia_smi_without_compute_cap_and_na_memory():
    text = "0, NVIDIA A100-SXM4-80GB MIG 1g.10gb, GPU-5b0f6c2e-1d3a-4b7c-9e8f-0a1b2c3d4e5f, [N/A]\n"
    assert gpu.parse_nvidia_smi_csv(text) == [
        {
            "index": 0,
            "name": "NVIDIA A100-SXM4-80GB MIG 1g.10gb",
            "arch": None,
            "compute_capability": None,
            "uuid": "GPU-5b0f6c2e-1d3a-4b7c-9e8f-0a1b2c3d4e5f",
            "memory_mb": None,
        }
    ]


def test_nvidia_smi_no_output_is_no_device():
    assert gpu.parse_nvidia_smi_csv("") == []
    assert gpu.parse_nvidia_smi_csv("\n") == []


@pytest.mark.parametrize(
    "text",
    [
        "No devices were found",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "0, NVIDIA H200, GPU-x, 143771, sm90",
    ],
)
def test_nvidia_smi_garbage(text):
    with pytest.raises(gpu.GpuProbeError, match="nvidia-smi"):
        gpu.parse_nvidia_smi_csv(text)


# -- torch probe ----------------------------------------------------------------------------------


def test_torch_probe_fake_rocm_mi300x():
    """Fake probe line from a ROCm torch on 8x MI300X."""
    report = gpu.parse_torch_probe(fixture_text("torch-probe-rocm-mi300x.txt"))

    assert report["vendor"] == "amd"
    assert len(report["devices"]) == 8
    assert report["devices"][0] == {
        "index": 0,
        "name": "AMD Instinct MI300X",
        "arch": "gfx942",
        "gcn_arch_name": "gfx942:sramecc+:xnack-",
        "uuid": None,
        "memory_mb": 196288,
    }
    torch = report["torch"]
    assert torch["version"] == "2.9.0+rocm6.4"
    assert torch["hip"] == "6.4.43482-0f2d60242"
    assert torch["cuda"] is None
    assert (torch["is_available"], torch["device_count"], torch["error"]) == (True, 8, None)


def test_torch_probe_fake_cuda_h200():
    """Fake probe line from a CUDA torch on 8x H200: bare UUIDs get nvidia-smi's GPU- prefix."""
    report = gpu.parse_torch_probe(fixture_text("torch-probe-cuda-h200.txt"))

    assert report["vendor"] == "nvidia"
    assert report["devices"][0] == {
        "index": 0,
        "name": "NVIDIA H200",
        "arch": "sm_90",
        "compute_capability": "9.0",
        "uuid": "GPU-2f5c1a3e-8d4b-7c61-0e9f-5a3b2d1c4e6f",
        "memory_mb": 143771,
    }


def test_torch_probe_fake_zero_devices_is_described():
    """Fake probe line from a ROCm torch in a container started without /dev/kfd."""
    report = gpu.parse_torch_probe("some import noise\n" + fixture_text("torch-probe-rocm-zero.txt"))

    assert report["vendor"] == "amd"
    assert report["devices"] == []
    assert gpu.describe_torch(report["torch"]) == (
        "torch 2.9.0+rocm6.4 (hip 6.4.43482-0f2d60242); torch.cuda.is_available()=False; "
        "torch.cuda.device_count()=0; python 3.12.3; no /dev/kfd; render nodes: none; /dev/nvidia*: none"
    )


@pytest.mark.parametrize("text", ["", "Traceback (most recent call last):\n  ...", "AIC_GPU_PROBE {not json"])
def test_torch_probe_garbage(text):
    with pytest.raises(gpu.GpuProbeError, match="torch probe"):
        gpu.parse_torch_probe(text)


def _run_probe(env):
    proc = subprocess.run([sys.executable, "-c", gpu.TORCH_PROBE], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_torch_probe_runs_without_torch(tmp_path):
    """The real probe code, with this Python and no torch on its path: it reports the import error."""
    report = gpu.parse_torch_probe(_run_probe({"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}).stdout)

    assert report["vendor"] == "none"
    assert report["devices"] == []
    assert report["torch"]["error"].startswith("import torch failed: ModuleNotFoundError")
    assert report["torch"]["python"] == sys.version.split()[0]
    assert gpu.describe_torch(report["torch"]).startswith("import torch failed: ModuleNotFoundError")


def test_torch_probe_runs_with_fake_rocm_torch(tmp_path):
    """The real probe code against a fake ROCm torch (8 fake MI300X), with HIP_VISIBLE_DEVICES=6,2."""
    root = make_fake_torch(tmp_path, ROCM_MI300X_TORCH)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HIP_VISIBLE_DEVICES": "6,2"}

    report = gpu.parse_torch_probe(_run_probe(env).stdout)

    assert report["vendor"] == "amd"
    assert report["torch"]["env"] == {"HIP_VISIBLE_DEVICES": "6,2"}
    assert [d["index"] for d in report["devices"]] == [0, 1]
    assert [d["uuid"] for d in report["devices"]] == [
        "68ff74a1-0000-1000-80d1-3c23a9580556",
        "28ff74a1-0000-1000-80d1-3c23a9580552",
    ]
    assert {d["arch"] for d in report["devices"]} == {"gfx942"}


def test_torch_probe_runs_with_fake_cuda_torch(tmp_path):
    """The real probe code against a fake CUDA torch (4 fake H200)."""
    root = make_fake_torch(tmp_path, CUDA_H200_TORCH, label="a CUDA build on 4 H200")
    report = gpu.parse_torch_probe(_run_probe({"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)}).stdout)

    assert report["vendor"] == "nvidia"
    assert [d["arch"] for d in report["devices"]] == ["sm_90"] * 4
    assert report["devices"][3]["uuid"] == "GPU-2f5c1a3e-8d4b-7c61-0e9f-5a3b2d1c4e63"


# -- visibility variables -------------------------------------------------------------------------


def _amd(n=8):
    return [
        {"index": i, "name": "AMD Instinct MI300X", "arch": "gfx942", "uuid": f"GPU-{0xA0 + i:016x}"} for i in range(n)
    ]


def _nvidia(n=8):
    return gpu.parse_nvidia_smi_csv(fixture_text("nvidia-smi-h200.csv"))[:n]


def _physical(devices):
    return [d["physical_index"] for d in devices]


def test_visibility_none_keeps_everything():
    visible, applied = gpu.apply_visibility(_amd(), "amd", {})
    assert _physical(visible) == list(range(8))
    assert [d["index"] for d in visible] == list(range(8))
    assert applied == {}


def test_visibility_rocr_then_hip_indexes_into_rocr_selection():
    visible, applied = gpu.apply_visibility(
        _amd(), "amd", {"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "3,1"}
    )
    assert _physical(visible) == [7, 5]
    assert [d["index"] for d in visible] == [0, 1]
    assert applied == {"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "3,1"}


def test_visibility_hip_wins_over_cuda_on_amd():
    visible, applied = gpu.apply_visibility(_amd(), "amd", {"HIP_VISIBLE_DEVICES": "2", "CUDA_VISIBLE_DEVICES": "5"})
    assert _physical(visible) == [2]
    assert applied == {"HIP_VISIBLE_DEVICES": "2"}  # CUDA_VISIBLE_DEVICES is not used then


def test_visibility_cuda_applies_on_amd_without_hip():
    visible, _dummy = gpu.apply_visibility(_amd(), "amd", {"CUDA_VISIBLE_DEVICES": "5"})
    assert _physical(visible) == [5]


def test_visibility_rocr_by_uuid():
    visible, _dummy = gpu.apply_visibility(_amd(), "amd", {"ROCR_VISIBLE_DEVICES": "GPU-00000000000000a3,1"})
    assert _physical(visible) == [3, 1]


def test_visibility_nvidia_ignores_rocm_variables():
    visible, applied = gpu.apply_visibility(
        _nvidia(), "nvidia", {"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "6,2"}
    )
    assert _physical(visible) == [6, 2]
    assert applied == {"CUDA_VISIBLE_DEVICES": "6,2"}


def test_visibility_nvidia_uuid_prefix():
    visible, _dummy = gpu.apply_visibility(_nvidia(), "nvidia", {"CUDA_VISIBLE_DEVICES": "GPU-c47e2b18,GPU-2f5c"})
    assert _physical(visible) == [3, 0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", []),  # empty hides everything
        ("-1", []),
        ("1,9,2", [1]),  # out of range: the rest is ignored
        ("1,1,2", [1]),  # repeats stop the list too
        ("2,x,3", [2]),
        ("GPU-", []),  # ambiguous prefix
        (" 3 , 0 ", [3, 0]),
    ],
)
def test_visibility_cuda_list_semantics(value, expected):
    visible, _dummy = gpu.apply_visibility(_nvidia(), "nvidia", {"CUDA_VISIBLE_DEVICES": value})
    assert _physical(visible) == expected


# -- checks ---------------------------------------------------------------------------------------


def test_check_devices_ok():
    assert gpu.check_devices(_amd(), 8, ["gfx942"]) == []
    assert gpu.check_devices(_nvidia(), 1, ["sm_90"]) == []
    assert gpu.check_devices(_nvidia(), 1, ["9.0"]) == []
    assert gpu.check_devices([], 0) == []


def test_check_devices_too_few():
    assert gpu.check_devices(_amd(2), 8) == ["2 GPU(s) seen, expected at least 8"]
    assert gpu.check_devices([], 1) == ["0 GPU(s) seen, expected at least 1"]


def test_check_devices_wrong_arch():
    devices = _amd(3) + [
        {"index": 3, "name": "AMD Instinct MI355X", "arch": "gfx950"},
        {"index": 4, "name": None, "arch": None},
    ]
    devices[1]["arch"] = "gfx950"
    assert gpu.check_devices(devices, 1, ["gfx950", "gfx1151"]) == [
        "devices 0, 2 (AMD Instinct MI300X) have arch gfx942, expected one of: gfx950, gfx1151",
        "device 4 (unnamed) has arch unknown, expected one of: gfx950, gfx1151",
    ]


def test_arch_match_with_features():
    device = {"arch": "gfx942", "gcn_arch_name": "gfx942:sramecc+:xnack-"}
    assert gpu.arch_matches(device, ["gfx942"])
    assert gpu.arch_matches(device, ["GFX942:sramecc+:xnack-"])
    assert not gpu.arch_matches(device, ["gfx942:xnack+"])
