"""Monitoring that survives the cluster: the monitoring play against a Docker engine whose authorization plugin
refuses ``--pid=host`` (what SPUR does), and against a normal one.

A SECOND dockerd (own data-root, exec-root, pidfile, socket and pre-created bridge; never ``--bridge=none``)
runs with a real authorization plugin (tests/integration/authz/pidhost_authz.py) that denies creating
containers with ``HostConfig.PidMode == "host"``. The play is pointed at it with ``aic_docker_host``. The images
it needs are built on the main engine by the first run and copied with ``docker save | docker load``.

The stack name (``aicmon``) and host ports (19291/19292 on the main engine, 19391/19392 on the blocked one)
never collide with the main stack (aic-*, 8000/8080/9090); only containers this test creates are removed.
A second run on the normal engine changes nothing: molecule/monitoring's idempotence step runs that (the same
roles, the same engine); here the second runs are the blocked engine's and prometheus_only's.
Needs root, dockerd and the base image of the last build (.work/artifacts/aic-stack-cpu.current.json, or AIC_BASE_IMAGE).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
import yaml

from .conftest import REPO, changed_tasks, failures, run_module, run_playbook

PLAYBOOK = "playbooks/monitoring.yml"
STACK = "aicmon"
PLUGIN = REPO / "tests" / "integration" / "authz" / "pidhost_authz.py"
DENIED = "authorization denied by plugin"
NORMAL_PORTS = {"aic_prometheus_port": 19291, "aic_node_exporter_port": 19292}
BLOCKED_PORTS = {"aic_prometheus_port": 19391, "aic_node_exporter_port": 19392}
CONTAINERS = [f"{STACK}-prometheus", f"{STACK}-node-exporter", f"{STACK}-amd-metrics-exporter"]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("docker"),
    reason="needs root, dockerd and the docker CLI",
)


def docker(*args, host=None, check=True, **kwargs):
    cmd = ["docker"] + (["-H", host] if host else []) + list(args)
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kwargs)


def base_image():
    ref = os.environ.get("AIC_BASE_IMAGE")
    # The release record of the last build (its manifest pointer) names the base image it was built on.
    record = REPO / ".work" / "artifacts" / "aic-stack-cpu.current.json"
    if not ref and record.exists():
        ref = json.loads(record.read_text()).get("base_image")
    if not ref or docker("image", "inspect", ref, check=False).returncode != 0:
        pytest.skip(f"base image {ref or '(no build record)'} is not on the main engine: build the stack first")
    return ref


def cleanup(host=None):
    """Remove what this test created on an engine (by name: only aicmon-* objects)."""
    docker("rm", "-f", *CONTAINERS, host=host, check=False)
    probes = docker("ps", "-aq", "--filter", "label=ai.aic.probe", "--filter", f"name={STACK}-", host=host, check=False)
    for cid in probes.stdout.split():
        docker("rm", "-f", cid, host=host, check=False)
    docker("network", "rm", STACK, host=host, check=False)
    docker("volume", "rm", f"{STACK}-prometheus-data", host=host, check=False)


class BlockedEngine:
    """A second dockerd on its own bridge with the pid-host-denying authorization plugin."""

    def __init__(self):
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="aicmz-", dir="/tmp"))  # short: unix socket paths
        suffix = str(os.getpid() % 100000)
        self.name = f"aicmon-authz-{suffix}"
        self.bridge = f"aicmz{suffix}"
        self.plugin_socket = f"/run/docker/plugins/{self.name}.sock"
        self.socket = self.root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.denials = self.root / "denied.log"
        self.plugin = self.dockerd = None

    def start(self):
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", "10.210.77.1/24", "dev", self.bridge], check=True)
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True)
        with open(self.root / "plugin.log", "w") as log:  # the child keeps its own copy of the fd
            self.plugin = subprocess.Popen(
                [sys.executable, str(PLUGIN), "--socket", self.plugin_socket, "--log", str(self.denials)],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self._wait(lambda: os.path.exists(self.plugin_socket), "the authz plugin socket")
        with open(self.root / "dockerd.log", "w") as log:
            self.dockerd = subprocess.Popen(
                [
                    "dockerd",
                    f"--data-root={self.root / 'data'}",
                    f"--exec-root={self.root / 'exec'}",
                    f"--pidfile={self.root / 'docker.pid'}",
                    f"--host={self.host}",
                    f"--bridge={self.bridge}",
                    "--iptables=false",
                    "--ip-masq=false",
                    f"--cgroup-parent=/{self.name}",
                    f"--authorization-plugin={self.name}",
                    "--default-address-pool=base=10.211.0.0/16,size=24",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self._wait(lambda: docker("version", host=self.host, check=False).returncode == 0, "the second dockerd")
        return self

    def _wait(self, ready, what, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if self.dockerd is not None and self.dockerd.poll() is not None:
                break
            time.sleep(0.5)
        log = (self.root / "dockerd.log").read_text()[-3000:] if (self.root / "dockerd.log").exists() else ""
        raise RuntimeError(f"{what} did not come up in {timeout}s\n{log}")

    def load(self, *images):
        save = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE)
        load = subprocess.run(
            ["docker", "-H", self.host, "load"], stdin=save.stdout, capture_output=True, text=True, check=False
        )
        save.stdout.close()
        assert save.wait() == 0 and load.returncode == 0, load.stderr

    def stop(self):
        if self.dockerd is not None and self.dockerd.poll() is None:
            cleanup(self.host)
            self.dockerd.send_signal(signal.SIGTERM)
            try:
                self.dockerd.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.dockerd.kill()
                self.dockerd.wait()
        if self.plugin is not None and self.plugin.poll() is None:
            self.plugin.terminate()
            self.plugin.wait(timeout=10)
        subprocess.run(["ip", "link", "delete", self.bridge], check=False, capture_output=True)
        if os.path.exists(self.plugin_socket):
            os.unlink(self.plugin_socket)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def base_ref():
    return base_image()


@pytest.fixture(scope="module")
def main_engine_clean():
    cleanup()
    yield
    cleanup()


@pytest.fixture(scope="module")
def blocked():
    engine = BlockedEngine()
    try:
        yield engine.start()
    finally:
        engine.stop()


class Deployment:
    """One monitoring deployment (work dir, ports, engine) that the tests run the play against, several times."""

    def __init__(self, factory, base_ref, name, ports, docker_host=""):
        self.factory = factory
        self.work_dir = factory.mktemp(f"{name}-work")
        self.ports = ports
        self.docker_host = docker_host
        self.base_ref = base_ref

    def run(self, mode="auto"):
        extravars = {
            "aic_stack_name": STACK,
            "aic_work_dir": str(self.work_dir),
            "aic_monitoring_mode": mode,
            "aic_docker_host": self.docker_host,
            "aic_prometheus_scrape_interval": "2s",
            "release_base_ref": self.base_ref,
            **self.ports,
        }
        return run_playbook(PLAYBOOK, self.factory.mktemp("run"), extravars=extravars)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.ports['aic_prometheus_port']}"

    def scrape_jobs(self):
        config = yaml.safe_load((self.work_dir / "prometheus" / "prometheus.yml").read_text())
        return [job["job_name"] for job in config["scrape_configs"]]

    def targets(self, expected_jobs, tmp):
        """aic.stack.prometheus_targets against this deployment's Prometheus."""
        args = f"url={self.url} expected_jobs={','.join(expected_jobs)} wait_timeout=90"
        return run_module("aic.stack.prometheus_targets", args, tmp)


