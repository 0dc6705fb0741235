"""The plan inputs of the job's one Prometheus: aic_monitoring_host, aic_advertise_address, aic_prometheus_image."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.aic.stack.plugins.module_utils.plan import PlanError, build_plan

REPO = pathlib.Path(__file__).resolve().parents[3]
SPUR = REPO / "inventories" / "spur" / "group_vars" / "all" / "main.yml"


def rocm(**extra):
    return {"aic_flavour": "rocm", "aic_vllm_model": "org/m", "aic_gpus": "0", **extra}


def test_defaults_keep_the_local_single_node_stack():
    plan, _dummy = build_plan({})
    assert plan["advertise_address"] == "127.0.0.1"
    assert plan["publish_address"] == "127.0.0.1"
    assert plan["monitoring"]["host"] == ""
    assert plan["images"]["prometheus"] == {"name": "aic-prometheus", "image": ""}
    assert plan["endpoints"]["prometheus"] == "http://127.0.0.1:9090"


def test_the_advertise_address_defaults_to_the_bind_address():
    plan, _dummy = build_plan({"aic_bind_address": "10.0.0.5"})
    assert plan["advertise_address"] == "10.0.0.5"
    assert plan["endpoints"]["vllm"] == "http://10.0.0.5:8000"


def test_publish_on_every_address_and_advertise_a_name():
    plan, _dummy = build_plan(
        {"aic_bind_address": "0.0.0.0", "aic_advertise_address": "spur-n07", "aic_vllm_instances": 2}
    )
    # Docker publishes on the bind address; the other hosts (and the endpoints) use the advertised one.
    assert plan["publish_address"] == "0.0.0.0"
    assert plan["advertise_address"] == "spur-n07"
    assert plan["endpoints"] == {
        "vllm": "http://spur-n07:8000",
        "lmcache": "http://spur-n07:8080",
        "prometheus": "http://spur-n07:9090",
        "router": "http://spur-n07:30000",
    }
    assert [i["endpoint"] for i in plan["vllm_instances"]] == ["http://spur-n07:8000", "http://spur-n07:8001"]


def test_an_ipv6_advertise_address_is_bracketed_in_endpoints():
    plan, _dummy = build_plan({"aic_bind_address": "::", "aic_advertise_address": "2001:db8::7"})
    assert plan["publish_address"] == "[::]"
    assert plan["advertise_address"] == "2001:db8::7"
    assert plan["endpoints"]["lmcache"] == "http://[2001:db8::7]:8080"


@pytest.mark.parametrize("value", ["10.1.2.3", "node-1", "node_1.cluster.local", "2001:db8::1"])
def test_advertise_addresses_accepted(value):
    assert build_plan({"aic_advertise_address": value})[0]["advertise_address"] == value


@pytest.mark.parametrize(
    "inputs, name",
    [
        ({"aic_advertise_address": "http://node1"}, "aic_advertise_address"),
        ({"aic_advertise_address": "node 1"}, "aic_advertise_address"),
        ({"aic_advertise_address": "node1:8000"}, "aic_advertise_address"),
        ({"aic_advertise_address": "-node1"}, "aic_advertise_address"),
        ({"aic_monitoring_host": "node 1"}, "aic_monitoring_host"),
        ({"aic_monitoring_host": "node*"}, "aic_monitoring_host"),
        ({"aic_monitoring_host": ["node1"]}, "aic_monitoring_host"),
        ({"aic_prometheus_image": "prom/prometheus"}, "aic_prometheus_image"),
        ({"aic_prometheus_image": "prom prometheus:1"}, "aic_prometheus_image"),
    ],
)
def test_bad_inputs_name_the_variable(inputs, name):
    with pytest.raises(PlanError, match=f"^{name}:"):
        build_plan(inputs)


def test_the_monitoring_host_is_passed_through():
    assert build_plan({"aic_monitoring_host": "mon-1"})[0]["monitoring"]["host"] == "mon-1"


def test_cpu_builds_the_monitoring_images_rocm_runs_the_upstream_ones():
    cpu, _dummy = build_plan({})
    assert cpu["images"]["prometheus"]["image"] == ""
    node = {e["name"]: e for e in cpu["monitoring"]["exporters"]}["node_exporter"]
    assert node["image"] == ""
    plan, _dummy = build_plan(rocm())
    assert plan["images"]["prometheus"]["image"] == "prom/prometheus:v3.13.2"
    node = {e["name"]: e for e in plan["monitoring"]["exporters"]}["node_exporter"]
    assert node["image"] == "quay.io/prometheus/node-exporter:v1.12.1"
    # An explicit image wins on either flavour; an empty one means the flavour's default.
    pinned, _dummy = build_plan(rocm(aic_prometheus_image="reg:5000/prom/prometheus:v3.13.2"))
    assert pinned["images"]["prometheus"]["image"] == "reg:5000/prom/prometheus:v3.13.2"
    unset, _dummy = build_plan(rocm(aic_prometheus_image=""))
    assert unset["images"]["prometheus"]["image"] == "prom/prometheus:v3.13.2"


def test_spur_publishes_on_every_address_advertises_each_host_and_pins_prometheus():
    values = yaml.safe_load(SPUR.read_text())
    assert values["aic_bind_address"] == "0.0.0.0"
    per_host = yaml.safe_load((SPUR.parent / "advertise.yml").read_text())
    assert per_host == {"aic_advertise_address": "{{ ansible_host | default(inventory_hostname) }}"}
    assert values["aic_prometheus_image"] == "prom/prometheus:v3.13.2"
    values["aic_gpus"] = "2"
    values["aic_advertise_address"] = "spur-n01"  # what Ansible templates per host
    plan, _dummy = build_plan(values)
    assert plan["images"]["prometheus"]["image"] == "prom/prometheus:v3.13.2"
    assert plan["publish_address"] == "0.0.0.0"
    assert plan["endpoints"]["vllm"] == "http://spur-n01:8000"
