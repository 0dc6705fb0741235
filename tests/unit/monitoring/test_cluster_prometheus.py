"""The job's one Prometheus, for real: Debian's prometheus binary scrapes two fake "nodes" with the config the
filters generate, and aic.stack.prometheus_targets proves every target of every node is up with its node label.

The nodes are real HTTP servers on two loopback addresses (127.0.0.2 = n1, 127.0.0.3 = n2), each serving the same
published ports, as two hosts would: vLLM-like /metrics per GPU instance (n1: GPU 3; n2: GPUs 5 and 6), LMCache-like
and NIXL-like /metrics, and a node-exporter-like one on n1 only (n2's engine "refused --pid=host": its fact lists no
exporter). Prometheus runs on 127.0.0.1 as the monitoring host "mon", which is not a node, so every node is scraped
at <advertise address>:<published port> (aic.stack.cluster_scrape_jobs).
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from ansible_collections.aic.stack.plugins.filter.stack import prometheus_config
from ansible_collections.aic.stack.plugins.module_utils.cluster_monitoring import (
    cluster_expected_targets,
    cluster_scrape_jobs,
)
from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan
from ansible_collections.aic.stack.plugins.modules import prometheus_targets

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "modules" / "fixtures"
PROMETHEUS_BIN = os.environ.get("PROMETHEUS_BIN", "/usr/bin/prometheus")
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
NODES = {"n1": "127.0.0.2", "n2": "127.0.0.3"}
GPUS = {"n1": "3", "n2": "5,6"}
RUNNING = {"n1": ["node_exporter"], "n2": []}

pytestmark = pytest.mark.skipif(
    not (os.path.isfile(PROMETHEUS_BIN) and os.access(PROMETHEUS_BIN, os.X_OK)),
    reason=f"the Prometheus binary {PROMETHEUS_BIN} is missing (apt-get install prometheus)",
)


class MetricsServer:
    """A /metrics endpoint on (address, port), like one published container port of a node."""

    def __init__(self, address, port, body):
        self.scrapes = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                outer.scrapes += 1
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", PROMETHEUS_TEXT)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format, *args):
                pass

        self.httpd = ThreadingHTTPServer((address, port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self):
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join(timeout=5)
            self.httpd = None


def free_port_on_all(addresses, count=1):
    """A port P such that P .. P+count-1 are free on every address (every node publishes the same ports)."""
    for _dummy in range(200):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            port = probe.getsockname()[1]
        if port + count > 65535:
            continue
        socks = []
        try:
            for address in addresses:
                for p in range(port, port + count):
                    sock = socket.socket()
                    socks.append(sock)
                    sock.bind((address, p))
            return port
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no common free port")


@pytest.fixture(scope="module")
def ports():
    addresses = list(NODES.values())
    out = {"vllm": free_port_on_all(addresses, count=2)}
    taken = {out["vllm"], out["vllm"] + 1}
    for name in ("lmcache_http", "nixl", "node_exporter"):
        port = free_port_on_all(addresses)
        while port in taken:
            port = free_port_on_all(addresses)
        out[name] = port
        taken.add(port)
    return out


@pytest.fixture(scope="module")
def hostvars(ports):
    out = {"mon": {"aic_plan": build_plan({"aic_stack_name": "aic"})[0]}}
    for name, address in NODES.items():
        plan, _dummy = build_plan(
            {
                "aic_flavour": "rocm",
                "aic_vllm_model": "org/m",
                "aic_gpus": GPUS[name],
                "aic_lmcache_l2_backend": "nixl_posix",
                # Published on this node's own address only; reached there (the advertise address is the bind one).
                "aic_bind_address": address,
                "aic_vllm_port": ports["vllm"],
                "aic_lmcache_http_port": ports["lmcache_http"],
                "aic_nixl_telemetry_port": ports["nixl"],
                "aic_node_exporter_port": ports["node_exporter"],
            }
        )
        out[name] = {"aic_plan": plan, "monitoring_exporters_running": RUNNING[name]}
    return out


@pytest.fixture(scope="module")
def nodes(ports):
    """The fake nodes' published ports: {(node, job, port): MetricsServer}."""
    vllm = (FIXTURES / "vllm_metrics.txt").read_text()
    lmcache = (FIXTURES / "lmcache_metrics.txt").read_text()
    nixl = "# TYPE agent_rx_bytes_total counter\nagent_rx_bytes_total 0\n"
    node_exporter = '# TYPE node_cpu_seconds_total counter\nnode_cpu_seconds_total{cpu="0",mode="idle"} 1\n'
    servers = {}
    try:
        for name, address in NODES.items():
            for i in range(len(GPUS[name].split(","))):
                servers[(name, "vllm", ports["vllm"] + i)] = MetricsServer(address, ports["vllm"] + i, vllm)
            servers[(name, "lmcache", ports["lmcache_http"])] = MetricsServer(address, ports["lmcache_http"], lmcache)
            servers[(name, "nixl", ports["nixl"])] = MetricsServer(address, ports["nixl"], nixl)
        servers[("n1", "node_exporter", ports["node_exporter"])] = MetricsServer(
            NODES["n1"], ports["node_exporter"], node_exporter
        )
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, hostvars, nodes):
    """Prometheus with the generated config: every target of n1 and n2, plus itself on "mon"."""
    tmp = tmp_path_factory.mktemp("cluster-prometheus")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    jobs = cluster_scrape_jobs(hostvars, ["n1", "n2"], "mon")
    # In production Prometheus listens on 9090 inside its container; here it listens on a free port, so its own
    # target (the only one that is not a node's) is pointed there.
    for job in jobs:
        if job["job"] == "prometheus":
            job["groups"][0]["targets"] = [f"127.0.0.1:{port}"]
    config = prometheus_config(jobs, "1s", scrape_timeout="1s", labels={"stack": "aic"})
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            PROMETHEUS_BIN,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("prometheus not ready in 30s")
            time.sleep(0.1)
        yield {"url": url, "config": config}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def expected(hostvars):
    # Every required target of both nodes and Prometheus itself, plus the (optional) NIXL telemetry of each node.
    return cluster_expected_targets(hostvars, ["n1", "n2"], "mon") + [
        {"job": "nixl", "node": "n1"},
        {"job": "nixl", "node": "n2"},
    ]


