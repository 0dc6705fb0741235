"""The L2-zero health check fails, naming the cause, on the two silent failures the plan cannot rule out by itself.

- An L2 directory LMCache cannot write (made immutable with ``chattr +i``, so root in the container cannot write
  it either): NIXL's POSIX writes fail, LMCache logs a warning and keeps serving, nothing reaches L2.
- vLLM and LMCache in different IPC namespaces (the plan rejects that, so the test starts vLLM out of band, as a
  hand-written compose file would): vLLM's KV reaches LMCache, but no lookup ever matches.

The module starts with one deploy over the default stack that moves LMCache to its own L2 directory: an LMCache
setting only (vLLM's container has no L2 mount), so it also shows what an LMCache change does to a running stack:
LMCache is recreated and vLLM restarted after it. Each case starts from LMCache counters at 0 (that deploy, then a
restart of LMCache).
"""

from __future__ import annotations

import subprocess
import time

import docker
import pytest
import requests

from .conftest import changed_tasks, failures, run_playbook, stack_answers
from .test_l2_tier import lmcache_health_l2, lmcache_metric, prompt, send
from .test_local_stack import LMCACHE, MODEL, VLLM, wait_healthy

pytestmark = pytest.mark.integration


def state(name):
    return docker.from_env().containers.get(name).attrs


@pytest.fixture(scope="module")
def own_l2(local_stack, session_tmp, tmp_path_factory):
    """A running stack (the one test_l2_full left, which runs just before: the default but for the L2 directory; the
    default stack when none answers), then a deploy that gives LMCache its own (new) L2 directory; (runner, l2 root,
    the containers' attributes before)."""
    if not stack_answers():
        local_stack.ensure()
    before = {name: state(name) for name in ("aic-lmcache", "aic-vllm")}
    l2_root = tmp_path_factory.mktemp("l2-zero") / "nvme"
    runner = run_playbook("deploy.yml", session_tmp, extravars={"aic_lmcache_nvme_dir": str(l2_root)})
    assert runner.status == "successful", failures(runner)
    return runner, l2_root, before


def test_an_lmcache_setting_recreates_lmcache_then_restarts_vllm_with_its_spec_unchanged(own_l2):
    runner, _dummy, before = own_l2
    changed = {task for _dummy, task in changed_tasks(runner)}
    assert "Run the LMCache server" in changed, changed
    assert "Run vLLM with the LMCache multi-process connector" in changed, changed
    lmcache, vllm = state("aic-lmcache"), state("aic-vllm")
    assert lmcache["State"]["StartedAt"] != before["aic-lmcache"]["State"]["StartedAt"]
    assert vllm["State"]["StartedAt"] != before["aic-vllm"]["State"]["StartedAt"]
    # vLLM came up after the LMCache it attaches to (a vLLM left under a recreated LMCache hangs); what it runs is
    # the same: it was restarted for LMCache's sake, not reconfigured.
    assert vllm["State"]["StartedAt"] > lmcache["State"]["StartedAt"]
    for key in ("Image", "Cmd", "Env"):
        assert vllm["Config"][key] == before["aic-vllm"]["Config"][key], key
    response = requests.post(
        f"{VLLM}/v1/completions",
        json={"model": MODEL, "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    # Its counters are the new LMCache's own.
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


def test_unwritable_l2_dir_fails_the_check_naming_the_directory(own_l2, tmp_path):
    _dummy, l2_root, _dummy = own_l2
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
    # Its bind mounts too: the command runs vLLM under its guard, mounted from the node.
    mounts = [
        docker.types.Mount(m["Target"], m["Source"], type=m["Type"], read_only=m.get("ReadOnly", False))
        for m in old.attrs["HostConfig"].get("Mounts") or []
    ]
    old.remove(force=True)
    client.containers.run(
        config["Image"],
        command=config["Cmd"],
        environment=config["Env"],
        name="aic-vllm",
        labels=config["Labels"],
        mounts=mounts,
        network="aic",
        ports={"8000/tcp": ("127.0.0.1", 8000)},
        ipc_mode="private",
        shm_size="1g",
        detach=True,
    )
    wait_healthy(f"{VLLM}/health")


def test_unshared_ipc_fails_the_check_naming_the_ipc_namespace(own_l2, tmp_path):
    # LMCache's counters back to 0: restart it (the vLLM attached to it is replaced next).
    docker.from_env().containers.get("aic-lmcache").restart(timeout=30)
    wait_healthy(f"{LMCACHE}/healthcheck")
    assert lmcache_metric("lmcache_mp_l2_store_submitted_objects_chunks_total") == 0
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
