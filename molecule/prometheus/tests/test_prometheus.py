"""The prometheus role on its own: it answers on the scenario's port, scrapes the plan's targets, loads the stack's
rules, and a scrape setting changed by side_effect was applied by a live reload, not a restart."""

from __future__ import annotations

import json
import os
import pathlib
import urllib.request

import docker

URL = "http://127.0.0.1:19390"
CONTAINER = "aicmolprom-prometheus"


def get(path):
    with urllib.request.urlopen(URL + path, timeout=10) as response:  # noqa: S310 - a fixed local URL
        return json.load(response) if path.startswith("/api/") else response.read().decode()


def test_prometheus_is_ready_on_the_scenario_port():
    assert "Ready" in get("/-/ready")


def test_it_scrapes_the_plans_services_by_container_name_on_the_stack_network():
    targets = get("/api/v1/targets")["data"]["activeTargets"]
    by_job = {t["labels"]["job"]: t["scrapeUrl"] for t in targets}
    assert "aicmolprom-vllm:8000" in by_job["vllm"], by_job
    assert "aicmolprom-lmcache" in by_job["lmcache"], by_job
    # The stack's name is an external label of this Prometheus (alerts and federation say which stack).
    assert "stack: aicmolprom" in get("/api/v1/status/config")["data"]["yaml"]


def test_the_stacks_alerting_rules_are_loaded():
    groups = get("/api/v1/rules")["data"]["groups"]
    names = {rule["name"] for group in groups for rule in group["rules"]}
    assert any(name.startswith("Aic") or name.startswith("aic") for name in names), names
    assert len(names) >= 5, names


def container():
    """The container, from the engine the instance drives (the one molecule runs on)."""
    return docker.from_env().containers.get(CONTAINER)


def test_the_changed_scrape_interval_was_reloaded_not_restarted():
    config = get("/api/v1/status/config")["data"]["yaml"]
    assert "scrape_interval: 7s" in config, config
    # Written by side_effect just before the change, in the work directory the instance shares with this machine.
    before = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "aic", "started-before.txt").read_text()
    assert before.strip() == container().attrs["State"]["StartedAt"]


def test_the_tsdb_lives_in_the_stacks_named_volume():
    (tsdb,) = [m for m in container().attrs["Mounts"] if m["Destination"] == "/prometheus"]
    assert (tsdb["Type"], tsdb["Name"]) == ("volume", "aicmolprom-prometheus-data")
