"""A full L2 file system on the real local stack: the L2 directory on a small file system of its own (tmpfs), filled
by a file. LMCache keeps serving (completions succeed, nothing restarts), its failed L2 stores are counted in
Prometheus (aic:lmcache:l2_store_failed_chunks:rate5m) and the slab-disk alert's condition holds; freeing the space
brings L2 stores back.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import time

import docker
import pytest
import requests

from .conftest import failures, run_playbook
from .test_faults import wait_for
from .test_l2_tier import lmcache_metric, prompt, send

pytestmark = pytest.mark.integration

PROMETHEUS = "http://127.0.0.1:9090"
MOUNT = pathlib.Path("/var/lib/aic-test-l2-full")
SIZE_MB = 48  # the NIXL pool (256 slots of 128 KiB = 32 MiB) fits, when it is not filled by something else
SUBMITTED = "lmcache_mp_l2_store_submitted_objects_chunks_total"
COMPLETED = "lmcache_mp_l2_store_completed_objects_chunks_total"


def restarts(name):
    return docker.from_env().api.inspect_container(name)["RestartCount"]


def query(expr):
    response = requests.get(f"{PROMETHEUS}/api/v1/query", params={"query": expr}, timeout=10)
    return response.json()["data"]["result"]


@pytest.fixture(scope="module")
def small_l2(tmp_path_factory):
    """The local stack with its L2 (aic_lmcache_nvme_dir) on a 48 MiB tmpfs, mounted before the stack's services
    (node-exporter sees the file systems mounted before it started, as with a real slab disk). Whatever the stack was
    before, this deploy makes it the default but for that directory; the next module's deploy undoes it."""
    MOUNT.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "aic-test-l2", str(MOUNT)], check=True)
    try:
        docker.from_env().containers.get("aic-node-exporter").restart(timeout=10)
        runner = run_playbook(
            "deploy.yml", tmp_path_factory.mktemp("l2-full"), extravars={"aic_lmcache_nvme_dir": str(MOUNT)}
        )
        assert runner.status == "successful", failures(runner)
        yield MOUNT
    finally:
        # LMCache keeps its slot files open: detach the file system now, it goes when the container does.
        subprocess.run(["umount", "-l", str(MOUNT)], check=False)
        docker.from_env().containers.get("aic-node-exporter").restart(timeout=10)


def fill(path):
    """A file that takes all but 64 KiB of the file system (less than one 128 KiB slot)."""
    stat = os.statvfs(path)
    free = stat.f_bavail * stat.f_frsize
    filler = path / "filler.bin"
    with open(filler, "wb") as out:
        chunk = b"\0" * (1 << 20)
        left = free - (64 << 10)
        while left > 0:
            out.write(chunk[: min(len(chunk), left)])
            left -= len(chunk)
    return filler


def test_a_full_l2_file_system_keeps_lmcache_serving_and_is_counted_and_alerted(small_l2):
    lmcache_restarts, vllm_restarts = restarts("aic-lmcache"), restarts("aic-vllm")
    seed = int(time.time())
    for i in range(4):  # L2 works on this file system
        send(prompt(seed + i))
    wait_for(lambda: lmcache_metric(COMPLETED) >= 4, 30, "L2 stores completed before the disk is full")

    filler = fill(small_l2)
    submitted, completed = lmcache_metric(SUBMITTED), lmcache_metric(COMPLETED)
    for i in range(12):  # distinct chunks: each one is sent to L2
        send(prompt(seed + 100 + i))  # asserts 200: LMCache keeps serving
    wait_for(lambda: lmcache_metric(SUBMITTED) - submitted >= 12, 30, "L2 stores submitted while full")
    failed = (lmcache_metric(SUBMITTED) - submitted) - (lmcache_metric(COMPLETED) - completed)
    assert failed >= 10, (submitted, completed, lmcache_metric(SUBMITTED), lmcache_metric(COMPLETED))

    # Prometheus: the failures are recorded, and the slab-disk alert's condition holds (it fires after its 5 minutes).
    wait_for(lambda: query("aic:lmcache:l2_store_failed_chunks:rate5m > 0"), 120, "failed L2 stores recorded")

    def slab_alert():
        alerts = requests.get(f"{PROMETHEUS}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        return [a["state"] for a in alerts if a["labels"].get("alertname") == "AicSlabDiskNearlyFull"]

    assert wait_for(slab_alert, 90, "AicSlabDiskNearlyFull pending")[0] in ("pending", "firing")
    # Nothing crashed.
    assert (restarts("aic-lmcache"), restarts("aic-vllm")) == (lmcache_restarts, vllm_restarts)

    # Space freed: L2 stores complete again.
    filler.unlink()
    completed = lmcache_metric(COMPLETED)
    for i in range(4):
        send(prompt(seed + 200 + i))
    wait_for(lambda: lmcache_metric(COMPLETED) - completed >= 4, 30, "L2 stores completed after freeing space")
