"""module_utils/router.py: the router's workers on the local stack and on three nodes, its vllm-router command, its
healthcheck and its container spec. Pure functions over per-host plans; hostvars are plain dicts here."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.aic.stack.plugins.module_utils.cluster_monitoring import cluster_scrape_jobs, router_target
from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan
from ansible_collections.aic.stack.plugins.module_utils.router import (
    ROUTER_BIN,
    ROUTER_HEALTHCHECK_PROBE,
    RouterError,
    job_router_host,
    router_command,
    router_healthcheck,
    router_spec,
    router_workers,
)

SPUR_LIKE = {"aic_flavour": "rocm", "aic_vllm_model": "org/m", "aic_bind_address": "0.0.0.0"}


def node(**inputs):
    return {"aic_plan": build_plan(inputs)[0]}


@pytest.fixture
def three_nodes():
    return {
        "n1": node(aic_gpus="0,1", aic_advertise_address="n1", **SPUR_LIKE),
        "n2": node(aic_gpus="4,5", aic_advertise_address="10.0.0.12", **SPUR_LIKE),
        "n3": node(aic_gpus="7", aic_advertise_address="n3.cluster", **SPUR_LIKE),
    }


# -- workers -------------------------------------------------------------------------------------------------------


def test_the_local_stack_routes_to_its_vllm_containers_by_name():
    hostvars = {"localhost": node(aic_vllm_instances=2)}
    host = job_router_host(hostvars, ["localhost"])
    assert host == "localhost"
    assert router_workers(hostvars, ["localhost"], host) == ["http://aic-vllm:8000", "http://aic-vllm-1:8001"]


def test_the_local_stack_with_its_own_names_and_ports():
    hostvars = {"localhost": node(aic_stack_name="lab", aic_vllm_port=18000)}
    assert router_workers(hostvars, ["localhost"], "localhost") == ["http://lab-vllm:18000"]


def test_three_nodes_own_node_by_name_the_others_by_advertised_address(three_nodes):
    host = job_router_host(three_nodes, ["n1", "n2", "n3"])
    assert host == "n1"
    assert router_workers(three_nodes, ["n1", "n2", "n3"], host) == [
        "http://aic-vllm:8000",
        "http://aic-vllm-1:8001",
        "http://10.0.0.12:8000",
        "http://10.0.0.12:8001",
        "http://n3.cluster:8000",
    ]


def test_three_nodes_with_the_router_on_another_node(three_nodes):
    for variables in three_nodes.values():
        variables["aic_plan"]["router"]["host"] = "n3"
    host = job_router_host(three_nodes, ["n1", "n2", "n3"])
    assert host == "n3"
    assert router_workers(three_nodes, ["n1", "n2", "n3"], host) == [
        "http://n1:8000",
        "http://n1:8001",
        "http://10.0.0.12:8000",
        "http://10.0.0.12:8001",
        "http://aic-vllm:8000",
    ]


def test_a_node_listed_twice_is_one_set_of_workers(three_nodes):
    assert router_workers(three_nodes, ["n1", "n3", "n1"], "n1") == [
        "http://aic-vllm:8000",
        "http://aic-vllm-1:8001",
        "http://n3.cluster:8000",
    ]


def test_ipv6_advertise_addresses_are_bracketed():
    hostvars = {"n1": node(), "n2": node(aic_bind_address="::", aic_advertise_address="2001:db8::2")}
    assert router_workers(hostvars, ["n1", "n2"], "n1") == ["http://aic-vllm:8000", "http://[2001:db8::2]:8000"]


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({}, "n2: aic_advertise_address is '127.0.0.1' (empty = aic_bind_address), which the router host n1 cannot"),
        ({"aic_bind_address": "0.0.0.0"}, "n2: aic_advertise_address is '0.0.0.0'"),
        (
            {"aic_advertise_address": "n2"},
            "n2: aic_bind_address 127.0.0.1 publishes the services on n2's loopback only, out of reach of the router "
            "host n1",
        ),
    ],
    ids=["default-loopback", "unspecified", "bind-loopback"],
)
def test_a_remote_node_out_of_reach_is_refused_naming_it(inputs, message):
    hostvars = {"n1": node(), "n2": node(**inputs)}
    with pytest.raises(RouterError) as excinfo:
        router_workers(hostvars, ["n1", "n2"], "n1")
    assert str(excinfo.value).startswith(message), excinfo.value


def test_the_router_hosts_own_loopback_stack_is_fine():
    # The router reaches its own node's containers on the stack network, whatever the bind address.
    assert router_workers({"n1": node()}, ["n1"], "n1") == ["http://aic-vllm:8000"]


def test_two_nodes_advertising_the_same_address_are_refused():
    hostvars = {
        "n1": node(),
        "n2": node(aic_bind_address="0.0.0.0", aic_advertise_address="10.0.0.9"),
        "n3": node(aic_bind_address="0.0.0.0", aic_advertise_address="10.0.0.9"),
    }
    with pytest.raises(RouterError, match=r"^n3: aic_advertise_address: .*http://10\.0\.0\.9:8000.*n2's"):
        router_workers(hostvars, ["n1", "n2", "n3"], "n1")


def test_a_node_without_a_plan_is_refused():
    with pytest.raises(RouterError, match="^n2: no aic_plan"):
        router_workers({"n1": node(), "n2": {}}, ["n1", "n2"], "n1")


def test_a_node_outside_the_inventory_is_refused():
    with pytest.raises(RouterError, match="'n9' is not a host of the inventory"):
        router_workers({"n1": node()}, ["n1", "n9"], "n1")


# -- command -------------------------------------------------------------------------------------------------------


def flags(argv):
    """{flag: [values]} of an argv (a flag's values run up to the next flag)."""
    out, current = {}, None
    for arg in argv[1:]:
        if arg.startswith("--"):
            current = arg
            out[current] = []
        else:
            out[current].append(arg)
    return out


def test_the_default_command():
    router = build_plan({})[0]["router"]
    argv = router_command(router, ["http://aic-vllm:8000"])
    assert argv == [
        "/opt/aic-router/bin/vllm-router",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--prometheus-host",
        "0.0.0.0",
        "--prometheus-port",
        "29000",
        "--policy",
        "cache_aware",
        "--worker-urls",
        "http://aic-vllm:8000",
        "--health-check-interval-secs",
        "5",
        "--health-check-timeout-secs",
        "3",
        "--health-failure-threshold",
        "3",
        "--health-success-threshold",
        "2",
        "--retry-max-retries",
        "3",
    ]
    assert argv[0] == ROUTER_BIN


def test_the_command_follows_the_plan(three_nodes):
    plan = build_plan(
        {
            "aic_router_port": 31000,
            "aic_router_metrics_port": 29100,
            "aic_router_policy": "consistent_hash",
            "aic_router_health_check_interval_s": 9,
            "aic_router_health_check_timeout_s": 7,
            "aic_router_health_failure_threshold": 4,
            "aic_router_health_success_threshold": 1,
            "aic_router_retry_max_retries": 1,
        }
    )[0]
    workers = router_workers(three_nodes, ["n1", "n2", "n3"], "n1")
    got = flags(router_command(plan["router"], workers))
    assert got == {
        "--host": ["0.0.0.0"],
        "--port": ["31000"],
        "--prometheus-host": ["0.0.0.0"],
        "--prometheus-port": ["29100"],
        "--policy": ["consistent_hash"],
        "--worker-urls": workers,
        "--health-check-interval-secs": ["9"],
        "--health-check-timeout-secs": ["7"],
        "--health-failure-threshold": ["4"],
        "--health-success-threshold": ["1"],
        "--retry-max-retries": ["1"],
    }
    assert len(workers) == 5


def test_a_router_without_workers_is_refused():
    with pytest.raises(RouterError, match="^aic_router_enabled: the router has no worker"):
        router_command(build_plan({})[0]["router"], [])


# -- healthcheck ---------------------------------------------------------------------------------------------------


def test_the_healthcheck_probes_readiness_on_the_router_port():
    check = router_healthcheck(31000)
    assert check["test"][:5] == ["CMD", "python3", "-S", "-c", ROUTER_HEALTHCHECK_PROBE]
    assert check["test"][5:] == ["http://127.0.0.1:31000/readiness", "3"]
    assert check["interval"] == "5s"
    assert check["timeout"] == "3s"
    assert check["retries"] == 3
    assert check["start_period"] == "600s"


class _Readiness(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802 - http.server's name
        code = 200 if self.path == "/readiness" and type(self).status == 200 else 503
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def readiness_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Readiness)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    _Readiness.status = 200


def run_probe(port):
    test = router_healthcheck(port)["test"]
    argv = [sys.executable, *test[2:]]  # the container's python3, here this one
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).returncode


