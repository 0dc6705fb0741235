"""The aic.stack.slurm inventory plugin and inventories/spur through the real ansible-inventory / ansible, with fake
Slurm/SPUR clients on PATH (multi-node jobs, which the single-node Slurm of the integration tests cannot give): every
host gets its own GPU ids (slurm_job_gpu_ids) and its own aic_gpus."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
VENV_BIN = pathlib.Path(sys.executable).parent

# `scontrol show job -d -o 4711` of a 3-node job with typed gres, two node sets (one line, as -o prints it).
SCONTROL_JOB = (
    "JobId=4711 JobName=cliff UserId=alice(1000) GroupId=alice(1000) JobState=RUNNING Reason=None Partition=defq "
    "NodeList=gpu[01-03] BatchHost=gpu01 NumNodes=3 NumCPUs=48 NumTasks=3 CPUs/Task=16 ReqB:S:C:T=0:0:*:* "
    "AllocTRES=cpu=48,node=3,gres/gpu=6 JOB_GRES=gpu:mi355x:6 "
    "  Nodes=gpu[01-02] CPU_IDs=0-15 Mem=65536 GRES=gpu:mi355x:2(IDX:0-1) "
    "  Nodes=gpu03 CPU_IDs=32-47 Mem=65536 GRES=gpu:mi355x:2(IDX:4,6) "
    "MinCPUsNode=16 Features=GFX942&NVME TresPerNode=gres:gpu:mi355x:2"
)
SQUEUE_SPUR = """\
             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)
               122  amd-spur    other      bob  R       5:01      1 crsuse2-m2m-009
               123  amd-spur    cliff    alice  R       1:01      2 crsuse2-m2m-[001-002]
"""


def _script(path, body):
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    path.chmod(0o755)


@pytest.fixture
def fake_bin(tmp_path):
    """Fake scontrol, squeue and spur-gpu-allocation; every call is appended to calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    (tmp_path / "scontrol-job.txt").write_text(SCONTROL_JOB + "\n")
    (tmp_path / "scontrol-done.txt").write_text(SCONTROL_JOB.replace("JobState=RUNNING", "JobState=COMPLETED") + "\n")
    (tmp_path / "squeue.txt").write_text(SQUEUE_SPUR)
    _script(
        bin_dir / "scontrol",
        f"""\
        echo "scontrol $*" >>{log}
        case "$*" in
          "show job -d -o 4711") cat {tmp_path}/scontrol-job.txt ;;
          "show job -d -o 4712") cat {tmp_path}/scontrol-done.txt ;;
          "show hostnames gpu[01-03]") printf 'gpu01\\ngpu02\\ngpu03\\n' ;;
          "show hostnames gpu[01-02]") printf 'gpu01\\ngpu02\\n' ;;
          "show hostnames gpu03") echo gpu03 ;;
          *) echo "scontrol: unexpected $*" >&2; exit 1 ;;
        esac
        """,
    )
    _script(
        bin_dir / "squeue",
        f"""\
        echo "squeue $*" >>{log}
        cat {tmp_path}/squeue.txt
        """,
    )
    _script(
        bin_dir / "spur-gpu-allocation",
        f"""\
        echo "spur-gpu-allocation $* SLURM_JOB_ID=$SLURM_JOB_ID SPUR_CONTROLLER_ADDR=$SPUR_CONTROLLER_ADDR" >>{log}
        [ "$1" = 123 ] || {{ echo "no such job $1" >&2; exit 3; }}
        printf '%s\\n' "${{FAKE_GPU_IDS-crsuse2-m2m-001: 0,1}}"
        """,
    )
    return bin_dir, log


def _env(bin_dir, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SPUR_", "AIC_SLURM_"))}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH=os.pathsep.join([str(bin_dir), str(VENV_BIN), env.get("PATH", "")]),
    )
    env.update(extra)
    return env


