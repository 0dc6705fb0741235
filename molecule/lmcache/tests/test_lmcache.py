"""The lmcache role on its own: the LMCache server answers on the scenario's ports, with the plan's L1 in a shareable
IPC namespace (vLLM joins it), under an init process, restarting unless stopped, on the stack network."""

from __future__ import annotations

import os
import urllib.request

import docker
from prometheus_client.parser import text_string_to_metric_families

BASE = "http://127.0.0.1:18080"
CONTAINER = "aicmollmc-lmcache"


def get(path):
    with urllib.request.urlopen(BASE + path, timeout=10) as response:  # noqa: S310 - a fixed local URL
        return response.status, response.read().decode()


def container():
    return docker.from_env().containers.get(CONTAINER)


def test_it_answers_its_healthcheck_on_the_scenario_port():
    status, _body = get("/healthcheck")
    assert status == 200


def test_it_serves_lmcache_metrics():
    _status, text = get("/metrics")
    names = {family.name for family in text_string_to_metric_families(text)}
    assert any(name.startswith("lmcache") for name in names), sorted(names)[:20]


def test_the_container_is_what_vllm_needs_to_join_it():
    attrs = container().attrs
    host = attrs["HostConfig"]
    assert host["IpcMode"] == "shareable"
    assert host["Init"] is True
    assert host["ShmSize"] == 2 << 30  # aic_lmcache_shm_size_gb: the L1 lives in /dev/shm
    assert host["RestartPolicy"]["Name"] == "unless-stopped"
    assert "aicmollmc" in attrs["NetworkSettings"]["Networks"]
    assert attrs["Config"]["Labels"]["ai.aic.service"] == "lmcache"
    published = {port: bindings[0]["HostPort"] for port, bindings in host["PortBindings"].items()}
    # HTTP (health, metrics) and NIXL's telemetry; the ZMQ port is reached on the stack network only.
    assert published == {"18080/tcp": "18080", "19394/tcp": "19394"}, published


def test_the_nixl_posix_l2_directory_is_mounted_under_data():
    mounts = {m["Destination"]: m for m in container().attrs["Mounts"]}
    # The plan's NVMe directory under the work directory (made by l2_dirs in prepare), as the engine sees it.
    nvme = mounts["/data/nvme"]
    assert (nvme["Type"], nvme["RW"]) == ("bind", True), nvme
    assert nvme["Source"] == os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "aic", "slab", "nvme"), nvme
