"""The node_exporter role on its own: host metrics on the scenario's port, through the host's PID namespace and its
root filesystem under /host, on the stack network, labelled with the stack."""

from __future__ import annotations

import urllib.request

import docker

URL = "http://127.0.0.1:19391/metrics"
CONTAINER = "aicmolnodeexp-node-exporter"


def metrics():
    with urllib.request.urlopen(URL, timeout=10) as response:  # noqa: S310 - a fixed local URL
        return response.read().decode()


def container():
    return docker.from_env().containers.get(CONTAINER)


def test_it_serves_host_metrics_on_the_scenario_port():
    text = metrics()
    assert "node_exporter_build_info" in text
    # The host's root filesystem, seen through the read-only /host mount (--path.rootfs=/host).
    assert "node_filesystem_size_bytes{device=" in text and 'mountpoint="/"' in text


def test_it_runs_in_the_host_pid_namespace_and_sees_the_host_processes():
    attrs = container().attrs
    assert attrs["HostConfig"]["PidMode"] == "host"
    # More processes than a container of its own would have (this machine runs dockerd, the stack, molecule...).
    running = [line for line in metrics().splitlines() if line.startswith("node_processes_state")]
    procs = [line for line in metrics().splitlines() if line.startswith("node_procs_running")]
    assert running or procs


def test_it_is_on_the_stack_network_labelled_with_the_stack_and_restarts_unless_stopped():
    attrs = container().attrs
    assert "aicmolnodeexp" in attrs["NetworkSettings"]["Networks"]
    assert attrs["Config"]["Labels"]["ai.aic.stack"] == "aicmolnodeexp"
    assert attrs["Config"]["Labels"]["ai.aic.service"] == "node-exporter"
    assert attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert attrs["HostConfig"]["PortBindings"]["19391/tcp"] == [{"HostIp": "127.0.0.1", "HostPort": "19391"}]
