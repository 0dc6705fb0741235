"""The plan inputs of the job's vllm-router (aic_router_*): defaults, types, the cross-field rules (_validate_router)
and the published ``plan["router"]``; the router host among the job's nodes (router.job_router_host)."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.aic.stack.plugins.module_utils.cluster_monitoring import job_monitoring_host
from ansible_collections.aic.stack.plugins.module_utils.plan import (
    BOOL_FIELDS,
    DEFAULTS,
    INT_FIELDS,
    PORT_FIELDS,
    ROUTER_POLICIES,
    PlanError,
    build_plan,
    normalize,
)
from ansible_collections.aic.stack.plugins.module_utils.plan_inputs import check_inputs, input_options, spec_path
from ansible_collections.aic.stack.plugins.module_utils.router import RouterError, job_router_host

REPO = pathlib.Path(__file__).resolve().parents[3]
LOCAL_INVENTORY = REPO / "inventories" / "local" / "hosts.yml"
ROUTER_INPUTS = [name for name in DEFAULTS if name.startswith("aic_router_")]


def plan_error(inputs):
    with pytest.raises(PlanError) as excinfo:
        build_plan(inputs)
    return str(excinfo.value)


def node(**inputs):
    return {"aic_plan": build_plan(inputs)[0]}


# -- defaults -------------------------------------------------------------------------------------------------------


def test_the_router_inputs_and_their_defaults():
    assert {name: DEFAULTS[name] for name in ROUTER_INPUTS} == {
        "aic_router_enabled": True,
        "aic_router_host": "",
        "aic_router_image_name": "aic-router",
        "aic_router_version": "0.1.17",
        "aic_router_port": 30000,
        "aic_router_metrics_port": 29000,
        "aic_router_policy": "cache_aware",
        "aic_router_health_check_interval_s": 5,
        "aic_router_health_check_timeout_s": 3,
        "aic_router_health_failure_threshold": 3,
        "aic_router_health_success_threshold": 2,
        "aic_router_retry_max_retries": 3,
        "aic_router_drain_timeout_s": 60,
    }
    assert "aic_router_enabled" in BOOL_FIELDS
    assert {"aic_router_port", "aic_router_metrics_port"} <= set(PORT_FIELDS)
    assert {
        "aic_router_health_check_interval_s",
        "aic_router_health_check_timeout_s",
        "aic_router_health_failure_threshold",
        "aic_router_health_success_threshold",
        "aic_router_retry_max_retries",
        "aic_router_drain_timeout_s",
    } <= set(INT_FIELDS)


def test_the_default_plan_has_the_router_on_the_first_node():
    plan, warnings = build_plan({"aic_router_enabled": True})
    assert warnings == []
    assert plan["router"] == {
        "enabled": True,
        "host": "",
        "container": "aic-router",
        "image": "aic-router",
        "version": "0.1.17",
        "port": 30000,
        "metrics_port": 29000,
        "policy": "cache_aware",
        "health": {"interval_s": 5, "timeout_s": 3, "failure_threshold": 3, "success_threshold": 2},
        "retry_max_retries": 3,
        "drain_timeout_s": 60,
    }
    assert plan["ports"]["router"] == 30000
    assert plan["ports"]["router_metrics"] == 29000


def test_every_router_input_reaches_the_plan():
    plan, _dummy = build_plan(
        {
            "aic_stack_name": "lab",
            "aic_router_enabled": "false",
            "aic_router_host": "n2",
            "aic_router_image_name": "lab-router",
            "aic_router_version": "0.1.18",
            "aic_router_port": "31000",
            "aic_router_metrics_port": 29100,
            "aic_router_policy": "power_of_two",
            "aic_router_health_check_interval_s": "10",
            "aic_router_health_check_timeout_s": 10,
            "aic_router_health_failure_threshold": 5,
            "aic_router_health_success_threshold": 1,
            "aic_router_retry_max_retries": 1,
            "aic_router_drain_timeout_s": 0,
        }
    )
    assert plan["router"] == {
        "enabled": False,
        "host": "n2",
        "container": "lab-router",
        "image": "lab-router",
        "version": "0.1.18",
        "port": 31000,
        "metrics_port": 29100,
        "policy": "power_of_two",
        "health": {"interval_s": 10, "timeout_s": 10, "failure_threshold": 5, "success_threshold": 1},
        "retry_max_retries": 1,
        "drain_timeout_s": 0,
    }
    assert plan["ports"]["router"] == 31000
    assert plan["ports"]["router_metrics"] == 29100


@pytest.mark.parametrize("name", ROUTER_INPUTS)
@pytest.mark.parametrize("unset", ["", None])
def test_an_unset_router_input_means_its_default(name, unset):
    values, _dummy = normalize({name: unset})
    assert values[name] == DEFAULTS[name]


@pytest.mark.parametrize("policy", ROUTER_POLICIES)
def test_every_policy_is_accepted(policy):
    assert build_plan({"aic_router_policy": policy})[0]["router"]["policy"] == policy


def test_the_spec_refuses_what_the_plan_refuses():
    options = input_options(yaml.safe_load(pathlib.Path(spec_path()).read_text()))
    assert options["aic_router_policy"]["choices"] == list(ROUTER_POLICIES)
    with pytest.raises(PlanError, match="aic_router_policy"):
        check_inputs({"aic_router_policy": "kv_aware"}, options)
    with pytest.raises(PlanError, match="aic_router_port"):
        check_inputs({"aic_router_port": "router"}, options)
    with pytest.raises(PlanError, match="aic_router_enabled"):
        check_inputs({"aic_router_enabled": "maybe"}, options)


# -- each refusal names the field -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "inputs, starts",
    [
        ({"aic_router_policy": "kv_aware"}, "aic_router_policy: must be one of cache_aware, consistent_hash"),
        ({"aic_router_policy": "Cache_Aware"}, "aic_router_policy: must be one of"),
        ({"aic_router_version": "0.1"}, "aic_router_version: '0.1' is not a vllm-router release x.y.z"),
        ({"aic_router_version": "v0.1.17"}, "aic_router_version: 'v0.1.17'"),
        ({"aic_router_version": "0.1.17rc1"}, "aic_router_version: '0.1.17rc1'"),
        ({"aic_router_version": ">=0.1.17"}, "aic_router_version: '>=0.1.17'"),
        ({"aic_router_host": "node 1"}, "aic_router_host: 'node 1' is not an inventory host name"),
        ({"aic_router_host": "node*"}, "aic_router_host: 'node*'"),
        ({"aic_router_host": ["n1"]}, "aic_router_host: expected a string"),
        ({"aic_router_image_name": "Aic-Router"}, "aic_router_image_name: 'Aic-Router' is not a valid name"),
        ({"aic_router_enabled": "maybe"}, "aic_router_enabled:"),
        ({"aic_router_port": 0}, "aic_router_port: 0 is outside 1..65535"),
        ({"aic_router_metrics_port": 65536}, "aic_router_metrics_port: 65536 is outside 1..65535"),
        ({"aic_router_port": "30k"}, "aic_router_port:"),
        ({"aic_router_health_check_interval_s": 0}, "aic_router_health_check_interval_s:"),
        ({"aic_router_health_failure_threshold": 0}, "aic_router_health_failure_threshold:"),
        ({"aic_router_health_success_threshold": 0}, "aic_router_health_success_threshold:"),
        ({"aic_router_retry_max_retries": 0}, "aic_router_retry_max_retries:"),
        ({"aic_router_drain_timeout_s": -1}, "aic_router_drain_timeout_s:"),
        (
            {"aic_router_health_check_timeout_s": 6},
            "aic_router_health_check_timeout_s: 6 must be at most aic_router_health_check_interval_s (5)",
        ),
        (
            {"aic_router_health_check_interval_s": 2},
            "aic_router_health_check_timeout_s: 3 must be at most aic_router_health_check_interval_s (2)",
        ),
    ],
)
def test_bad_router_inputs_name_the_field(inputs, starts):
    message = plan_error(inputs)
    assert message.startswith(starts), message


def test_a_timeout_equal_to_the_interval_is_accepted():
    plan, _dummy = build_plan({"aic_router_health_check_interval_s": 4, "aic_router_health_check_timeout_s": "4"})
    assert plan["router"]["health"]["interval_s"] == plan["router"]["health"]["timeout_s"] == 4


# -- its ports are in the plan's unique-port check -------------------------------------------------------------------


@pytest.mark.parametrize(
    "inputs, first, second",
    [
        ({"aic_router_port": 8000}, "aic_vllm_port", "aic_router_port"),
        ({"aic_router_port": 9090}, "aic_prometheus_port", "aic_router_port"),
        ({"aic_router_metrics_port": 3000}, "aic_grafana_port", "aic_router_metrics_port"),
        ({"aic_router_metrics_port": 30000}, "aic_router_port", "aic_router_metrics_port"),
        ({"aic_router_port": 29000}, "aic_router_port", "aic_router_metrics_port"),
        ({"aic_lmcache_http_port": 30000}, "aic_lmcache_http_port", "aic_router_port"),
        ({"aic_node_exporter_port": 29000}, "aic_node_exporter_port", "aic_router_metrics_port"),
    ],
)
def test_a_router_port_taken_by_another_service_is_refused_naming_both(inputs, first, second):
    message = plan_error(inputs)
    assert first in message and second in message, message
    assert str(next(iter(inputs.values()))) in message


def test_a_vllm_instance_port_on_the_router_port_is_refused():
    # Instance 2 of aic_vllm_port 29998 would listen on 30000, the router's port.
    message = plan_error({"aic_vllm_port": 29998, "aic_vllm_instances": 3})
    assert message.startswith("aic_vllm_instances: vLLM instance 2 would listen on port 30000, already used by")
    assert "aic_router_port" in message


# -- the router host: a node of the job, the first one by default ----------------------------------------------------


def test_the_local_inventory_runs_the_router_on_localhost():
    inventory = yaml.safe_load(LOCAL_INVENTORY.read_text())
    nodes = list(inventory["all"]["children"]["aic_nodes"]["hosts"])
    assert nodes == ["localhost"]
    assert job_router_host({"localhost": node()}, nodes) == "localhost"


def test_the_router_host_defaults_to_the_given_default_then_the_first_node():
    hostvars = {"n1": node(), "n2": node(), "n3": node()}
    assert job_router_host(hostvars, ["n2", "n3"]) == "n2"
    assert job_router_host(hostvars, ["n1", "n2", "n3"], "n3") == "n3"


def test_the_router_host_from_the_plan_wins():
    hostvars = {"n1": node(aic_router_host="n3"), "n2": node(aic_router_host="n3"), "n3": node()}
    assert job_router_host(hostvars, ["n1", "n2", "n3"], "n1") == "n3"


def test_nodes_disagreeing_on_the_router_host_are_refused():
    hostvars = {"n1": node(aic_router_host="n1"), "n2": node(aic_router_host="n2")}
    with pytest.raises(RouterError, match=r"^aic_router_host: the nodes disagree .*'n1' on n1; 'n2' on n2"):
        job_router_host(hostvars, ["n1", "n2"])


def test_a_router_host_outside_the_inventory_is_refused():
    with pytest.raises(RouterError, match="^aic_router_host: 'ghost' is not a host of the inventory"):
        job_router_host({"n1": node(aic_router_host="ghost")}, ["n1"])


def test_a_router_host_of_the_inventory_but_not_of_the_job_is_refused():
    # Unlike the job's Prometheus, the router runs on a node of the job.
    hostvars = {"n1": node(aic_router_host="head"), "n2": node(), "head": {}}
    with pytest.raises(RouterError, match=r"^aic_router_host: 'head' is not a node of the job \(n1, n2\)"):
        job_router_host(hostvars, ["n1", "n2"])


def test_no_nodes_no_router_host():
    with pytest.raises(RouterError, match="^aic_router_host: no nodes, and no router host given"):
        job_router_host({}, [])


def test_the_monitoring_host_and_the_router_host_are_chosen_apart():
    hostvars = {"n1": node(aic_monitoring_host="n2"), "n2": node(aic_monitoring_host="n2")}
    assert job_monitoring_host(hostvars, ["n1", "n2"]) == "n2"
    assert job_router_host(hostvars, ["n1", "n2"]) == "n1"