def test_the_probe_passes_on_200_and_fails_on_503(readiness_server):
    port = readiness_server.server_address[1]
    assert run_probe(port) == 0
    _Readiness.status = 503  # vllm-router: no healthy worker
    assert run_probe(port) == 1


def test_the_probe_fails_when_nothing_listens(readiness_server):
    port = readiness_server.server_address[1]
    readiness_server.shutdown()
    readiness_server.server_close()
    assert run_probe(port) == 1


# -- container spec ------------------------------------------------------------------------------------------------


def test_the_default_spec():
    plan = build_plan({"aic_router_enabled": True})[0]
    spec = router_spec(plan, ["http://aic-vllm:8000"])
    assert spec == {
        "name": "aic-router",
        "image": "aic-router:0.1.17",
        "port": 30000,
        "metrics_port": 29000,
        "command": router_command(plan["router"], ["http://aic-vllm:8000"]),
        "env": {"RUST_LOG": "info"},
        "network": "aic",
        "published_ports": ["127.0.0.1:30000:30000", "127.0.0.1:29000:29000"],
        "restart_policy": "unless-stopped",
        "labels": {"ai.aic.stack": "aic", "ai.aic.service": "router"},
        "stop_signal": "SIGTERM",
        "stop_timeout": 60,
        "healthcheck": router_healthcheck(30000),
    }


