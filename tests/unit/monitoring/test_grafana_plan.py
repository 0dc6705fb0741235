"""The plan's Grafana inputs: aic_grafana_enabled, aic_grafana_image, aic_grafana_port."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.aic.stack.plugins.module_utils.plan import PlanError, build_plan

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_grafana_is_off_by_default():
    plan, _dummy = build_plan({})
    assert plan["monitoring"]["grafana"] == {
        "enabled": False,
        "image": "grafana/grafana:13.1.3",
        "port": 3000,
        "container": "aic-grafana",
    }
    assert plan["ports"]["grafana"] == 3000


@pytest.mark.parametrize("value", [True, "true", "yes", "1"])
def test_grafana_can_be_enabled(value):
    plan, _dummy = build_plan({"aic_grafana_enabled": value, "aic_stack_name": "lab", "aic_grafana_port": "13000"})
    grafana = plan["monitoring"]["grafana"]
    assert grafana["enabled"] is True
    assert grafana["container"] == "lab-grafana"
    assert grafana["port"] == plan["ports"]["grafana"] == 13000


@pytest.mark.parametrize(
    "inputs, name",
    [
        ({"aic_grafana_enabled": "maybe"}, "aic_grafana_enabled"),
        ({"aic_grafana_image": "grafana/grafana"}, "aic_grafana_image"),
        ({"aic_grafana_port": 9090}, "aic_grafana_port"),  # Prometheus's port
        ({"aic_grafana_port": 70000}, "aic_grafana_port"),
    ],
)
def test_bad_grafana_inputs_name_the_variable(inputs, name):
    with pytest.raises(PlanError, match=name):
        build_plan(inputs)


def test_another_port_colliding_with_grafana_is_rejected():
    with pytest.raises(PlanError, match="aic_grafana_port"):
        build_plan({"aic_node_exporter_port": 3000})


def test_spur_leaves_grafana_off():
    values = yaml.safe_load((REPO / "inventories" / "spur" / "group_vars" / "all" / "main.yml").read_text())
    values["aic_gpus"] = "2"
    plan, _dummy = build_plan(values)
    assert plan["monitoring"]["grafana"]["enabled"] is False
    assert plan["monitoring"]["grafana"]["image"] == "grafana/grafana:13.1.3"


def test_the_role_runs_grafana_only_when_enabled_and_after_the_exporters():
    tasks = yaml.safe_load((REPO / "roles" / "monitoring" / "tasks" / "main.yml").read_text())
    files = [t.get("ansible.builtin.import_tasks") for t in tasks]
    assert files.index("prometheus.yml") < files.index("run_exporters.yml") < files.index("grafana_switch.yml")
    server = yaml.safe_load((REPO / "roles" / "monitoring" / "tasks" / "server.yml").read_text())
    assert [t["ansible.builtin.import_tasks"] for t in server][-2:] == ["prometheus.yml", "grafana_switch.yml"]
    switch = yaml.safe_load((REPO / "roles" / "monitoring" / "tasks" / "grafana_switch.yml").read_text())
    include = next(t for t in switch if t.get("ansible.builtin.include_tasks", {}).get("file") == "grafana.yml")
    assert include["when"] == "aic_plan.monitoring.grafana.enabled"
