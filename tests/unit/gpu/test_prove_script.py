"""tests/unit/gpu/prove_on_gpu.sh, run against fakes: a fake nvidia-smi (8 fake H200, or none) first
on PATH and a fake CUDA torch. The real GPU run of the script is done by hand on a GPU machine."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from gpu_fakes import CUDA_H200_TORCH, FakeBin, fixture_text, make_fake_torch

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = REPO_ROOT / "tests" / "unit" / "gpu" / "prove_on_gpu.sh"
NVIDIA_QUERY = "--query-gpu=index,name,uuid,memory.total,compute_cap --format=csv,noheader,nounits"


@pytest.fixture
def run_script(tmp_path):
    fakes = FakeBin(tmp_path / "bin")

    def _run(nvidia_smi, torch_path=None, **env):
        fakes.tool("nvidia-smi", {NVIDIA_QUERY: nvidia_smi})
        full_env = {
            "PATH": f"{fakes.path}{os.pathsep}{os.environ['PATH']}",
            "PYTHON": sys.executable,  # has ansible-core: no install
            "GPU_CHECK_VENDOR": "nvidia",  # never the AMD probes of the machine running the tests
            "TMPDIR": str(tmp_path),
            **env,
        }
        if torch_path:
            full_env["PYTHONPATH"] = str(torch_path)
        proc = subprocess.run(
            ["bash", str(SCRIPT)], cwd=REPO_ROOT, env=full_env, capture_output=True, text=True, timeout=120, check=False
        )
        return proc.returncode, proc.stdout + proc.stderr

    return _run


def test_script_without_gpu_fails_with_the_module_message(run_script):
    rc, out = run_script((6, "No devices were found\n", ""))

    assert rc == 1, out
    assert out.rstrip().endswith(
        "==> FAILED: host check (module exit 1): gpu_check on host (vendor nvidia): 0 GPU(s) seen, expected at least 1. "
        "Probed: nvidia-smi: `nvidia-smi --query-gpu=index,name,uuid,memory.total,compute_cap "
        "--format=csv,noheader,nounits` exited 6, printed: No devices were found"
    )
    assert '"count": 0' in out


def test_script_fake_h200_and_fake_torch(run_script, tmp_path):
    torch_path = make_fake_torch(tmp_path / "site", CUDA_H200_TORCH, label="a CUDA build on 4 H200")

    rc, out = run_script(fixture_text("nvidia-smi-h200.csv"), torch_path, GPU_CHECK_EXPECTED_ARCH="sm_90")

    assert rc == 0, out
    assert "==> host: 8 nvidia GPU(s) from nvidia-smi: NVIDIA H200 sm_90" in out
    assert "==> visible: ok (count, total_count, physical_index) = (1, 8, [0])" in out
    assert (
        "==> arch: ok, the module failed with: gpu_check on host (vendor nvidia): devices 0, 1, 2, 3, 4, 5, 6, 7 "
        "(NVIDIA H200) have arch sm_90, expected one of: gfx000" in out
    )
    assert (
        "==> torch: ok, torch 2.9.0+cu128 (cuda 12.8); torch.cuda.is_available()=True; torch.cuda.device_count()=4"
        in out
    )
    assert out.rstrip().endswith("==> PASSED: gpu_check sees 8 nvidia GPU(s) from nvidia-smi")


def test_script_skips_torch_when_missing(run_script, tmp_path):
    rc, out = run_script(fixture_text("nvidia-smi-h200.csv"), tmp_path / "no-torch-here")

    assert rc == 0, out
    assert "==> 4. torch: SKIPPED - " in out
    assert "cannot import torch" in out


def test_script_wrong_expected_arch_fails_the_host_check(run_script):
    rc, out = run_script(fixture_text("nvidia-smi-h200.csv"), GPU_CHECK_EXPECTED_ARCH="sm_100")

    assert rc == 1, out
    assert (
        "==> FAILED: host check (module exit 1): gpu_check on host (vendor nvidia): devices 0, 1, 2, 3, 4, 5, 6, 7"
        " (NVIDIA H200) have arch sm_90, expected one of: sm_100" in out
    )
