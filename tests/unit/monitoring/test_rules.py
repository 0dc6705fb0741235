"""The prometheus role's rules and scrape config, checked by the real promtool (Debian's prometheus package).

The rules file is a Jinja template (the slab-disk alert names the slab directory's filesystem); it is rendered
here the way the role renders it, then checked with ``promtool check rules`` and unit-tested with
``promtool test rules``. prometheus.yml comes from the same plan values through the ``prometheus_config`` filter.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import jinja2
import pytest
import yaml

from ansible_collections.aic.stack.plugins.filter.stack import prometheus_config
from ansible_collections.aic.stack.plugins.module_utils.cluster_monitoring import label_matcher
from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan

HERE = pathlib.Path(__file__).parent
REPO = HERE.parents[2]
TEMPLATE = REPO / "roles" / "prometheus" / "templates" / "aic-rules.yml.j2"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")


def render_rules(slab_dir="/var/lib/aic/slab/nvme/lmcache", mountpoint="/var/lib/aic", ratio=0.1):
    """The rules as roles/prometheus/tasks/configure.yml renders them; ``mountpoint`` may list every node's."""
    mountpoints = [mountpoint] if isinstance(mountpoint, str) else list(mountpoint)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(TEMPLATE.read_text()).render(
        _prometheus_slab_dir=slab_dir,
        _prometheus_slab_mountpoint=", ".join(mountpoints),
        _prometheus_slab_matcher=label_matcher(mountpoints, "mountpoint"),
        prometheus_slab_free_ratio_alert=ratio,
    )


def promtool(*args, cwd=None):
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def rules_file(tmp_path):
    path = tmp_path / "aic.yml"
    path.write_text(render_rules())
    return path


def all_rules(text):
    return [rule for group in yaml.safe_load(text)["groups"] for rule in group["rules"]]


def test_rules_have_the_recording_rules_and_the_eight_alerts():
    rules = all_rules(render_rules())
    alerts = {rule["alert"] for rule in rules if "alert" in rule}
    assert alerts == {
        "AicTargetDown",
        "AicVllmNoSuccessfulRequests",
        "AicVllmHung",
        "AicLmcacheL2ReadsStuckAtZero",
        "AicLmcacheL2StoresFailing",
        "AicSlabDiskNearlyFull",
        "AicRouterWorkerUnhealthy",
        "AicRouterRequestsFailing",
    }
    records = [rule["record"] for rule in rules if "record" in rule]
    assert "aic:vllm:kv_cache_usage_with_blocks" in records
    assert all(record.startswith("aic:") for record in records)


def test_slab_alert_watches_the_slab_filesystem():
    rules = {r.get("alert"): r for r in all_rules(render_rules("/mnt/nvme/aic/lmcache", "/mnt/nvme", 0.05))}
    expr = rules["AicSlabDiskNearlyFull"]["expr"]
    assert 'mountpoint="/mnt/nvme"' in expr
    assert "< 0.05" in expr
    assert "/mnt/nvme/aic/lmcache" in rules["AicSlabDiskNearlyFull"]["annotations"]["description"]


def test_slab_alert_watches_every_nodes_slab_filesystem():
    rules = {r.get("alert"): r for r in all_rules(render_rules("/mnt/nvme/aic/lmcache", ["/mnt/nvme", "/"], 0.05))}
    expr = rules["AicSlabDiskNearlyFull"]["expr"]
    assert 'mountpoint=~"/mnt/nvme|/"' in expr
    assert label_matcher(["/mnt/a.b", "/"], "mountpoint") == 'mountpoint=~"/mnt/a\\\\.b|/"'


def test_every_aggregation_keeps_the_node_label():
    """One Prometheus scrapes the job: a sum or a join per instance must keep ``node`` (two nodes can have the same
    instance address, e.g. aic-lmcache:8080 on each node's own bridge)."""
    import re

    for rule in all_rules(render_rules()):
        for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", rule["expr"]):
            labels = {label.strip() for label in clause.split(",")}
            if labels & {"instance", "job"}:
                assert "node" in labels, f"{rule.get('record') or rule.get('alert')}: {clause!r} drops node"
    alerts = {r["alert"]: r for r in all_rules(render_rules()) if "alert" in r}
    for name, alert in alerts.items():
        assert "$labels.node" in alert["annotations"]["summary"], name


