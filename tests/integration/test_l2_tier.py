"""The local stack's L2 tier for real: NIXL POSIX slot files behind a tiny DRAM L1 (the SPUR backend on CPU).

Distinct prompts overflow the 2 MiB L1 into L2; after restarting only vLLM, the first prompt's KV comes back
through L2 (lookup_hit_l2_tokens_total) as external prefix-cache hits in vLLM, and the L2-reads health check passes.
"""

from __future__ import annotations

import os
import pathlib
import random
import sys
import time

import ansible_runner
import docker
import pytest
import requests

from .conftest import LOCAL_INVENTORY, REPO, failures
from .test_local_stack import LMCACHE, MODEL, VLLM, metric, wait_healthy

pytestmark = pytest.mark.integration

WORDS = ["alpha", "bravo", "zulu", "kilo", "x9", "q7", "fox", "dog", "KV", "cache"]


def prompt(seed):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _dummy in range(64))  # ~190 tokens: one full 128-token chunk


def send(text):
    response = requests.post(
        f"{VLLM}/v1/completions", json={"model": MODEL, "prompt": text, "max_tokens": 1, "temperature": 0}, timeout=60
    )
    assert response.status_code == 200, response.text


def lmcache_metric(name):
    return metric(requests.get(f"{LMCACHE}/metrics", timeout=10).text, name)


@pytest.fixture(scope="module")
def deployed(default_stack):
    # The session's default stack (conftest.py): deployed again only if an earlier module changed it.
    return default_stack


def lmcache_health_l2(tmp_path):
    (tmp_path / "adhoc").mkdir()
    return ansible_runner.run(
        private_data_dir=str(tmp_path / "adhoc"),
        host_pattern="localhost",
        inventory=str(LOCAL_INVENTORY),
        module="aic.stack.lmcache_health",
        module_args=f"url={LMCACHE} l2_reads=required wait_timeout=30",
        envvars={
            "PATH": os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        },
        quiet=True,
    )


def test_l1_overflow_then_vllm_restart_reads_kv_back_from_l2(deployed, tmp_path):
    base = time.time_ns()  # fresh prompts every run: nothing of them is cached yet
    stored_before = lmcache_metric("lmcache_mp_l2_store_completed_objects_chunks_total")
    for i in range(24):  # 24 chunks of 128 KiB > the 16 that fit in L1
        send(prompt(base + i))
        # A 2 MiB L1 cannot absorb a burst: LMCache's eviction loop needs a moment, or the store is dropped
        # (lmcache_mp_l1_allocation_failure_chunks_total).
        time.sleep(0.5)
    deadline = time.monotonic() + 60
    while lmcache_metric("lmcache_mp_l2_store_completed_objects_chunks_total") - stored_before < 16:
        assert time.monotonic() < deadline, "LMCache did not write the overflow to L2 within 60 s"
        time.sleep(1)

    hits_before = lmcache_metric("lmcache_mp_lookup_hit_l2_tokens_total")
    docker.from_env().containers.get("aic-vllm").restart(timeout=30)
    wait_healthy(f"{VLLM}/health")
    ext_before = metric(requests.get(f"{VLLM}/metrics", timeout=10).text, "vllm:external_prefix_cache_hits_total")
    send(prompt(base))  # the first prompt: long evicted from L1
    assert lmcache_metric("lmcache_mp_lookup_hit_l2_tokens_total") - hits_before > 0
    ext_after = metric(requests.get(f"{VLLM}/metrics", timeout=10).text, "vllm:external_prefix_cache_hits_total")
    assert ext_after - ext_before > 0

    # The L2-zero health check passes on this stack: stores grew and reads came back.
    runner = lmcache_health_l2(tmp_path)
    assert runner.status == "successful", failures(runner)
    ok = [e for e in runner.events if e.get("event") == "runner_on_ok"][0]["event_data"]["res"]
    assert ok["l2"]["reads_ok"] is True
    assert ok["l2"]["stored_chunks"] >= 16


def test_slot_files_live_in_the_l2_dir(deployed):
    slots = list((REPO / ".work" / "slab" / "nvme" / "lmcache").glob("*.bin"))
    assert slots, "no NIXL POSIX slot files in the L2 directory"
    assert all(p.stat().st_size <= 131072 for p in slots)
