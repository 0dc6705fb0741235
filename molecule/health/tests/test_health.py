"""From the node (the instance shares the host's network), the services the health role checked really serve.

Behaviour through the services (a completion, metrics, Prometheus targets up), not files and sockets.
"""

from __future__ import annotations

import json

import pytest

VLLM = "http://127.0.0.1:38000"
LMCACHE = "http://127.0.0.1:38080"
PROMETHEUS = "http://127.0.0.1:39390"


def get_json(host, url, data=None):
    cmd = "curl -sf --max-time 60 %s"
    args = [url]
    if data is not None:
        cmd = "curl -sf --max-time 60 -H 'Content-Type: application/json' -d %s %s"
        args = [json.dumps(data), url]
    return json.loads(host.check_output(cmd, *args))


def test_vllm_lists_the_model_and_completes(host):
    models = [m["id"] for m in get_json(host, f"{VLLM}/v1/models")["data"]]
    assert "tiny-llama" in models
    completion = get_json(
        host, f"{VLLM}/v1/completions", {"model": "tiny-llama", "prompt": "The capital of France is", "max_tokens": 4}
    )
    assert completion["choices"][0]["text"]
    assert completion["usage"]["completion_tokens"] == 4


def test_lmcache_healthcheck_and_metrics(host):
    assert host.run("curl -sf -o /dev/null %s/healthcheck", LMCACHE).rc == 0
    metrics = host.check_output("curl -sf %s/metrics", LMCACHE)
    assert any(line.startswith("lmcache_mp_") for line in metrics.splitlines())
    # /health is not LMCache's health endpoint (404): the role must not rely on it.
    assert host.run("curl -sf -o /dev/null %s/health", LMCACHE).rc != 0


@pytest.mark.parametrize("job", ["prometheus", "vllm", "lmcache", "nixl", "node_exporter"])
def test_prometheus_has_every_plan_job_up(host, job):
    targets = get_json(host, f"{PROMETHEUS}/api/v1/targets")["data"]["activeTargets"]
    health = {t["labels"]["job"]: t["health"] for t in targets}
    assert health.get(job) == "up", targets