@needs_promtool
def test_promtool_check_rules(rules_file):
    result = promtool("check", "rules", str(rules_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
@pytest.mark.parametrize(
    "test_file",
    [
        "l2_reads_stuck_test.yml",
        "cluster_rules_test.yml",
        "vllm_hung_test.yml",
        "l2_stores_failing_test.yml",
        "router_alerts_test.yml",
    ],
)
def test_promtool_unit_tests_the_rules(tmp_path, rules_file, test_file):
    """The L2-reads-stuck, vLLM-hung and L2-stores-failing alerts, and the rules over two nodes of one job (node and
    gpu labels kept)."""
    shutil.copy(HERE / test_file, tmp_path / test_file)
    result = promtool("test", "rules", test_file, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_promtool_rejects_a_wrong_expectation(tmp_path, rules_file):
    """The promtool test above is not vacuous: flipping an expectation fails."""
    doc = yaml.safe_load((HERE / "l2_reads_stuck_test.yml").read_text())
    doc["tests"][2]["alert_rule_test"][0]["exp_alerts"] = doc["tests"][1]["alert_rule_test"][0]["exp_alerts"]
    (tmp_path / "broken_test.yml").write_text(yaml.safe_dump(doc))
    result = promtool("test", "rules", "broken_test.yml", cwd=tmp_path)
    assert result.returncode != 0


def scrape_config(plan, running):
    exporters = [e for e in plan["monitoring"]["exporters"] if e["name"] in running]
    jobs = plan["prometheus"]["jobs"] + plan["monitoring"]["jobs"] + exporters
    return prometheus_config(
        jobs, plan["prometheus"]["scrape_interval"], labels={"stack": plan["stack_name"]}, rule_files=["rules/*.yml"]
    )


@needs_promtool
@pytest.mark.parametrize(
    "inputs, running",
    [
        ({}, ["node_exporter"]),
        ({"aic_lmcache_l2_backend": "nixl_posix", "aic_lmcache_posix_slot_size": 131072}, []),
        (
            {"aic_flavour": "rocm", "aic_gpus": "2", "aic_vllm_model": "org/m"},
            ["node_exporter", "amd_metrics_exporter"],
        ),
    ],
    ids=["cpu", "cpu-nixl-prometheus-only", "rocm"],
)
def test_promtool_check_config(tmp_path, inputs, running):
    plan, _dummy = build_plan(inputs)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "aic.yml").write_text(render_rules())
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(scrape_config(plan, running)))
    result = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_scrape_targets_come_from_the_plan_ports():
    plan, _dummy = build_plan(
        {
            "aic_stack_name": "lab",
            "aic_flavour": "rocm",
            "aic_gpus": "0",
            "aic_vllm_model": "org/m",
            "aic_lmcache_l2_backend": "nixl_posix",
            "aic_vllm_port": 18000,
            "aic_lmcache_http_port": 18080,
            "aic_nixl_telemetry_port": 19191,
            "aic_node_exporter_port": 19100,
            "aic_amd_metrics_exporter_port": 15050,
        }
    )
    config = scrape_config(plan, ["node_exporter", "amd_metrics_exporter"])
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    assert targets["vllm"] == ["lab-vllm:18000"]
    assert targets["lmcache"] == ["lab-lmcache:18080"]
    assert targets["nixl"] == ["lab-lmcache:19191"]
    assert targets["node_exporter"] == ["lab-node-exporter:19100"]
    assert targets["amd_metrics_exporter"] == ["lab-amd-metrics-exporter:15050"]
    assert config["rule_files"] == ["rules/*.yml"]


def test_only_running_exporters_are_scraped():
    plan, _dummy = build_plan({})
    jobs = {job["job_name"] for job in scrape_config(plan, [])["scrape_configs"]}
    assert jobs == {"prometheus", "vllm", "lmcache"}


def test_duplicate_jobs_are_refused():
    with pytest.raises(ValueError, match="duplicate scrape job names: vllm"):
        prometheus_config([{"job": "vllm", "targets": ["a:1"]}, {"job": "vllm", "targets": ["b:1"]}])


def test_label_groups_become_one_static_config_each():
    config = prometheus_config(
        [
            {"job": "prometheus", "targets": ["localhost:9090"]},
            {"job": "lmcache", "targets": ["aic-lmcache:8080"], "labels": {"node": "n1"}},
            {
                "job": "vllm",
                "groups": [
                    {"targets": ["aic-vllm:8000"], "labels": {"node": "n1", "gpu": "0"}},
                    {"targets": ["10.0.0.2:8000", "10.0.0.2:8001"], "labels": {"node": "n2", "gpu": 3}},
                    {"targets": ["10.0.0.3:8000"], "labels": {"node": "n3", "gpu": None}},
                ],
            },
        ]
    )
    jobs = {job["job_name"]: job["static_configs"] for job in config["scrape_configs"]}
    assert jobs["prometheus"] == [{"targets": ["localhost:9090"]}]
    assert jobs["lmcache"] == [{"targets": ["aic-lmcache:8080"], "labels": {"node": "n1"}}]
    assert jobs["vllm"] == [
        {"targets": ["aic-vllm:8000"], "labels": {"node": "n1", "gpu": "0"}},
        {"targets": ["10.0.0.2:8000", "10.0.0.2:8001"], "labels": {"node": "n2", "gpu": "3"}},
        {"targets": ["10.0.0.3:8000"], "labels": {"node": "n3", "gpu": ""}},
    ]


@pytest.mark.parametrize("name", ["__address__", "gpu-id", "0node", "node label"])
def test_invalid_target_label_names_are_refused(name):
    with pytest.raises(ValueError, match=f"job vllm: {name!r} is not a valid target label name"):
        prometheus_config([{"job": "vllm", "groups": [{"targets": ["a:1"], "labels": {name: "x"}}]}])
