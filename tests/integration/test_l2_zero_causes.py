"""The L2-zero health check fails, naming the cause, on the two silent failures the plan cannot rule out by itself.

- An L2 directory LMCache cannot write (made immutable with ``chattr +i``, so root in the container cannot write
  it either): NIXL's POSIX writes fail, LMCache logs a warning and keeps serving, nothing reaches L2.
- vLLM and LMCache in different IPC namespaces (the plan rejects that, so the test starts vLLM out of band, as a
  hand-written compose file would): vLLM's KV reaches LMCache, but no lookup ever matches.

Each case starts from a freshly created LMCache (a new L2 directory recreates it), so the counters are its own.
"""

from __future__ import annotations

import subprocess
import time

import docker
import pytest
import requests

from .conftest import failures, run_playbook
from .test_l2_tier import lmcache_health_l2, lmcache_metric, prompt, send
from .test_local_stack import VLLM, wait_healthy

pytestmark = pytest.mark.integration


def fresh_stack(session_tmp, l2_root):
    """Deploy with its own L2 directory: LMCache (and after it vLLM) is recreated, its counters start at 0."""
    runner = run_playbook("deploy.yml", session_tmp, extravars={"aic_lmcache_nvme_dir": str(l2_root)})
    assert runner.status == "successful", failures(runner)
    assert lmcache_metric("lmcache_mp_l2_store_submitted_objects_chunks_total") == 0


def overflow_l1(base, count=24, wait_for_l2=True):
    before = lmcache_metric("lmcache_mp_l2_store_completed_requests_total")
    for i in range(count):
        send(prompt(base + i))
        time.sleep(0.5)
    if not wait_for_l2:
        return
    deadline = time.monotonic() + 60
    while lmcache_metric("lmcache_mp_l2_store_completed_requests_total") - before < 16:
        assert time.monotonic() < deadline, "LMCache finished fewer than 16 L2 store requests within 60 s"
        time.sleep(1)


def failed_message(runner):
    assert runner.status == "failed", "the L2-zero check passed on a broken stack"
    return failures(runner)[0]


def test_unwritable_l2_dir_fails_the_check_naming_the_directory(session_tmp, tmp_path):
    l2_root = tmp_path / "nvme"
    fresh_stack(session_tmp, l2_root)
    slots = l2_root / "lmcache"
    assert list(slots.glob("*.bin")), "LMCache created no slot files"
    subprocess.run(["chattr", "-R", "+i", str(slots)], check=True)
    try:
        overflow_l1(time.time_ns())
        message = failed_message(lmcache_health_l2(tmp_path))
    finally:
        subprocess.run(["chattr", "-R", "-i", str(slots)], check=True)
    assert "L2 writes fail" in message
    assert "0 stored" in message
    assert "L2 directory is not writable" in message


def start_vllm_without_shared_ipc():
    """Recreate aic-vllm with its own IPC namespace (and enough /dev/shm to start), everything else unchanged."""
    client = docker.from_env()
    old = client.containers.get("aic-vllm")
    config = old.attrs["Config"]
    old.remove(force=True)
    client.containers.run(
        config["Image"],
        command=config["Cmd"],
        environment=config["Env"],
        name="aic-vllm",
        labels=config["Labels"],
        network="aic",
        ports={"8000/tcp": ("127.0.0.1", 8000)},
        ipc_mode="private",
        shm_size="1g",
        detach=True,
    )
    wait_healthy(f"{VLLM}/health")


def test_unshared_ipc_fails_the_check_naming_the_ipc_namespace(session_tmp, tmp_path):
    fresh_stack(session_tmp, tmp_path / "nvme")
    start_vllm_without_shared_ipc()
    base = time.time_ns()
    # vLLM's KV reaches LMCache but is never usable: L1 fills up and never drains into L2.
    overflow_l1(base, wait_for_l2=False)
    send(prompt(base + 23))  # the newest prompt: with shared IPC this is an L1 hit
    assert lmcache_metric("lmcache_mp_lookup_requested_tokens_total") > 0
    assert lmcache_metric("lmcache_mp_lookup_hit_tokens_total") == 0
    message = failed_message(lmcache_health_l2(tmp_path))
    assert "nothing reached L2" in message
    assert "every LMCache lookup missed" in message
    assert "does not share LMCache's IPC namespace" in message


def test_the_plan_refuses_a_vllm_outside_lmcache_ipc(session_tmp):
    runner = run_playbook("playbooks/preflight.yml", session_tmp, extravars={"aic_vllm_ipc_mode": "shareable"})
    assert runner.status == "failed"
    assert any("aic_vllm_ipc_mode: 'shareable' does not share IPC with LMCache" in f for f in failures(runner))
    # Nothing was touched: the stack of the previous test still serves.
    assert requests.get(f"{VLLM}/health", timeout=10).status_code == 200