def inventory(source, bin_dir, **env):
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-inventory"), "-i", str(source), "--list"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(bin_dir, **env),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def _plain(value):
    # ansible-inventory 2.19 marks strings from plugins as unsafe in its JSON.
    if isinstance(value, dict) and "__ansible_unsafe" in value:
        return value["__ansible_unsafe"]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def hostvars(doc, host):
    return {k: _plain(v) for k, v in doc["_meta"]["hostvars"][host].items()}


def test_slurm_job_every_node_gets_its_own_gpu_ids(tmp_path, fake_bin):
    bin_dir, log = fake_bin
    config = tmp_path / "aic-slurm.yml"
    config.write_text('plugin: aic.stack.slurm\njob_id: "4711"\ncompose:\n  aic_gpus: slurm_job_gpu_ids\n')
    doc, _dummy = inventory(config, bin_dir)
    assert doc["aic_nodes"]["hosts"] == ["gpu01", "gpu02", "gpu03"]
    assert {h: hostvars(doc, h)["slurm_job_gpu_ids"] for h in ("gpu01", "gpu02", "gpu03")} == {
        "gpu01": ["0", "1"],
        "gpu02": ["0", "1"],
        "gpu03": ["4", "6"],
    }
    gpu03 = hostvars(doc, "gpu03")
    assert gpu03["aic_gpus"] == ["4", "6"]
    # The existing host variables are kept.
    assert gpu03["slurm_job_gpus"] == 2
    assert gpu03["slurm_job_id"] == "4711"
    assert gpu03["slurm_job_nodelist"] == "gpu[01-03]"
    assert gpu03["slurm_node_index"] == 2
    assert "scontrol show job -d -o 4711" in log.read_text().splitlines()


def test_a_finished_job_keeps_its_nodes_but_has_no_gpu_ids(tmp_path, fake_bin):
    bin_dir, _dummy = fake_bin
    config = tmp_path / "aic-slurm.yml"
    config.write_text('plugin: aic.stack.slurm\njob_id: "4712"\n')
    doc, _dummy = inventory(config, bin_dir)
    assert doc["aic_nodes"]["hosts"] == ["gpu01", "gpu02", "gpu03"]
    assert not [h for h in doc["aic_nodes"]["hosts"] if "slurm_job_gpu_ids" in hostvars(doc, h)]


def test_spur_ids_from_the_gpu_ids_command_per_node(tmp_path, fake_bin):
    bin_dir, log = fake_bin
    config = tmp_path / "spur-slurm.yml"
    config.write_text(
        "plugin: aic.stack.slurm\ndialect: spur\ncontroller: spur-ctl:6817\njob_id: '123'\n"
        "gpu_ids_command: spur-gpu-allocation {job_id}\n"
    )
    doc, _dummy = inventory(config, bin_dir, FAKE_GPU_IDS="crsuse2-m2m-001: 0,1\ncrsuse2-m2m-002: 4-5")
    assert hostvars(doc, "crsuse2-m2m-001")["slurm_job_gpu_ids"] == ["0", "1"]
    assert hostvars(doc, "crsuse2-m2m-002")["slurm_job_gpu_ids"] == ["4", "5"]
    calls = log.read_text().splitlines()
    assert "squeue --controller spur-ctl:6817" in calls
    assert "spur-gpu-allocation 123 SLURM_JOB_ID=123 SPUR_CONTROLLER_ADDR=spur-ctl:6817" in calls
    assert not [c for c in calls if c.startswith("scontrol")]  # SPUR has none


def test_spur_without_a_gpu_ids_command_leaves_the_ids_unknown(tmp_path, fake_bin):
    bin_dir, _dummy = fake_bin
    config = tmp_path / "spur-slurm.yml"
    config.write_text(
        "plugin: aic.stack.slurm\ndialect: spur\njob_id: '123'\ncompose:\n  aic_gpus: slurm_job_gpu_ids\n"
    )
    doc, _dummy = inventory(config, bin_dir)
    node = hostvars(doc, "crsuse2-m2m-001")
    assert "slurm_job_gpu_ids" not in node
    assert "aic_gpus" not in node  # compose skipped: group_vars fall back to none
    assert node["slurm_job_nodelist"] == "crsuse2-m2m-[001-002]"


