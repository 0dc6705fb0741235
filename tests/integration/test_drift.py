"""No drift on the real local stack: what runs is what the plan says. Every container option the plan controls, set
to something else and then taken away again, comes back to the default; a rerun changes nothing.

community.docker never compares an option the task omits, and by default lets a container keep more environment,
mounts, ulimits or ports than the task asks for: before the strict comparisons and explicit defaults of the roles, a
deploy after `-e aic_vllm_pid_mode=lmcache` reported success and left vLLM in LMCache's PID namespace.
"""

from __future__ import annotations

import docker
import pytest

from .conftest import changed_tasks, failures, run_playbook, stack_answers, stack_fingerprint

pytestmark = pytest.mark.integration

PROBE = "AIC_DRIFT_PROBE"


def inspect(name):
    return docker.from_env().containers.get(name).attrs


@pytest.fixture(scope="module")
def default_fingerprint(local_stack):
    """The default stack's fingerprint from this session's last default deploy. The stack need not be the default
    now (test_faults leaves SPUR's namespace settings): the deploy below changes it anyway."""
    if local_stack.fingerprint is None:
        local_stack.ensure()
    return local_stack.fingerprint


def test_options_taken_away_come_back_to_the_default(local_stack, default_fingerprint, tmp_path):
    # The local inventory's values, each changed or extended (vllm_env and lmcache_ulimits replace the inventory's).
    changed = {
        "aic_vllm_pid_mode": "lmcache",  # default: vLLM's own PID namespace (omitted before)
        "aic_vllm_ipc_mode": "host",  # default: LMCache's shareable IPC namespace
        "aic_vllm_port": 8001,  # published port
        "aic_lmcache_l2_backend": "none",  # no L2 mount
        "vllm_env": {
            PROBE: "1",
            "OMP_NUM_THREADS": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        },
        "lmcache_ulimits": ["nofile:16384:16384", "core:0:0"],
    }
    runner = run_playbook("deploy.yml", tmp_path / "changed", extravars=changed)
    assert runner.status == "successful", failures(runner)
    vllm, lmcache = inspect("aic-vllm"), inspect("aic-lmcache")
    assert vllm["HostConfig"]["PidMode"] == f"container:{lmcache['Id']}"
    assert vllm["HostConfig"]["IpcMode"] == lmcache["HostConfig"]["IpcMode"] == "host"
    assert f"{PROBE}=1" in vllm["Config"]["Env"]
    assert "8001/tcp" in vllm["HostConfig"]["PortBindings"]
    assert {u["Name"] for u in lmcache["HostConfig"]["Ulimits"]} == {"nofile", "core"}
    assert not [m for m in lmcache["HostConfig"].get("Mounts") or [] if m["Target"] == "/data/nvme"]

    # The default deploy again (the conftest's, so the next module finds its default stack): back at the default.
    local_stack.deploy()
    assert stack_fingerprint() == default_fingerprint
    vllm = inspect("aic-vllm")
    assert vllm["HostConfig"]["PidMode"] == ""
    assert not [e for e in vllm["Config"]["Env"] if e.startswith(PROBE)]
    assert stack_answers()

    # Every role again (not the no-op fast path): the roles themselves converge on what the default deploy left.
    rerun = run_playbook("deploy.yml", tmp_path / "rerun", extravars={"aic_deploy_fast_path": False})
    assert rerun.status == "successful", failures(rerun)
    assert all(count == 0 for count in rerun.stats["changed"].values()), changed_tasks(rerun)
