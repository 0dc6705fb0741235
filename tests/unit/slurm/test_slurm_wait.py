"""The slurm_wait module against fake squeue/scontrol/sacct/scancel commands on PATH (the real Slurm is in
tests/integration/test_slurm_job.py): SPUR's table, the exit file first, the fallbacks, the timeout."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.aic.stack.plugins.modules import slurm_wait

SPUR_TABLE = """\
             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)
               999  amd-spur    other      bob  R       1:01      1 crsuse2-m2m-002
"""


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """Write fake Slurm commands (name -> shell body) into a bin dir that comes first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    calls = tmp_path / "calls"

    def _write(**commands):
        for name, body in commands.items():
            path = bin_dir / name
            path.write_text(f'#!/bin/sh\necho "{name} $*" >>{calls}\n{body}\n')
            path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return calls

    return _write


def test_spur_job_left_the_queue_exit_file_wins(fake_slurm, tmp_path, run_module):
    calls = fake_slurm(squeue=f"cat <<'EOF'\n{SPUR_TABLE}EOF", sacct="echo '42|FAILED|141:0'")
    exit_file = tmp_path / "job.exit"
    exit_file.write_text("0\n")
    result = run_module(
        slurm_wait,
        {
            "job_id": "42",
            "dialect": "spur",
            "controller": "ctl:6817",
            "exit_file": str(exit_file),
            "poll_interval": 0.1,
        },
    )
    assert not result.failed, result
    assert (result["exit_code"], result["exit_source"], result["changed"]) == (0, "exit_file", False)
    assert calls.read_text().splitlines() == ["squeue --controller ctl:6817"]


def test_slurm_job_without_exit_file_uses_scontrol_then_fails(fake_slurm, tmp_path, run_module):
    fake_slurm(squeue="true", scontrol="echo 'JobId=7 JobState=FAILED ExitCode=3:0 NodeList=vm'")
    err = tmp_path / "job.err"
    err.write_text("line1\nboom\n")
    result = run_module(
        slurm_wait,
        {"job_id": "7", "exit_file": str(tmp_path / "none.exit"), "exit_file_timeout": 0, "err_file": str(err)},
    )
    assert result.failed
    assert (result["exit_code"], result["exit_source"], result["state"]) == (3, "scontrol", "FAILED")
    assert "Slurm job 7 exited with code 3 (state FAILED)" in result["msg"]
    assert "boom" in result["msg"]


def test_unknown_exit_code_fails_unless_told_not_to(fake_slurm, run_module):
    fake_slurm(squeue="true", scontrol="exit 1", sacct="echo 'Slurm accounting storage is disabled' >&2; exit 1")
    result = run_module(slurm_wait, {"job_id": "8"})
    assert result.failed
    assert "exit code is unknown" in result["msg"]
    result = run_module(slurm_wait, {"job_id": "8", "fail_on_error": False})
    assert not result.failed
    assert result["exit_code"] is None


def test_timeout_cancels_the_job(fake_slurm, run_module):
    calls = fake_slurm(squeue="echo '9|RUNNING'", scancel="true")
    result = run_module(slurm_wait, {"job_id": "9", "timeout": 0, "poll_interval": 0.1})
    assert result.failed
    assert result["cancelled"] and result["changed"]
    assert "still RUNNING after 0 s; cancelled it" in result["msg"]
    assert "scancel 9" in calls.read_text()
    # check mode never cancels
    result = run_module(slurm_wait, {"job_id": "9", "timeout": 0}, check_mode=True)
    assert result.failed and not result["cancelled"]


def test_bad_job_id(run_module):
    result = run_module(slurm_wait, {"job_id": "12; rm -rf /"})
    assert result.failed and "job_id must be a Slurm job id" in result["msg"]
