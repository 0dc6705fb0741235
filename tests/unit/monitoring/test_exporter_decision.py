"""Which exporters a node runs (aic.stack.monitoring_enabled_exporters / monitoring_exporter_decision): the mode and
flavour enable them, their image must be on the engine, and host-PID ones need an engine that allows --pid=host.
The plans are built by the real plan (build_plan), as the preflight role builds them."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.filter.monitoring import FilterModule
from ansible_collections.aic.stack.plugins.module_utils.cluster_monitoring import (
    MonitoringError,
    enabled_exporters,
    exporter_decision,
)
from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan

ROCM = {"aic_flavour": "rocm", "aic_vllm_model": "org/m"}
IMAGES = {"node_exporter": "aic-node-exporter:1", "amd_metrics_exporter": "rocm/device-metrics-exporter:v1"}
DENIED = {"changed": False, "pid_host": "denied", "message": "authorization denied by plugin pidhost: no host PID"}


def monitoring(**inputs):
    return build_plan(inputs)[0]["monitoring"]


def names(exporters):
    return [e["name"] for e in exporters]


def test_the_flavour_and_the_mode_enable_the_exporters():
    assert names(enabled_exporters(monitoring())) == ["node_exporter"]
    assert names(enabled_exporters(monitoring(**ROCM))) == ["node_exporter", "amd_metrics_exporter"]
    assert enabled_exporters(monitoring(aic_monitoring_mode="prometheus_only", **ROCM)) == []
    assert names(enabled_exporters(monitoring(aic_monitoring_mode="full", **ROCM))) == [
        "node_exporter",
        "amd_metrics_exporter",
    ]


def test_before_the_engine_is_asked_the_decision_names_the_image_to_probe_with():
    decision = exporter_decision(monitoring(**ROCM), IMAGES)
    assert decision["probe_image"] == "aic-node-exporter:1"
    # Not asked yet: nothing refused.
    assert decision["pid_host"] == "allowed" and decision["refused"] == []
    assert names(decision["planned"]) == ["node_exporter", "amd_metrics_exporter"]


def test_no_probe_without_a_host_pid_exporter_that_has_its_image():
    # node-exporter's image is missing: the AMD exporter needs no host PID, so the engine is not asked.
    assert exporter_decision(monitoring(**ROCM), {"amd_metrics_exporter": "x:1"})["probe_image"] == ""
    assert exporter_decision(monitoring(aic_monitoring_mode="prometheus_only"), IMAGES)["probe_image"] == ""
    assert exporter_decision(monitoring(), {})["probe_image"] == ""


def test_an_engine_that_refuses_host_pid_keeps_the_others_and_says_why():
    decision = exporter_decision(monitoring(**ROCM), IMAGES, DENIED)
    assert names(decision["planned"]) == ["amd_metrics_exporter"]
    assert decision["refused"] == ["node_exporter"]
    assert decision["pid_host"] == "denied" and "authorization denied by plugin" in decision["message"]
    assert decision["probe_image"] == ""
    # A probe that failed (the daemon's error) is no permission either.
    error = exporter_decision(monitoring(), IMAGES, {"pid_host": "error", "message": "boom"})
    assert error["planned"] == [] and error["refused"] == ["node_exporter"] and error["message"] == "boom"


def test_an_engine_that_allows_host_pid_runs_every_exporter_with_an_image():
    allowed = {"pid_host": "allowed", "message": ""}
    decision = exporter_decision(monitoring(**ROCM), IMAGES, allowed)
    assert names(decision["planned"]) == ["node_exporter", "amd_metrics_exporter"] and decision["refused"] == []
    # Without its image an exporter never runs, whatever the engine allows.
    assert names(exporter_decision(monitoring(**ROCM), {"node_exporter": "n:1"}, allowed)["planned"]) == [
        "node_exporter"
    ]


def test_a_skipped_probe_counts_as_not_asked():
    skipped = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
    decision = exporter_decision(monitoring(), {"node_exporter": "n:1"}, skipped)
    assert names(decision["planned"]) == ["node_exporter"]
    assert decision["pid_host"] == "allowed" and decision["refused"] == [] and decision["probe_image"] == ""


def test_the_planned_entries_are_the_plans_own():
    plan = monitoring()
    (planned,) = exporter_decision(plan, IMAGES)["planned"]
    assert planned == plan["exporters"][0]
    assert planned is not plan["exporters"][0]  # a copy: the plan fact is never changed


@pytest.mark.parametrize(
    ("section", "images", "message"),
    [
        ({"mode": "auto", "exporters": "node_exporter"}, {}, "monitoring.exporters is not a list"),
        ({"mode": "auto", "exporters": [{"enabled": True}]}, {}, "an exporter without a name"),
        ({"mode": "auto", "exporters": []}, ["node_exporter"], "images must be a dict"),
    ],
)
def test_bad_input_is_named(section, images, message):
    with pytest.raises(MonitoringError, match=message):
        exporter_decision(section, images)
    with pytest.raises(AnsibleFilterError, match=message):
        FilterModule().filters()["monitoring_exporter_decision"](section, images)
