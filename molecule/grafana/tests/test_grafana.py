"""The grafana role on its own (stand-in image, see molecule.yml): the container mounts the provisioned datasource
(the stack's Prometheus by container name) and the aic-stack dashboard read-only where Grafana reads them, with
anonymous access off, its data in the stack's named volume, published on the plan's port."""

from __future__ import annotations

import json
import urllib.request

import docker
import yaml

URL = "http://127.0.0.1:13000"
CONTAINER = "aicmolgraf-grafana"


def fetch(path):
    with urllib.request.urlopen(URL + path, timeout=10) as response:  # noqa: S310 - a fixed local URL
        return response.read().decode()


def container():
    return docker.from_env().containers.get(CONTAINER)


def test_the_datasource_is_the_stacks_prometheus_by_container_name():
    sources = yaml.safe_load(fetch("/provisioning/datasources/aic.yml"))["datasources"]
    (prometheus,) = [s for s in sources if s["type"] == "prometheus"]
    assert prometheus["url"] == "http://aicmolgraf-prometheus:9090", prometheus
    assert prometheus.get("isDefault") is True


def test_the_dashboard_is_provisioned_and_is_the_aic_stack_one():
    provider = yaml.safe_load(fetch("/provisioning/dashboards/aic.yml"))
    assert any(p["options"]["path"] == "/etc/grafana/dashboards" for p in provider["providers"]), provider
    dashboard = json.loads(fetch("/dashboards/aic-stack.json"))
    assert dashboard["uid"] and dashboard["panels"], dashboard.get("title")


def test_the_container_runs_as_grafana_needs():
    attrs = container().attrs
    env = dict(item.split("=", 1) for item in attrs["Config"]["Env"])
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert env["GF_PATHS_PROVISIONING"] == "/etc/grafana/provisioning"
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert not mounts["/etc/grafana/provisioning"]["RW"] and not mounts["/etc/grafana/dashboards"]["RW"]
    assert (mounts["/var/lib/grafana"]["Type"], mounts["/var/lib/grafana"]["Name"]) == (
        "volume",
        "aicmolgraf-grafana-data",
    )
    assert attrs["HostConfig"]["PortBindings"] == {"3000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "13000"}]}
