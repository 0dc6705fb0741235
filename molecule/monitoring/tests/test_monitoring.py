"""The monitoring role: node-exporter runs with the host's PID namespace (this engine allows it) and Prometheus
scrapes it and its own stack's services; every target of node-exporter is up."""

from __future__ import annotations

import json
import time
import urllib.request

import docker

PROMETHEUS = "http://127.0.0.1:19398"


def targets():
    with urllib.request.urlopen(PROMETHEUS + "/api/v1/targets", timeout=10) as response:  # noqa: S310
        return json.load(response)["data"]["activeTargets"]


def test_prometheus_scrapes_node_exporter_and_it_is_up():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        health = {t["labels"]["job"]: t["health"] for t in targets()}
        if health.get("node_exporter") == "up":
            break
        time.sleep(2)
    assert health.get("node_exporter") == "up", health
    assert health.get("prometheus") == "up", health
    assert {"vllm", "lmcache"} <= set(health), health  # the plan's services (not deployed here: down)


def test_node_exporter_runs_in_the_host_pid_namespace():
    attrs = docker.from_env().containers.get("aicmolmon-node-exporter").attrs
    assert attrs["HostConfig"]["PidMode"] == "host"