def test_the_generated_config_scrapes_each_node_at_its_address(prometheus, ports):
    static = {
        (job["job_name"], s["labels"]["node"], s["labels"].get("gpu")): s["targets"]
        for job in prometheus["config"]["scrape_configs"]
        for s in job["static_configs"]
    }
    assert static[("vllm", "n1", "3")] == [f"127.0.0.2:{ports['vllm']}"]
    assert static[("vllm", "n2", "6")] == [f"127.0.0.3:{ports['vllm'] + 1}"]
    assert static[("lmcache", "n2", None)] == [f"127.0.0.3:{ports['lmcache_http']}"]
    assert ("node_exporter", "n2", None) not in static  # skipped on n2


def test_every_target_of_every_node_is_up_with_its_node_label(prometheus, hostvars, nodes, run_module):
    want = expected(hostvars)
    assert len(want) == 9  # prometheus + n1 (vllm gpu 3, lmcache, node_exporter) + n2 (vllm 5, 6, lmcache) + 2 nixl
    result = run_module(prometheus_targets, {"url": prometheus["url"], "expected_targets": want, "wait_timeout": 30})
    assert result.rc == 0, result.get("msg")
    assert result["down_targets"] == [] and result["down_nodes"] == []
    # Prometheus really scraped every fake port.
    assert all(server.scrapes for server in nodes.values())
    targets = get_json(prometheus["url"] + "/api/v1/targets?state=active")["data"]["activeTargets"]
    labels = sorted(
        (t["labels"]["job"], t["labels"]["node"], t["labels"].get("gpu", ""), t["labels"]["instance"], t["health"])
        for t in targets
    )
    assert [entry for entry in labels if entry[0] == "vllm"] == [
        ("vllm", "n1", "3", f"127.0.0.2:{nodes_port(nodes, 'n1', 'vllm')}", "up"),
        ("vllm", "n2", "5", f"127.0.0.3:{nodes_port(nodes, 'n2', 'vllm')}", "up"),
        ("vllm", "n2", "6", f"127.0.0.3:{nodes_port(nodes, 'n2', 'vllm') + 1}", "up"),
    ]
    assert {entry[1] for entry in labels} == {"mon", "n1", "n2"}
    # The labels reach the samples: vLLM series per node and GPU.
    query = urllib.parse.urlencode({"query": "count by (node, gpu) (vllm:num_requests_running)"})
    series = get_json(f"{prometheus['url']}/api/v1/query?{query}")["data"]["result"]
    assert sorted((s["metric"]["node"], s["metric"]["gpu"]) for s in series) == [("n1", "3"), ("n2", "5"), ("n2", "6")]


def nodes_port(nodes, node, job):
    return min(port for (name, kind, port) in nodes if name == node and kind == job)


def test_a_node_whose_lmcache_stops_is_named(prometheus, hostvars, nodes, ports, run_module):
    nodes[("n2", "lmcache", ports["lmcache_http"])].stop()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # the next scrape (1 s) fails
        targets = get_json(prometheus["url"] + "/api/v1/targets?state=active")["data"]["activeTargets"]
        if any(
            t["labels"]["job"] == "lmcache" and t["labels"]["node"] == "n2" and t["health"] == "down" for t in targets
        ):
            break
        time.sleep(0.2)
    result = run_module(
        prometheus_targets, {"url": prometheus["url"], "expected_targets": expected(hostvars), "wait_timeout": 2}
    )
    assert result.failed
    assert result["down_targets"] == [{"job": "lmcache", "node": "n2"}]
    assert result["down_nodes"] == ["n2"]
    assert (
        f"node 'n2' job 'lmcache' is down (http://127.0.0.3:{ports['lmcache_http']}/metrics health=down"
        in (result["msg"])
    )
    assert "(nodes with a target not up: n2)" in result["msg"]
