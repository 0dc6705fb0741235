"""The vllm role on its own: vLLM answers completions on the scenario's port, inside the IPC namespace of the
LMCache that prepare started, and asks LMCache for every prompt (the multi-process connector is live)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import docker
import pytest
from prometheus_client.parser import text_string_to_metric_families

VLLM = "http://127.0.0.1:28000"


def call(path, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(VLLM + path, data=data, headers={"Content-Type": "application/json"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - a fixed local URL
        text = response.read().decode()
        return json.loads(text) if path.startswith("/v1/") else text


def counter(name):
    return sum(
        sample.value
        for family in text_string_to_metric_families(call("/metrics"))
        for sample in family.samples
        if sample.name == name
    )


@pytest.fixture(scope="module")
def healthy():
    """vLLM started by converge (the role does not wait; the health role does in a deploy): up to 5 minutes."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            call("/health", timeout=5)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(2)
    pytest.fail(f"{VLLM}/health did not answer within 300 s")


def test_a_completion_answers_with_text(healthy):
    model = call("/v1/models")["data"][0]["id"]
    out = call("/v1/completions", {"model": model, "prompt": "The capital of France is", "max_tokens": 4})
    assert out["choices"][0]["text"], out
    assert out["usage"]["completion_tokens"] >= 1


def test_vllm_asks_lmcache_for_every_prompt(healthy):
    model = call("/v1/models")["data"][0]["id"]
    before = counter("vllm:external_prefix_cache_queries_total")
    prompt = " ".join(["kilo", "zulu", "alpha", "fox"] * 16)  # ~190 tokens: one 128-token chunk, inside the context
    call("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 1})
    assert counter("vllm:external_prefix_cache_queries_total") > before


def test_it_runs_in_lmcaches_ipc_namespace_restarting_unless_stopped(healthy):
    client = docker.from_env()
    vllm, lmcache = client.containers.get("aicmolvllm-vllm"), client.containers.get("aicmolvllm-lmcache")
    host = vllm.attrs["HostConfig"]
    assert host["IpcMode"] == f"container:{lmcache.id}", host["IpcMode"]
    assert host["RestartPolicy"]["Name"] == "unless-stopped"
    assert vllm.attrs["Config"]["Labels"]["ai.aic.service"] == "vllm"
    assert host["PortBindings"] == {"28000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "28000"}]}