def test_the_spec_follows_the_plan(three_nodes):
    plan = build_plan(
        {
            **SPUR_LIKE,
            "aic_gpus": "0",
            "aic_bind_address": "::",
            "aic_stack_name": "lab",
            "aic_router_image_name": "lab-router",
            "aic_router_version": "0.1.18",
            "aic_router_port": 31000,
            "aic_router_metrics_port": 29100,
            "aic_router_drain_timeout_s": 0,
            "aic_router_enabled": True,
        }
    )[0]
    workers = router_workers(three_nodes, ["n1", "n2", "n3"], "n1")
    spec = router_spec(plan, workers)
    assert spec["name"] == "lab-router"
    assert spec["image"] == "lab-router:0.1.18"
    assert spec["network"] == "lab"
    assert spec["labels"] == {"ai.aic.stack": "lab", "ai.aic.service": "router"}
    assert spec["published_ports"] == ["[::]:31000:31000", "[::]:29100:29100"]
    assert spec["stop_timeout"] == 0
    assert spec["healthcheck"]["test"][5] == "http://127.0.0.1:31000/readiness"
    assert flags(spec["command"])["--worker-urls"] == workers
    # The image the role built wins over the plan's name:version.
    assert router_spec(plan, workers, image="lab-router:abc123")["image"] == "lab-router:abc123"


def test_the_spec_env_is_not_shared_between_specs():
    plan = build_plan({"aic_router_enabled": True})[0]
    first = router_spec(plan, ["http://aic-vllm:8000"])
    first["env"]["RUST_LOG"] = "debug"
    assert router_spec(plan, ["http://aic-vllm:8000"])["env"] == {"RUST_LOG": "info"}


def test_a_disabled_router_has_no_spec():
    plan = build_plan({"aic_router_enabled": False})[0]
    with pytest.raises(RouterError, match="^aic_router_enabled: false"):
        router_spec(plan, ["http://aic-vllm:8000"])


# -- the job's Prometheus scrapes the router ------------------------------------------------------------------------


def router_jobs(hostvars, hosts, monitoring_host):
    return [job for job in cluster_scrape_jobs(hostvars, hosts, monitoring_host) if job["job"] == "router"]


def test_no_router_no_scrape_job(three_nodes):
    for variables in three_nodes.values():
        variables["aic_plan"]["router"]["enabled"] = False
    assert router_target(three_nodes, ["n1", "n2", "n3"], "n1") is None
    assert router_jobs(three_nodes, ["n1", "n2", "n3"], "n1") == []


def test_the_router_is_scraped_on_its_metrics_port_by_name_or_by_address(three_nodes):
    for variables in three_nodes.values():
        variables["aic_plan"]["router"]["enabled"] = True
    # Prometheus and the router on n1: by container name on the stack network.
    assert router_jobs(three_nodes, ["n1", "n2", "n3"], "n1") == [
        {"job": "router", "groups": [{"targets": ["aic-router:29000"], "labels": {"node": "n1"}}]}
    ]
    # The router on n2, Prometheus on n1: at n2's advertised address.
    for variables in three_nodes.values():
        variables["aic_plan"]["router"]["host"] = "n2"
    assert router_target(three_nodes, ["n1", "n2", "n3"], "n1") == ("router", "10.0.0.12:29000", {"node": "n2"})


def test_the_local_stack_scrapes_its_router():
    hostvars = {"localhost": node(aic_router_enabled=True, aic_router_metrics_port=29100)}
    assert router_jobs(hostvars, ["localhost"], "localhost") == [
        {"job": "router", "groups": [{"targets": ["aic-router:29100"], "labels": {"node": "localhost"}}]}
    ]
