"""The plan's monitoring inputs: mode, Docker host, exporter images and ports."""

from __future__ import annotations

import pytest

from ansible_collections.aic.stack.plugins.module_utils.plan import PlanError, build_plan


def exporters(plan):
    return {e["name"]: e for e in plan["monitoring"]["exporters"]}


def test_defaults():
    plan, _dummy = build_plan({})
    mon = plan["monitoring"]
    assert mon["mode"] == "auto"
    assert mon["docker_host"] == ""
    assert mon["jobs"] == []  # no NIXL L2 backend, no NIXL telemetry job
    node = exporters(plan)["node_exporter"]
    assert node == {
        "name": "node_exporter",
        "job": "node_exporter",
        "container": "aic-node-exporter",
        "image": "",
        "build_name": "aic-node-exporter",
        "port": 9100,
        "targets": ["aic-node-exporter:9100"],
        "pid_host": True,
        "enabled": True,
    }
    amd = exporters(plan)["amd_metrics_exporter"]
    assert amd["enabled"] is False  # cpu flavour
    assert amd["image"] == "rocm/device-metrics-exporter:v1.5.1"
    assert amd["pid_host"] is False


def test_rocm_enables_the_amd_exporter_and_nixl_job():
    plan, _dummy = build_plan(
        {"aic_flavour": "rocm", "aic_gpus": "1", "aic_vllm_model": "org/m", "aic_lmcache_l2_backend": "nixl_posix"}
    )
    assert exporters(plan)["amd_metrics_exporter"]["enabled"] is True
    assert plan["monitoring"]["jobs"] == [{"job": "nixl", "targets": ["aic-lmcache:19090"]}]


def test_ports_are_the_plan_ports():
    plan, _dummy = build_plan({"aic_stack_name": "mon", "aic_node_exporter_port": "19100"})
    assert plan["ports"]["node_exporter"] == 19100
    assert exporters(plan)["node_exporter"]["targets"] == ["mon-node-exporter:19100"]


@pytest.mark.parametrize(
    "inputs, name",
    [
        ({"aic_monitoring_mode": "sometimes"}, "aic_monitoring_mode"),
        ({"aic_docker_host": "/var/run/docker.sock"}, "aic_docker_host"),
        ({"aic_node_exporter_image": "no tag"}, "aic_node_exporter_image"),
        ({"aic_amd_metrics_exporter_image": "rocm/device-metrics-exporter"}, "aic_amd_metrics_exporter_image"),
        ({"aic_node_exporter_image_name": "Bad Name"}, "aic_node_exporter_image_name"),
        ({"aic_node_exporter_port": 9090}, "aic_node_exporter_port"),
        ({"aic_amd_metrics_exporter_port": 8000}, "aic_amd_metrics_exporter_port"),
    ],
)
def test_bad_monitoring_inputs_name_the_variable(inputs, name):
    with pytest.raises(PlanError, match=name):
        build_plan(inputs)


@pytest.mark.parametrize("value", ["unix:///run/aic/docker.sock", "tcp://10.0.0.5:2376", "ssh://user@node1"])
def test_docker_host_urls_are_accepted(value):
    plan, _dummy = build_plan({"aic_docker_host": value})
    assert plan["monitoring"]["docker_host"] == value


def test_spur_pins_the_upstream_exporter_images():
    import pathlib

    import yaml

    repo = pathlib.Path(__file__).resolve().parents[3]
    values = yaml.safe_load((repo / "inventories" / "spur" / "group_vars" / "all" / "main.yml").read_text())
    values["aic_gpus"] = "2"
    plan, _dummy = build_plan(values)
    assert exporters(plan)["node_exporter"]["image"] == "quay.io/prometheus/node-exporter:v1.12.1"
    assert exporters(plan)["amd_metrics_exporter"]["image"] == "rocm/device-metrics-exporter:v1.5.1"
    assert exporters(plan)["amd_metrics_exporter"]["enabled"] is True
    assert plan["monitoring"]["mode"] == "auto"
