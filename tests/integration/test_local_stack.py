"""The real local stack: deploy it, redeploy with no change, and prove KV blocks come back from LMCache.

These tests build images and start real containers (Docker engine, vLLM on CPU, LMCache, Prometheus).
"""

from __future__ import annotations

import random
import time

import docker
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from .conftest import PROMETHEUS_DIR, changed_tasks, failures, run_playbook

pytestmark = pytest.mark.integration

VLLM = "http://127.0.0.1:8000"
LMCACHE = "http://127.0.0.1:8080"
PROMETHEUS = "http://127.0.0.1:9090"
ROUTER = "http://127.0.0.1:30000"
MODEL = "tiny-llama"
SERVICES = ("aic-vllm", "aic-lmcache", "aic-prometheus", "aic-router")
SUMMARY_TASK = "Summary of the rollout (every node of the job)"
FAST_PATH_LINE = "localhost: healthy, unchanged (nothing to do"


def metric(text, name, **labels):
    """Sum of samples called ``name`` (full sample name) whose labels include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def wait_healthy(url, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(2)
    raise AssertionError(f"{url} not healthy within {timeout} s")


def started_at():
    client = docker.from_env()
    return {name: client.containers.get(name).attrs["State"]["StartedAt"] for name in SERVICES}


@pytest.fixture(scope="module")
def deployed(default_stack):
    # The session's default deploy (conftest.py): this module runs first of the stack modules, so it is the first
    # deploy of the session's stack and the second one below must change nothing.
    return default_stack


def test_first_deploy_ends_healthy(deployed):
    # The deploy ends with the health role; its checks are in the event stream.
    tasks = {e["event_data"].get("task") for e in deployed.events if e.get("event") == "runner_on_ok"}
    assert "Check every vLLM instance (health, model, a completion, vllm metrics)" in tasks
    assert "Check that Prometheus scrapes every expected job" in tasks


def test_second_deploy_changes_and_restarts_nothing(deployed, local_stack, session_tmp):
    """A deploy over the deployed stack. When the session's default deploy already was one (scripts/run-tests.sh
    deploys the stack just before the tests, as make deploy does), that deploy is the one checked; else a second
    deploy runs here."""
    # (A default deploy that was not the fast path - the collection changed since the stack's last deploy - counts as
    # the first one: the one after it must be.)
    if local_stack.started_around and fast_path_taken(deployed):
        runner, (before, after) = deployed, local_stack.started_around
    else:
        before = started_at()
        runner = run_playbook("deploy.yml", session_tmp)
        after = started_at()
    assert runner.status == "successful", failures(runner)
    assert changed_tasks(runner) == []
    assert all(count == 0 for count in runner.stats["changed"].values()), runner.stats
    assert after == before, "a container was restarted by a no-op deploy"
    assert set(SERVICES) <= set(after), after
    # The no-op fast path: the health checks ran, no role that changes the stack did.
    assert fast_path_taken(runner), summary_lines(runner)
    ran = ran_tasks(runner)
    assert "Check every vLLM instance (health, model, a completion, vllm metrics)" in ran
    assert "Run vLLM with the LMCache multi-process connector" not in ran and "Run Prometheus" not in ran


def summary_lines(runner):
    lines = []
    for event in runner.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == SUMMARY_TASK:
            lines = data["res"]["msg"]
    return lines


def fast_path_taken(runner):
    return any(line.startswith(FAST_PATH_LINE) for line in summary_lines(runner))


def ran_tasks(runner):
    return {
        e["event_data"].get("task") for e in runner.events if e.get("event") in ("runner_on_ok", "runner_on_failed")
    }


def fast_path_reasons(runner):
    for event in runner.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == "Say why the full rollout runs":
            return data["res"]["msg"]
    return []


def test_what_changed_behind_the_deploys_back_takes_the_full_path_which_repairs_it(deployed, session_tmp):
    """An edited Prometheus config and a container restarted by hand: the next deploy names both, runs every role
    (the config is rendered again), and the one after it is the fast path again. (That every role run over an
    unchanged stack changes nothing - aic_deploy_fast_path=false - is test_drift's last deploy.)"""
    config = PROMETHEUS_DIR / "prometheus.yml"
    rendered = config.read_text()
    config.write_text(rendered + "# edited by hand\n")
    docker.from_env().containers.get("aic-node-exporter").restart(timeout=10)
    runner = run_playbook("deploy.yml", session_tmp)
    assert runner.status == "successful", failures(runner)
    reasons = fast_path_reasons(runner)
    assert f"file {config} changed since the last deploy" in reasons, reasons
    assert any(
        r.startswith("container aic-node-exporter was stopped or restarted since the last deploy") for r in reasons
    ), reasons
    assert not fast_path_taken(runner)
    assert config.read_text() == rendered
    assert [task for _role, task in changed_tasks(runner) if "prometheus.yml" in task], changed_tasks(runner)
    again = run_playbook("deploy.yml", session_tmp)
    assert again.status == "successful", failures(again)
    assert fast_path_taken(again) and changed_tasks(again) == []


def test_completion_url_returns_text(deployed):
    response = requests.post(
        f"{VLLM}/v1/completions",
        json={"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["text"]


def test_the_stacks_endpoint_is_its_router_in_front_of_its_vllm(deployed):
    """The local stack's one endpoint: vllm-router (aic_router_enabled, on by default) with the local vLLM as its worker;
    every deploy, the no-op one too, prints it."""
    messages = [e["event_data"]["res"].get("msg") for e in deployed.events
                if e.get("event") == "runner_on_ok" and isinstance(e["event_data"].get("res", {}).get("msg"), str)]  # fmt: skip
    assert any(m.startswith(f"The job's endpoint: {ROUTER}/v1 (vllm-router on localhost") for m in messages), messages
    assert requests.get(f"{ROUTER}/list_workers", timeout=10).json()["urls"] == ["http://aic-vllm:8000"]
    before = metric(requests.get(f"{VLLM}/metrics", timeout=10).text, "vllm:request_success_total")
    response = requests.post(
        f"{ROUTER}/v1/completions",
        json={"model": MODEL, "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0},
        timeout=120,
    )
    assert response.status_code == 200 and response.json()["choices"][0]["text"], response.text
    # vLLM answered it (the router forwards, it does not serve).
    assert metric(requests.get(f"{VLLM}/metrics", timeout=10).text, "vllm:request_success_total") == before + 1


def test_prometheus_scrapes_vllm_and_lmcache(deployed):
    targets = requests.get(f"{PROMETHEUS}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
    health = {t["labels"]["job"]: t["health"] for t in targets}
    assert health.get("vllm") == "up", targets
    assert health.get("lmcache") == "up", targets
    # And the router (up once a scrape after it started came in).
    deadline = time.monotonic() + 60
    while health.get("router") != "up" and time.monotonic() < deadline:
        time.sleep(2)
        targets = requests.get(f"{PROMETHEUS}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        health = {t["labels"]["job"]: t["health"] for t in targets}
    assert health.get("router") == "up", targets


def test_lmcache_serves_its_metrics_on_the_scraped_port(deployed):
    text = requests.get(f"{LMCACHE}/metrics", timeout=10).text
    assert any(f.name.startswith("lmcache_mp_") for f in text_string_to_metric_families(text))


def test_kv_comes_back_from_lmcache_after_restarting_only_vllm(deployed):
    rng = random.Random(time.time_ns())
    words = ["alpha", "bravo", "zulu", "kilo", "x9", "q7", "fox", "dog", "KV", "cache"]
    # ~190 tokens with this tokenizer: more than one 128-token chunk, inside the 256-token context.
    prompt = " ".join(rng.choice(words) for _dummy in range(64))
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0}
    first = requests.post(f"{VLLM}/v1/completions", json=body, timeout=60)
    assert first.status_code == 200, first.text
    assert first.json()["usage"]["prompt_tokens"] >= 128

    client = docker.from_env()
    lmcache_started = client.containers.get("aic-lmcache").attrs["State"]["StartedAt"]
    client.containers.get("aic-vllm").restart(timeout=30)
    wait_healthy(f"{VLLM}/health")
    assert client.containers.get("aic-lmcache").attrs["State"]["StartedAt"] == lmcache_started

    before = metric(requests.get(f"{VLLM}/metrics", timeout=10).text, "vllm:external_prefix_cache_hits_total")
    second = requests.post(f"{VLLM}/v1/completions", json=body, timeout=60)
    assert second.status_code == 200, second.text
    after = metric(requests.get(f"{VLLM}/metrics", timeout=10).text, "vllm:external_prefix_cache_hits_total")
    assert after - before > 0, f"no external prefix-cache hits after restarting vLLM ({before} -> {after})"
