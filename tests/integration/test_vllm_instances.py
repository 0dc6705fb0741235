"""One vLLM container per GPU, proven on CPU: several vLLM instances share one LMCache server.

On the local stack ``aic_vllm_instances`` stands in for the GPU count (on rocm there is one instance per GPU of
the allocation). The module also covers what a change of the stack does to running containers: fewer instances
remove the extra container; teardown with vLLM in LMCache's PID namespace stops the namespace's processes before
removing containers. (What an LMCache setting does to a running stack is in test_l2_zero_causes.)
"""

from __future__ import annotations

import pathlib
import time

import docker
import pytest
import requests

from .conftest import changed_tasks, failures, run_playbook
from .test_l2_tier import prompt
from .test_local_stack import MODEL, PROMETHEUS, metric, wait_healthy

pytestmark = pytest.mark.integration

VLLM0 = "http://127.0.0.1:8000"
VLLM1 = "http://127.0.0.1:8001"
TWO = {"aic_vllm_instances": 2, "aic_vllm_pid_mode": "lmcache"}


def state(name):
    return docker.from_env().containers.get(name).attrs["State"]


def complete(base, prompt, max_tokens=4):
    response = requests.post(
        f"{base}/v1/completions",
        json={"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["text"]


def vllm_metric(base, name):
    return metric(requests.get(f"{base}/metrics", timeout=10).text, name)


# This module changes whatever stack the one before it left (two_instances deploys over it) and ends with a teardown.


@pytest.fixture(scope="module")
def two_instances(session_tmp):
    runner = run_playbook("deploy.yml", session_tmp, extravars=TWO)
    assert runner.status == "successful", failures(runner)
    return runner


def test_each_instance_runs_in_its_own_container_on_its_own_port(two_instances):
    client = docker.from_env()
    for name, port in (("aic-vllm", 8000), ("aic-vllm-1", 8001)):
        container = client.containers.get(name)
        assert container.status == "running"
        assert container.labels["ai.aic.vllm-instance"] == name
        assert container.attrs["HostConfig"]["PortBindings"] == {
            f"{port}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]
        }
        lmcache_id = client.containers.get("aic-lmcache").id
        assert container.attrs["HostConfig"]["IpcMode"] == f"container:{lmcache_id}"
        assert container.attrs["HostConfig"]["PidMode"] == f"container:{lmcache_id}"
    for base in (VLLM0, VLLM1):
        models = requests.get(f"{base}/v1/models", timeout=10).json()["data"]
        assert [m["id"] for m in models] == [MODEL]


def test_prometheus_scrapes_every_instance(two_instances):
    deadline = time.monotonic() + 60
    while True:
        targets = requests.get(f"{PROMETHEUS}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        vllm = sorted((t["labels"]["instance"], t["health"]) for t in targets if t["labels"]["job"] == "vllm")
        if vllm == [("aic-vllm-1:8001", "up"), ("aic-vllm:8000", "up")] or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert vllm == [("aic-vllm-1:8001", "up"), ("aic-vllm:8000", "up")]


def test_kv_stored_through_one_instance_is_an_external_hit_in_the_other(two_instances):
    text = prompt(time.time_ns())  # ~190 tokens: one full 128-token chunk, never seen before
    complete(VLLM0, text, max_tokens=1)
    time.sleep(3)  # LMCache stores the chunk asynchronously (milliseconds for the tiny model)
    hits_before = vllm_metric(VLLM1, "vllm:external_prefix_cache_hits_total")
    complete(VLLM1, text, max_tokens=1)
    assert vllm_metric(VLLM1, "vllm:external_prefix_cache_hits_total") - hits_before > 0


def test_rerun_with_two_instances_changes_nothing(two_instances, session_tmp):
    # Every role again (not the no-op fast path): the roles converge with two instances.
    runner = run_playbook("deploy.yml", session_tmp, extravars={**TWO, "aic_deploy_fast_path": False})
    assert runner.status == "successful", failures(runner)
    assert changed_tasks(runner) == []


def test_fewer_instances_remove_the_extra_container(two_instances, session_tmp):
    started = state("aic-vllm")["StartedAt"]
    runner = run_playbook("deploy.yml", session_tmp, extravars={**TWO, "aic_vllm_instances": 1})
    assert runner.status == "successful", failures(runner)
    # This stack's vLLMs (molecule's scenarios may run theirs on the same engine meanwhile).
    mine = {"label": ["ai.aic.service=vllm", "ai.aic.stack=aic"]}
    names = [c.name for c in docker.from_env().containers.list(all=True, filters=mine)]
    assert names == ["aic-vllm"]
    assert state("aic-vllm")["StartedAt"] == started, "instance 0 was restarted"
    wait_healthy(f"{VLLM0}/health")


def processes_of(container_ids):
    """Host pids of the processes still in one of these containers' cgroups (also once the containers are gone)."""
    out = []
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cgroup = (proc / "cgroup").read_text()
            except OSError:
                continue
            if any(cid in cgroup for cid in container_ids):
                out.append(int(proc.name))
    return out


def test_teardown_stops_the_shared_pid_namespace_before_removing(two_instances, session_tmp):
    ids = [c.id for c in docker.from_env().containers.list(all=True, filters={"label": "ai.aic.stack=aic"})]
    assert processes_of(ids), "no process found in the stack's containers before the teardown"
    runner = run_playbook("playbooks/teardown.yml", session_tmp, extravars={**TWO, "aic_vllm_instances": 1})
    assert runner.status == "successful", failures(runner)
    reports = [
        e["event_data"]["res"]["msg"]
        for e in runner.events
        if e.get("event") == "runner_on_ok"
        and e["event_data"].get("task") == "Report the processes stopped in the shared PID namespace"
    ]
    assert len(reports) == 1
    assert any("vllm.entrypoints.openai.api_server" in cmd for cmd in reports[0]["signalled"]), reports
    # LMCache's own processes (its init and its server under it) are not vLLM's to stop.
    assert not any("lmcache" in cmd and "vllm" not in cmd for cmd in reports[0]["signalled"]), reports
    client = docker.from_env()
    assert client.containers.list(all=True, filters={"label": "ai.aic.stack=aic"}) == []
    # Only this stack's processes (other engines on the machine, e.g. a rehearsal cluster's nodes, run vLLMs too).
    assert processes_of(ids) == [], "processes of the stack's containers survived the teardown"
