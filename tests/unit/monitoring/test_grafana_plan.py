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
    steps = [
        t.get("ansible.builtin.import_tasks") or t["ansible.builtin.include_role"].get("tasks_from") for t in tasks
    ]
    assert steps.index("run") < steps.index("run_exporters.yml") < steps.index("grafana.yml")
    server = yaml.safe_load((REPO / "roles" / "monitoring" / "tasks" / "server.yml").read_text())
    assert server[0]["ansible.builtin.include_role"] == {
        "name": "prometheus",
        "apply": {"tags": ["monitoring", "monitoring_run"]},
    }
    assert server[-1]["ansible.builtin.import_tasks"] == "grafana.yml"
    switch = yaml.safe_load((REPO / "roles" / "monitoring" / "tasks" / "grafana.yml").read_text())
    run, remove = switch
    assert (
        run["ansible.builtin.include_role"]["name"] == "grafana"
        and "tasks_from" not in run["ansible.builtin.include_role"]
    )
    assert run["when"] == "aic_plan.monitoring.grafana.enabled"
    # aic_monitoring_mode=full: a Grafana that does not start fails the host (the grafana role's grafana_required).
    assert run["vars"]["grafana_required"] == "{{ aic_plan.monitoring.mode == 'full' }}"
    assert remove["ansible.builtin.include_role"] == {
        "name": "grafana",
        "tasks_from": "remove",
        "apply": {"tags": ["monitoring", "monitoring_run"]},
    }
    assert remove["when"] == "not aic_plan.monitoring.grafana.enabled"
