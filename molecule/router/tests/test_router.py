"""The router role on its own: vllm-router in front of the scenario's vLLM answers completions on the scenario's port
(the vLLM counts them), reports itself ready with its one healthy worker, serves its own metrics on the metrics port,
and runs as the plan says (image, command, ports, labels, healthcheck)."""

from __future__ import annotations

import json
import time
import urllib.request

import docker
import pytest
from prometheus_client.parser import text_string_to_metric_families

ROUTER = "http://127.0.0.1:26300"
ROUTER_METRICS = "http://127.0.0.1:26301/metrics"
VLLM_METRICS = "http://127.0.0.1:26000/metrics"
CONTAINER = "aicmolrouter-router"


def get(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - fixed local URLs
        return response.status, response.read().decode()


def post(url, body, timeout=120):
    request = urllib.request.Request(  # noqa: S310 - a fixed local URL
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return response.status, json.loads(response.read().decode())


def total(url, name):
    return sum(
        sample.value
        for family in text_string_to_metric_families(get(url)[1])
        for sample in family.samples
        if sample.name == name
    )


def container():
    return docker.from_env().containers.get(CONTAINER)


@pytest.fixture(scope="module")
def model():
    status, body = get(ROUTER + "/v1/models")
    assert status == 200
    return body and json.loads(body)["data"][0]["id"]


def test_it_is_ready_with_its_one_worker():
    status, body = get(ROUTER + "/readiness")
    assert status == 200
    ready = json.loads(body)
    assert ready["status"] == "ready" and ready["healthy_workers"] == 1, ready


def test_a_completion_sent_to_the_router_is_served_by_the_vllm_behind_it(model):
    before = total(VLLM_METRICS, "vllm:request_success_total")
    status, answer = post(ROUTER + "/v1/completions", {"model": model, "prompt": "The router sends", "max_tokens": 4})
    assert status == 200 and answer["choices"][0]["text"] is not None
    # vLLM counts finished requests when they end; its metrics may lag the answer by a moment.
    deadline = time.monotonic() + 10
    while total(VLLM_METRICS, "vllm:request_success_total") < before + 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert total(VLLM_METRICS, "vllm:request_success_total") >= before + 1


def test_it_serves_its_own_metrics_on_the_metrics_port(model):
    post(ROUTER + "/v1/completions", {"model": model, "prompt": "Counted by the router", "max_tokens": 2})
    text = get(ROUTER_METRICS)[1]
    names = {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}
    assert any(name.startswith("vllm_router_") for name in names), sorted(names)[:20]


def test_it_runs_as_the_plan_says():
    attrs = container().attrs
    command = attrs["Config"]["Cmd"]
    assert command[0] == "/opt/aic-router/bin/vllm-router"
    assert command[command.index("--policy") + 1] == "round_robin"
    # Its worker: the scenario's vLLM container, by name on the stack network.
    assert command[command.index("--worker-urls") + 1] == "http://aicmolrouter-vllm:26000"
    assert "aicmolrouter" in attrs["NetworkSettings"]["Networks"]
    assert attrs["Config"]["Labels"]["ai.aic.stack"] == "aicmolrouter"
    assert attrs["Config"]["Labels"]["ai.aic.service"] == "router"
    assert attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert attrs["HostConfig"]["PortBindings"]["26300/tcp"] == [{"HostIp": "127.0.0.1", "HostPort": "26300"}]
    assert attrs["HostConfig"]["PortBindings"]["26301/tcp"] == [{"HostIp": "127.0.0.1", "HostPort": "26301"}]
    assert attrs["Config"]["StopSignal"] == "SIGTERM"


def test_its_image_is_vllm_router_of_the_plan_version_on_the_base_image():
    image = docker.from_env().images.get(container().attrs["Config"]["Image"])
    assert image.labels["ai.aic.component"] == "router"
    assert image.labels["ai.aic.router-version"] == "0.1.17"
    assert image.tags[0].startswith("aic-router:")


def test_docker_sees_it_healthy():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = container().attrs["State"]
        if state.get("Health", {}).get("Status") == "healthy":
            break
        time.sleep(2)
    assert state["Health"]["Status"] == "healthy", state.get("Health")
