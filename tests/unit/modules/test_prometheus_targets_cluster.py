"""aic.stack.prometheus_targets with expected_targets: every target of every node is up with its node label.

Against a fake /api/v1/targets served by a real local HTTP server (the targets as the job's one Prometheus lists
them: node and gpu labels from aic.stack.cluster_scrape_jobs). The real Prometheus binary scraping two loopback
"nodes" is in tests/unit/monitoring/test_cluster_prometheus.py.
"""

from __future__ import annotations

import json

from ansible_collections.aic.stack.plugins.modules import prometheus_targets

REFUSED = 'Get "http://10.0.0.12:8001/metrics": dial tcp 10.0.0.12:8001: connect: connection refused'


def target(job, address, node, gpu=None, health="up", error=""):
    """One entry of ``data.activeTargets``; an empty label (gpu on cpu) is absent, as Prometheus lists it."""
    labels = {"instance": address, "job": job, "node": node}
    if gpu:
        labels["gpu"] = gpu
    url = f"http://{address}/metrics"
    return {
        "discoveredLabels": {"__address__": address, "job": job, "node": node},
        "labels": labels,
        "scrapePool": job,
        "scrapeUrl": url,
        "globalUrl": url,
        "lastError": error,
        "lastScrape": "2026-12-01T10:00:00Z" if health != "unknown" else "0001-01-01T00:00:00Z",
        "lastScrapeDuration": 0.002,
        "health": health,
        "scrapeInterval": "15s",
        "scrapeTimeout": "10s",
    }


def doc(*targets):
    return {"status": "success", "data": {"activeTargets": list(targets), "droppedTargets": []}}


def cluster(n2_vllm1="up", error=""):
    return doc(
        target("prometheus", "localhost:9090", "n1"),
        target("vllm", "aic-vllm:8000", "n1", "0"),
        target("lmcache", "aic-lmcache:8080", "n1"),
        target("vllm", "10.0.0.12:8000", "n2", "4"),
        target("vllm", "10.0.0.12:8001", "n2", "5", n2_vllm1, error),
        target("lmcache", "10.0.0.12:8080", "n2"),
        target("node_exporter", "10.0.0.12:9100", "n2"),
    )


EXPECTED = [
    {"job": "prometheus", "node": "n1"},
    {"job": "vllm", "node": "n1", "gpu": 0},
    {"job": "lmcache", "node": "n1"},
    {"job": "vllm", "node": "n2", "gpu": "4"},
    {"job": "vllm", "node": "n2", "gpu": "5"},
    {"job": "lmcache", "node": "n2"},
    {"job": "node_exporter", "node": "n2"},
]


def test_every_target_of_every_node_up(http_server, run_module):
    http_server.json_route("/api/v1/targets", cluster())
    result = run_module(prometheus_targets, {"url": http_server.url, "expected_targets": EXPECTED})
    assert result.rc == 0, result.get("msg")
    assert result["changed"] is False
    assert result["down_targets"] == []
    assert result["down_nodes"] == []
    assert [t["health"] for t in result["targets"]] == ["up"] * len(EXPECTED)
    # Values are compared as strings: gpu 0 (an int from YAML) is label "0".
    assert result["targets"][1] == {
        "labels": {"job": "vllm", "node": "n1", "gpu": "0"},
        "health": "up",
        "scrape_urls": ["http://aic-vllm:8000/metrics"],
        "last_error": "",
    }
    assert result["jobs"] == {} and result["down_jobs"] == []


def test_a_down_target_and_a_missing_node_are_named(http_server, run_module):
    http_server.json_route("/api/v1/targets", cluster("down", REFUSED))
    expected = EXPECTED + [{"job": "lmcache", "node": "n3"}, {"job": "vllm", "node": "n3", "gpu": "7"}]
    result = run_module(prometheus_targets, {"url": http_server.url, "expected_targets": expected, "wait_timeout": 1})
    assert result.failed and result.rc == 1
    assert result["msg"] == (
        f"Prometheus at {http_server.url}: 3 of 9 expected targets not up after 1s: "
        f"node 'n2' job 'vllm' gpu '5' is down (http://10.0.0.12:8001/metrics health=down lastError={REFUSED!r}); "
        "node 'n3' job 'lmcache': no target with these labels; "
        "node 'n3' job 'vllm' gpu '7': no target with these labels "
        "(nodes with a target not up: n2, n3)"
    )
    assert result["down_targets"] == [
        {"job": "vllm", "node": "n2", "gpu": "5"},
        {"job": "lmcache", "node": "n3"},
        {"job": "vllm", "node": "n3", "gpu": "7"},
    ]
    assert result["down_nodes"] == ["n2", "n3"]
    states = {json.dumps(t["labels"], sort_keys=True): t for t in result["targets"]}
    assert states['{"gpu": "5", "job": "vllm", "node": "n2"}']["last_error"] == REFUSED
    assert states['{"job": "lmcache", "node": "n3"}']["health"] == "missing"