def container_state(name, host=None):
    result = docker("inspect", name, host=host, check=False)
    return json.loads(result.stdout)[0] if result.returncode == 0 else None


def debug_lines(runner, task):
    return [
        e["event_data"]["res"].get("msg", "")
        for e in runner.events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == task
    ]


@pytest.fixture(scope="module")
def normal(tmp_path_factory, base_ref, main_engine_clean):
    return Deployment(tmp_path_factory, base_ref, "normal", NORMAL_PORTS)


@pytest.fixture(scope="module")
def blocked_deployment(tmp_path_factory, base_ref, normal, blocked):
    # The images come from the main engine (the first run there built them): the blocked engine has no NAT.
    prometheus = container_state(f"{STACK}-prometheus")
    exporter = container_state(f"{STACK}-node-exporter")
    assert prometheus and exporter, "run test_normal_engine_runs_node_exporter_with_host_pid first"
    blocked.load(prometheus["Config"]["Image"], exporter["Config"]["Image"])
    return Deployment(tmp_path_factory, base_ref, "blocked", BLOCKED_PORTS, docker_host=blocked.host)


def test_normal_engine_runs_node_exporter_with_host_pid(normal, tmp_path):
    runner = normal.run("auto")
    assert runner.status == "successful", failures(runner)
    exporter = container_state(f"{STACK}-node-exporter")
    assert exporter and exporter["State"]["Running"]
    assert exporter["HostConfig"]["PidMode"] == "host"
    assert "node_exporter" in normal.scrape_jobs()
    check = normal.targets(["prometheus", "node_exporter"], tmp_path / "targets")
    assert check.status == "successful", failures(check)
    assert not debug_lines(runner, "Say which host-PID exporters this node skips (aic_monitoring_mode=auto)")
    # Prometheus loaded the generated rules (recording rules and the four alerts).
    with urllib.request.urlopen(f"{normal.url}/api/v1/rules", timeout=10) as resp:
        groups = json.load(resp)["data"]["groups"]
    alerts = {rule["name"] for group in groups for rule in group["rules"] if rule["type"] == "alerting"}
    assert {"AicTargetDown", "AicLmcacheL2ReadsStuckAtZero", "AicSlabDiskNearlyFull"} <= alerts