def test_a_failing_gpu_ids_command_fails_the_source_with_its_message(tmp_path, fake_bin):
    bin_dir, _dummy = fake_bin
    config = tmp_path / "spur-slurm.yml"
    config.write_text("plugin: aic.stack.slurm\ndialect: spur\njob_id: '123'\ngpu_ids_command: spur-gpu-allocation 9\n")
    doc, stderr = inventory(config, bin_dir)
    assert "aic.stack.slurm: spur-gpu-allocation 9 failed (rc 3): no such job 9" in stderr
    assert "aic_nodes" not in doc  # empty: no host of a half-read job
    config.write_text(
        "plugin: aic.stack.slurm\ndialect: spur\njob_id: '123'\ngpu_ids_command: spur-gpu-allocation {job_id}\n"
    )
    _dummy, stderr = inventory(config, bin_dir, FAKE_GPU_IDS="crsuse2-m2m-001.spur: 0")
    assert "gpu_ids_command: node 'crsuse2-m2m-001.spur' is not a node of the job" in stderr


def test_inventories_spur_reads_the_job_and_each_node_its_own_gpus(fake_bin):
    """inventories/spur as an operator runs it: SLURM_JOB_ID and AIC_SLURM_GPU_IDS_COMMAND from the environment; the
    node the command names gets its GPUs, the other one none (group_vars/all's fallback), never the controller's
    SLURM_JOB_GPUS."""
    bin_dir, _dummy = fake_bin
    env = _env(
        bin_dir,
        SLURM_JOB_ID="123",
        SLURM_JOB_GPUS="7",
        AIC_SLURM_GPU_IDS_COMMAND="spur-gpu-allocation {job_id}",
        FAKE_GPU_IDS="crsuse2-m2m-001: 2,3",
    )
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible"),
            "-i",
            "inventories/spur",
            "aic_nodes",
            "-m",
            "ansible.builtin.debug",
            "-a",
            "msg={{ aic_gpus | to_json }}",
            "-o",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = {line.split(" | ")[0]: line for line in proc.stdout.splitlines() if " | SUCCESS" in line}
    assert sorted(lines) == ["crsuse2-m2m-001", "crsuse2-m2m-002"]
    assert '"msg": "[\\"2\\", \\"3\\"]"' in lines["crsuse2-m2m-001"]
    assert '"msg": "[]"' in lines["crsuse2-m2m-002"]


def test_inventories_spur_without_a_job_names_the_cause_and_matches_no_host(fake_bin):
    bin_dir, _dummy = fake_bin
    doc, stderr = inventory(REPO / "inventories" / "spur", bin_dir)
    assert "aic.stack.slurm: no job to read in" in stderr
    assert (
        "run inside an allocation (salloc, sbatch), export SLURM_JOB_ID=<job id>, or set job_id in the file" in stderr
    )
    assert doc["_meta"]["hostvars"] == {}
    # The static example is not loaded from there.
    assert "crsuse2-m2m-001" not in json.dumps(doc)
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible"),
            "-i",
            "inventories/spur",
            "localhost",
            "-m",
            "ansible.builtin.debug",
            "-a",
            "msg={{ groups['aic_nodes'] | to_json }}",
            "-o",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(bin_dir),
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"msg": "[]"' in proc.stdout  # the group exists and is empty


def test_the_static_example_is_a_valid_inventory(tmp_path, fake_bin):
    bin_dir, _dummy = fake_bin
    copy = tmp_path / "hosts.yml"
    copy.write_text((REPO / "inventories" / "spur" / "hosts.example.yml.txt").read_text())
    doc, _dummy = inventory(copy, bin_dir)
    assert doc["aic_nodes"]["hosts"] == ["crsuse2-m2m-001", "crsuse2-m2m-002"]
    assert hostvars(doc, "crsuse2-m2m-002")["slurm_job_gpu_ids"] == ["4"]
