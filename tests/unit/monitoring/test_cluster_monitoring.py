"""The job's one Prometheus: scrape jobs of every node (aic.stack.cluster_scrape_jobs), its host and URL, and the
targets health expects. Pure functions over per-host plans; hostvars are plain dicts here."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.filter.monitoring import FilterModule
from ansible_collections.aic.stack.plugins.filter.stack import prometheus_config
from ansible_collections.aic.stack.plugins.module_utils.cluster_monitoring import (
    MonitoringError,
    cluster_expected_targets,
    cluster_scrape_jobs,
    job_monitoring_host,
    job_prometheus_url,
    local_builds,
    node_expected_targets,
)
from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan

PROMTOOL = shutil.which("promtool")

SPUR_LIKE = {
    "aic_flavour": "rocm",
    "aic_vllm_model": "org/m",
    "aic_lmcache_l2_backend": "nixl_posix",
    "aic_bind_address": "0.0.0.0",
}


def node(running=("node_exporter",), **inputs):
    # The router's scrape job has its own tests (tests/unit/router): these are about the nodes' targets.
    inputs.setdefault("aic_router_enabled", False)
    return {"aic_plan": build_plan(inputs)[0], "monitoring_exporters_running": list(running)}


def by_job(jobs):
    return {job["job"]: job["groups"] for job in jobs}


def targets(groups):
    return [(g["labels"].get("node"), g["labels"].get("gpu"), t) for g in groups for t in g["targets"]]


# -- single node: the local stack, exactly today's targets (plus labels) ----------------------------------------


def test_single_local_node_keeps_container_name_targets():
    hostvars = {"localhost": node(aic_lmcache_l2_backend="nixl_posix", aic_lmcache_posix_slot_size=131072)}
    jobs = by_job(cluster_scrape_jobs(hostvars, ["localhost"], "localhost"))
    assert list(jobs) == ["prometheus", "vllm", "lmcache", "nixl", "node_exporter"]
    assert jobs["prometheus"] == [{"targets": ["localhost:9090"], "labels": {"node": "localhost"}}]
    assert jobs["vllm"] == [{"targets": ["aic-vllm:8000"], "labels": {"node": "localhost", "gpu": ""}}]
    assert jobs["lmcache"] == [{"targets": ["aic-lmcache:8080"], "labels": {"node": "localhost"}}]
    assert jobs["nixl"] == [{"targets": ["aic-lmcache:19090"], "labels": {"node": "localhost"}}]
    assert jobs["node_exporter"] == [{"targets": ["aic-node-exporter:9100"], "labels": {"node": "localhost"}}]


def test_single_local_node_targets_are_the_plan_targets():
    """The same targets as the per-node scrape config always had: the local stack behaves as before."""
    hostvars = {"localhost": node(aic_vllm_instances=2)}
    plan = hostvars["localhost"]["aic_plan"]
    old = {j["job"]: j["targets"] for j in plan["prometheus"]["jobs"] + plan["monitoring"]["exporters"][:1]}
    config = prometheus_config(cluster_scrape_jobs(hostvars, ["localhost"], "localhost"))
    new = {
        job["job_name"]: [t for static in job["static_configs"] for t in static["targets"]]
        for job in config["scrape_configs"]
    }
    assert new == old
    vllm = next(job for job in config["scrape_configs"] if job["job_name"] == "vllm")
    # One static group per (node, labels): on cpu the instances share their (empty) gpu label.
    assert vllm["static_configs"] == [
        {"targets": ["aic-vllm:8000", "aic-vllm-1:8001"], "labels": {"node": "localhost", "gpu": ""}},
    ]


def test_no_exporter_fact_means_no_exporter_targets():
    hostvars = {"localhost": {"aic_plan": build_plan({})[0]}}
    # (And the job's router, on by default: its own job.)
    assert [j["job"] for j in cluster_scrape_jobs(hostvars, ["localhost"], "localhost")] == [
        "prometheus",
        "vllm",
        "lmcache",
        "router",
    ]


# -- three nodes: the first is the monitoring host, the others are scraped at their advertised address ------------


@pytest.fixture
def three_nodes():
    return {
        "n1": node(["node_exporter", "amd_metrics_exporter"], aic_gpus="0,1", aic_advertise_address="n1", **SPUR_LIKE),
        "n2": node(["amd_metrics_exporter"], aic_gpus="4,5", aic_advertise_address="10.0.0.12", **SPUR_LIKE),
        "n3": node(
            ["node_exporter", "amd_metrics_exporter"], aic_gpus="7", aic_advertise_address="n3.cluster", **SPUR_LIKE
        ),
    }


def test_three_nodes_local_by_name_remote_by_advertised_address(three_nodes):
    jobs = by_job(cluster_scrape_jobs(three_nodes, ["n1", "n2", "n3"], "n1"))
    assert list(jobs) == ["prometheus", "vllm", "lmcache", "nixl", "node_exporter", "amd_metrics_exporter"]
    assert jobs["prometheus"] == [{"targets": ["localhost:9090"], "labels": {"node": "n1"}}]
    assert targets(jobs["vllm"]) == [
        ("n1", "0", "aic-vllm:8000"),
        ("n1", "1", "aic-vllm-1:8001"),
        ("n2", "4", "10.0.0.12:8000"),
        ("n2", "5", "10.0.0.12:8001"),
        ("n3", "7", "n3.cluster:8000"),
    ]
    assert targets(jobs["lmcache"]) == [
        ("n1", None, "aic-lmcache:8080"),
        ("n2", None, "10.0.0.12:8080"),
        ("n3", None, "n3.cluster:8080"),
    ]
    assert targets(jobs["nixl"]) == [
        ("n1", None, "aic-lmcache:19090"),
        ("n2", None, "10.0.0.12:19090"),
        ("n3", None, "n3.cluster:19090"),
    ]
    assert targets(jobs["amd_metrics_exporter"]) == [
        ("n1", None, "aic-amd-metrics-exporter:5000"),
        ("n2", None, "10.0.0.12:5000"),
        ("n3", None, "n3.cluster:5000"),
    ]


def test_an_exporter_skipped_on_a_node_is_not_scraped_there(three_nodes):
    # n2's engine refused --pid=host: it runs no node-exporter, so Prometheus does not scrape one there.
    jobs = by_job(cluster_scrape_jobs(three_nodes, ["n1", "n2", "n3"], "n1"))
    assert targets(jobs["node_exporter"]) == [("n1", None, "aic-node-exporter:9100"), ("n3", None, "n3.cluster:9100")]


def test_an_exporter_skipped_everywhere_has_no_job(three_nodes):
    for host in three_nodes.values():
        host["monitoring_exporters_running"] = []
    jobs = by_job(cluster_scrape_jobs(three_nodes, ["n1", "n2", "n3"], "n1"))
    assert list(jobs) == ["prometheus", "vllm", "lmcache", "nixl"]


def test_monitoring_host_that_is_not_a_node(three_nodes):
    hostvars = {
        **three_nodes,
        "mon": {"aic_plan": build_plan({"aic_prometheus_port": 19090, "aic_nixl_telemetry_port": 19091})[0]},
    }
    jobs = by_job(cluster_scrape_jobs(hostvars, ["n1", "n2", "n3"], "mon"))
    assert jobs["prometheus"] == [{"targets": ["localhost:9090"], "labels": {"node": "mon"}}]
    # Every node is remote now, n1 included.
    assert targets(jobs["lmcache"]) == [
        ("n1", None, "n1:8080"),
        ("n2", None, "10.0.0.12:8080"),
        ("n3", None, "n3.cluster:8080"),
    ]


def test_the_scrape_config_of_three_nodes_is_valid_prometheus_yaml(three_nodes, tmp_path):
    jobs = cluster_scrape_jobs(three_nodes, ["n1", "n2", "n3"], "n1")
    config = prometheus_config(jobs, "15s", labels={"stack": "aic"})
    assert {static["labels"]["node"] for job in config["scrape_configs"] for static in job["static_configs"]} == {
        "n1",
        "n2",
        "n3",
    }
    if PROMTOOL is None:
        pytest.skip("promtool (Debian package prometheus) is not installed")
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [PROMTOOL, "check", "config", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ipv6_advertise_addresses_are_bracketed():
    hostvars = {
        "n1": node(),
        "n2": node(aic_bind_address="::", aic_advertise_address="2001:db8::2"),
    }
    jobs = by_job(cluster_scrape_jobs(hostvars, ["n1", "n2"], "n1"))
    assert targets(jobs["vllm"])[1] == ("n2", "", "[2001:db8::2]:8000")


# -- inputs that cannot work are refused, naming the host and the variable ------------------------------------------


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({}, "n2: aic_advertise_address is '127.0.0.1'"),
        ({"aic_bind_address": "0.0.0.0"}, "n2: aic_advertise_address is '0.0.0.0'"),
        (
            {"aic_bind_address": "0.0.0.0", "aic_advertise_address": "localhost"},
            "n2: aic_advertise_address is 'localhost'",
        ),
        ({"aic_advertise_address": "n2"}, "n2: aic_bind_address 127.0.0.1 publishes the services on n2's loopback"),
        ({"aic_bind_address": "::1"}, "n2: aic_advertise_address is '::1'"),
    ],
    ids=["default-loopback", "unspecified", "localhost", "bind-loopback", "ipv6-loopback"],
)
def test_a_remote_node_out_of_reach_is_refused(inputs, message):
    hostvars = {"n1": node(), "n2": node(**inputs)}
    with pytest.raises(MonitoringError) as excinfo:
        cluster_scrape_jobs(hostvars, ["n1", "n2"], "n1")
    assert str(excinfo.value).startswith(message), excinfo.value


def test_a_node_without_a_plan_is_refused():
    with pytest.raises(MonitoringError, match="n2: no aic_plan"):
        cluster_scrape_jobs({"n1": node(), "n2": {}}, ["n1", "n2"], "n1")


def test_a_node_outside_the_inventory_is_refused():
    with pytest.raises(MonitoringError, match="'n9' is not a host of the inventory"):
        cluster_scrape_jobs({"n1": node()}, ["n1", "n9"], "n1")


# -- which host, which URL -----------------------------------------------------------------------------------------


def test_monitoring_host_defaults_to_the_given_default_then_the_first_node():
    hostvars = {"n1": node(), "n2": node(), "n3": node()}
    assert job_monitoring_host(hostvars, ["n2", "n3"]) == "n2"
    assert job_monitoring_host(hostvars, ["n2", "n3"], "n1") == "n1"


def test_monitoring_host_from_the_plan():
    hostvars = {"n1": node(aic_monitoring_host="mon"), "n2": node(aic_monitoring_host="mon"), "mon": {}}
    assert job_monitoring_host(hostvars, ["n1", "n2"], "n1") == "mon"


def test_nodes_disagreeing_on_the_monitoring_host_are_refused():
    hostvars = {"n1": node(aic_monitoring_host="n1"), "n2": node(aic_monitoring_host="n2"), "n3": node()}
    with pytest.raises(MonitoringError, match=r"aic_monitoring_host: the nodes disagree .*'n1' on n1; 'n2' on n2"):
        job_monitoring_host(hostvars, ["n1", "n2", "n3"])


def test_a_monitoring_host_outside_the_inventory_is_refused():
    with pytest.raises(MonitoringError, match="aic_monitoring_host: 'ghost' is not a host of the inventory"):
        job_monitoring_host({"n1": node(aic_monitoring_host="ghost")}, ["n1"])


def test_prometheus_url_is_the_monitoring_hosts_published_endpoint():
    hostvars = {"n1": node(aic_bind_address="0.0.0.0", aic_advertise_address="n1.cluster", aic_prometheus_port=19099)}
    assert job_prometheus_url(hostvars, "n1") == "http://n1.cluster:19099"
    assert job_prometheus_url({"localhost": node()}, "localhost") == "http://127.0.0.1:9090"


def test_prometheus_url_of_a_host_not_planned_in_this_play_comes_from_its_variables():
    hostvars = {"mon": {"aic_advertise_address": "mon.cluster", "aic_prometheus_port": "19099", "ansible_host": "x"}}
    assert job_prometheus_url(hostvars, "mon") == "http://mon.cluster:19099"
    with pytest.raises(MonitoringError, match="mon: invalid input: aic_prometheus_port"):
        job_prometheus_url({"mon": {"aic_prometheus_port": "x"}}, "mon")


# -- what health expects -------------------------------------------------------------------------------------------


def test_cluster_expected_targets_cover_every_node_but_not_nixl(three_nodes):
    expected = cluster_expected_targets(three_nodes, ["n1", "n2"], "n1")
    assert expected == [
        {"job": "prometheus", "node": "n1"},
        {"job": "vllm", "node": "n1", "gpu": "0"},
        {"job": "vllm", "node": "n1", "gpu": "1"},
        {"job": "lmcache", "node": "n1"},
        {"job": "node_exporter", "node": "n1"},
        {"job": "amd_metrics_exporter", "node": "n1"},
        {"job": "vllm", "node": "n2", "gpu": "4"},
        {"job": "vllm", "node": "n2", "gpu": "5"},
        {"job": "lmcache", "node": "n2"},
        {"job": "amd_metrics_exporter", "node": "n2"},
    ]
    stack_only = cluster_expected_targets(three_nodes, ["n3"], exporters=False)
    assert stack_only == [{"job": "vllm", "node": "n3", "gpu": "7"}, {"job": "lmcache", "node": "n3"}]


def test_node_expected_targets_from_outside_the_job_match_by_job():
    plan = build_plan({})[0]
    assert node_expected_targets(plan, "") == [{"job": "prometheus"}, {"job": "vllm", "gpu": ""}, {"job": "lmcache"}]


def test_planned_nodes_are_those_with_a_plan():
    from ansible_collections.aic.stack.plugins.module_utils.cluster_monitoring import planned_nodes

    assert planned_nodes({"n1": node(), "n2": {}, "n3": node()}, ["n1", "n2", "n3", "n4", "n1"]) == ["n1", "n3"]


def test_node_expected_targets():
    plan = build_plan({"aic_vllm_instances": 2})[0]
    assert node_expected_targets(plan, "localhost") == [
        {"job": "prometheus"},
        {"job": "vllm", "node": "localhost", "gpu": ""},
        {"job": "vllm", "node": "localhost", "gpu": ""},
        {"job": "lmcache", "node": "localhost"},
    ]


# -- what is built from the base image -----------------------------------------------------------------------------


def test_local_builds_cpu_builds_both_rocm_none():
    cpu = build_plan({})[0]
    assert local_builds(cpu, "server") == ["prometheus"]
    assert local_builds(cpu, "exporters") == ["node_exporter"]
    assert local_builds(build_plan({"aic_monitoring_mode": "prometheus_only"})[0], "exporters") == []
    rocm = build_plan({"aic_flavour": "rocm", "aic_vllm_model": "org/m", "aic_gpus": "0"})[0]
    assert local_builds(rocm, "server") == []
    assert local_builds(rocm, "exporters") == []
    with pytest.raises(MonitoringError):
        local_builds(cpu, "grafana")


def test_filters_are_registered_and_raise_ansible_errors():
    filters = FilterModule().filters()
    assert set(filters) == {
        "cluster_scrape_jobs",
        "cluster_expected_targets",
        "node_expected_targets",
        "job_monitoring_host",
        "job_prometheus_url",
        "monitoring_local_builds",
        "cluster_slab_mountpoints",
        "prometheus_label_matcher",
        "monitoring_planned_nodes",
        "monitoring_enabled_exporters",
        "monitoring_exporter_decision",
    }
    with pytest.raises(AnsibleFilterError, match="aic_monitoring_host"):
        filters["job_monitoring_host"]({"n1": node(aic_monitoring_host="ghost")}, ["n1"])


def test_a_loopback_alias_is_a_deliberate_one_machine_test_bed():
    hostvars = {"n1": node(), "n2": node(aic_bind_address="127.0.0.3")}
    jobs = by_job(cluster_scrape_jobs(hostvars, ["n1", "n2"], "n1"))
    assert targets(jobs["lmcache"])[1] == ("n2", None, "127.0.0.3:8080")
    with pytest.raises(MonitoringError, match="n2: aic_bind_address 127.0.0.1 publishes"):
        cluster_scrape_jobs({"n1": node(), "n2": node(aic_advertise_address="127.0.0.3")}, ["n1", "n2"], "n1")


def test_slab_mountpoints_of_every_node():
    from ansible_collections.aic.stack.plugins.module_utils.cluster_monitoring import cluster_slab_mountpoints

    hostvars = {
        "n1": {"monitoring_slab_mountpoint": "/mnt/nvme"},
        "n2": {"monitoring_slab_mountpoint": "/mnt/nvme "},
        "n3": {"monitoring_slab_mountpoint": "/"},
        "n4": {},
    }
    assert cluster_slab_mountpoints(hostvars, ["n1", "n2", "n3", "n4"]) == ["/mnt/nvme", "/"]
    assert cluster_slab_mountpoints(hostvars, ["n4"]) == ["/"]