def test_blocked_engine_auto_runs_prometheus_without_node_exporter(blocked_deployment, blocked, tmp_path):
    runner = blocked_deployment.run("auto")
    assert runner.status == "successful", failures(runner)
    lines = debug_lines(runner, "Say which host-PID exporters this node skips (aic_monitoring_mode=auto)")
    assert len(lines) == 1, lines
    assert "localhost: skipping node_exporter" in lines[0]
    assert DENIED in lines[0]
    assert container_state(f"{STACK}-node-exporter", host=blocked.host) is None
    prometheus = container_state(f"{STACK}-prometheus", host=blocked.host)
    assert prometheus and prometheus["State"]["Running"]
    assert "node_exporter" not in blocked_deployment.scrape_jobs()
    check = blocked_deployment.targets(["prometheus"], tmp_path / "targets")
    assert check.status == "successful", failures(check)
    # The plugin really saw and denied the probe's create request; the probe left nothing behind.
    assert blocked.denials.exists() and "containers/create" in blocked.denials.read_text()
    assert docker("ps", "-aq", "--filter", "label=ai.aic.probe", host=blocked.host).stdout.strip() == ""


def test_blocked_engine_second_run_changes_nothing(blocked_deployment):
    runner = blocked_deployment.run("auto")
    assert runner.status == "successful", failures(runner)
    assert changed_tasks(runner) == []


def test_blocked_engine_full_fails_with_the_daemons_message_and_keeps_prometheus(blocked_deployment, blocked):
    runner = blocked_deployment.run("full")
    assert runner.status == "failed"
    messages = failures(runner)
    assert any(DENIED in m and "aic_monitoring_mode=full" in m for m in messages), messages
    prometheus = container_state(f"{STACK}-prometheus", host=blocked.host)
    assert prometheus and prometheus["State"]["Running"]
    assert container_state(f"{STACK}-node-exporter", host=blocked.host) is None


def test_prometheus_only_runs_no_exporter(normal, tmp_path):
    runner = normal.run("prometheus_only")
    assert runner.status == "successful", failures(runner)
    assert container_state(f"{STACK}-node-exporter") is None
    assert "node_exporter" not in normal.scrape_jobs()
    # No probe either: nothing asks for host PID.
    assert not [
        e
        for e in runner.events
        if e["event_data"].get("task_action") == "aic.stack.docker_capability" and e.get("event") == "runner_on_ok"
    ]
    check = normal.targets(["prometheus"], tmp_path / "targets")
    assert check.status == "successful", failures(check)
    again = normal.run("prometheus_only")
    assert changed_tasks(again) == []


def test_an_exporter_that_cannot_start_is_reported_not_scraped_and_prometheus_keeps_serving(normal, tmp_path):
    """node-exporter's port is taken on the host: its container cannot start. The exporter's rescue (one helper for
    every exporter) records and reports it, the scrape config leaves it out and Prometheus keeps serving; with
    aic_monitoring_mode=full the node then fails, naming it and the engine's reason."""
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(("0.0.0.0", 19293))
    taken.listen(1)
    busy = Deployment(normal.factory, normal.base_ref, "busy", {**NORMAL_PORTS, "aic_node_exporter_port": 19293})
    try:
        runner = busy.run("auto")
        assert runner.status == "successful", failures(runner)
        (line,) = debug_lines(runner, "Say that the exporter did not start")
        assert "node-exporter did not start" in line and "Prometheus keeps running without it" in line, line
        assert "node_exporter" not in busy.scrape_jobs()
        prometheus = container_state(f"{STACK}-prometheus")
        assert prometheus and prometheus["State"]["Running"]
        check = busy.targets(["prometheus"], tmp_path / "targets")
        assert check.status == "successful", failures(check)

        full = busy.run("full")
        assert full.status == "failed"
        messages = failures(full)
        assert any("aic_monitoring_mode=full, but node_exporter did not start" in m for m in messages), messages
        assert container_state(f"{STACK}-prometheus")["State"]["Running"]
    finally:
        taken.close()