def test_a_matcher_without_gpu_needs_every_instance_of_the_node(http_server, run_module):
    http_server.json_route("/api/v1/targets", cluster("down", REFUSED))
    result = run_module(
        prometheus_targets,
        {"url": http_server.url, "expected_targets": [{"job": "vllm", "node": "n2"}], "wait_timeout": 0},
    )
    assert result.failed
    assert result["targets"][0]["health"] == "down"
    assert result["targets"][0]["scrape_urls"] == [
        "http://10.0.0.12:8000/metrics",
        "http://10.0.0.12:8001/metrics",
    ]
    assert result["down_nodes"] == ["n2"]
    # One target up is not enough here (unlike expected_jobs), and the message lists only the one that is not.
    assert "http://10.0.0.12:8000/metrics" not in result["msg"]


def test_an_empty_gpu_matches_a_cpu_target_without_the_label(http_server, run_module):
    http_server.json_route("/api/v1/targets", doc(target("vllm", "aic-vllm:8000", "localhost")))
    ok = run_module(
        prometheus_targets,
        {"url": http_server.url, "expected_targets": [{"job": "vllm", "node": "localhost", "gpu": ""}]},
    )
    assert ok.rc == 0, ok.get("msg")
    wrong_node = run_module(
        prometheus_targets,
        {"url": http_server.url, "expected_targets": [{"job": "vllm", "node": "n1"}], "wait_timeout": 0},
    )
    assert wrong_node.failed
    assert "node 'n1' job 'vllm': no target with these labels" in wrong_node["msg"]


def test_a_target_without_its_node_label_does_not_count(http_server, run_module):
    unlabelled = target("lmcache", "10.0.0.12:8080", "n2")
    del unlabelled["labels"]["node"]
    http_server.json_route("/api/v1/targets", doc(unlabelled))
    result = run_module(
        prometheus_targets,
        {"url": http_server.url, "expected_targets": [{"job": "lmcache", "node": "n2"}], "wait_timeout": 0},
    )
    assert result.failed
    assert result["targets"][0]["health"] == "missing"


def test_targets_unknown_until_their_first_scrape(http_server, run_module):
    unknown = cluster("unknown")
    http_server.sequence_route("/api/v1/targets", [(200, json.dumps(unknown)), (200, json.dumps(cluster()))])
    result = run_module(prometheus_targets, {"url": http_server.url, "expected_targets": EXPECTED, "wait_timeout": 10})
    assert result.rc == 0, result.get("msg")
    assert len(http_server.calls("/api/v1/targets")) == 2


def test_unknown_until_the_deadline_is_reported_as_unknown(http_server, run_module):
    http_server.json_route("/api/v1/targets", cluster("unknown"))
    result = run_module(
        prometheus_targets,
        {"url": http_server.url, "expected_targets": [{"job": "vllm", "node": "n2"}], "wait_timeout": 0},
    )
    assert result.failed
    assert "node 'n2' job 'vllm' is unknown (http://10.0.0.12:8001/metrics health=unknown" in result["msg"]


def test_jobs_and_targets_together(http_server, run_module):
    http_server.json_route("/api/v1/targets", cluster("down", REFUSED))
    result = run_module(
        prometheus_targets,
        {
            "url": http_server.url,
            "expected_jobs": ["prometheus", "nixl"],
            "expected_targets": [{"job": "vllm", "node": "n2", "gpu": "5"}],
            "wait_timeout": 0,
        },
    )
    assert result.failed
    assert result["msg"] == (
        f"Prometheus at {http_server.url}: 1 of 2 expected jobs not up after 0s: job 'nixl': no target configured; "
        f"1 of 1 expected targets not up after 0s: node 'n2' job 'vllm' gpu '5' is down "
        f"(http://10.0.0.12:8001/metrics health=down lastError={REFUSED!r}) (nodes with a target not up: n2)"
    )
    assert result["down_jobs"] == ["nixl"]


def test_nothing_expected_is_an_error(http_server, run_module):
    result = run_module(prometheus_targets, {"url": http_server.url})
    assert result.failed
    assert result["msg"] == (
        f"Prometheus at {http_server.url}: expected_jobs or expected_targets must list at least one job or target"
    )
    assert http_server.calls("/api/v1/targets") == []


def test_documentation_examples_and_return_parse_and_document_expected_targets():
    import yaml

    doc = yaml.safe_load(prometheus_targets.DOCUMENTATION)
    assert set(doc["options"]) == {"url", "expected_jobs", "expected_targets", "wait_timeout", "request_timeout"}
    assert doc["options"]["expected_targets"]["elements"] == "dict"
    returned = yaml.safe_load(prometheus_targets.RETURN)
    assert {"targets", "down_targets", "down_nodes"} <= set(returned)
    examples = yaml.safe_load(prometheus_targets.EXAMPLES)
    assert any("expected_targets" in task.get("aic.stack.prometheus_targets", {}) for task in examples)
