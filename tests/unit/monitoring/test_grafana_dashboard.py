"""Lint of the provisioned Grafana dashboard (roles/grafana/files/dashboards/aic-stack.json).

1. Structure: unique panel ids, panels inside the 24-column grid and not overlapping, every panel titled and with a
   unit, every target on the ``${datasource}`` variable.
2. PromQL: every expression (Grafana's variables replaced) is sent to a real Prometheus (Debian's
   ``/usr/bin/prometheus`` on a free localhost port, empty temporary TSDB) and must be accepted; a broken expression
   must be rejected, which proves the check can fail.
3. Metric names: every metric an expression names must be in known_metrics.txt, the names captured from the running
   local stack (vLLM and LMCache /metrics), Debian's node-exporter and FACTS.md (gpu_*, agent_*): a typo fails.

The provisioning files (dashboard provider, datasource template) must load and point where the Grafana task mounts
the dashboards and where the stack's Prometheus listens.
"""

from __future__ import annotations

import itertools
import json
import pathlib
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import jinja2
import pytest
import yaml

from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan

HERE = pathlib.Path(__file__).parent
REPO = HERE.parents[2]
ROLE = REPO / "roles" / "grafana"
DASHBOARD = ROLE / "files" / "dashboards" / "aic-stack.json"
PROVIDER = ROLE / "files" / "provisioning" / "dashboards" / "aic.yml"
DATASOURCE_TEMPLATE = ROLE / "templates" / "grafana-datasource.yml.j2"
GRAFANA_TASKS = ROLE / "tasks" / "main.yml"
GRAFANA_CONFIGURE = ROLE / "tasks" / "configure.yml"
GRAFANA_RUN = ROLE / "tasks" / "run.yml"
ROLE_VARS = ROLE / "vars" / "main.yml"
KNOWN_METRICS = HERE / "known_metrics.txt"
PROMETHEUS = shutil.which("prometheus") or (
    "/usr/bin/prometheus" if pathlib.Path("/usr/bin/prometheus").exists() else None
)
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus (Debian package prometheus) is not installed"
)

GRID_COLUMNS = 24
DATASOURCE_VARIABLE = "${datasource}"
# Grafana's variables, replaced by values Prometheus accepts where they appear (range, regex matcher).
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "${mountpoint}": "/",
    "$mountpoint": "/",
    "${node}": ".*",
    "$node": ".*",
}
PROMQL_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}


def load_dashboard():
    return json.loads(DASHBOARD.read_text())


DASH = load_dashboard()
PANELS = DASH["panels"]
CONTENT_PANELS = [p for p in PANELS if p["type"] != "row"]
EXPRESSIONS = [(p["title"], t["refId"], t["expr"]) for p in CONTENT_PANELS for t in p["targets"]]


def variable_queries():
    """The PromQL selector inside each query variable's label_values(selector, label)."""
    out = []
    for var in DASH["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        match = re.fullmatch(r"label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)", query.strip())
        assert match, f"variable {var['name']}: {query!r} is not label_values(selector, label)"
        out.append((f"variable {var['name']}", "query", match.group(1)))
    return out


ALL_EXPRESSIONS = EXPRESSIONS + variable_queries()


def substitute(expr):
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unreplaced Grafana variable in {expr!r}"
    return expr


def metric_names(expr):
    """Metric names an expression selects: identifiers left once strings, label matchers, ranges, grouping label
    lists, function calls, keywords and numbers are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"'(?:[^'\\]|\\.)*'", "''", text)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        name = match.group(0)
        start = match.start()
        if start and (text[start - 1].isdigit() or text[start - 1] == "."):
            continue  # the exponent or suffix of a number (1e3)
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or aggregation
        if name.lower() in PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names


def known_metrics():
    lines = (line.split("#", 1)[0].strip() for line in KNOWN_METRICS.read_text().splitlines())
    return {line for line in lines if line}


# -- 1. structure --------------------------------------------------------------------------------------------


def test_dashboard_identity():
    assert DASH["uid"] == "aic-stack"
    assert DASH["title"]
    assert isinstance(DASH["schemaVersion"], int)
    assert CONTENT_PANELS, "the dashboard has no panels"


def test_panel_ids_are_unique():
    ids = [p["id"] for p in PANELS]
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("panel", PANELS, ids=lambda p: p["title"])
def test_panel_fits_the_grid(panel):
    pos = panel["gridPos"]
    assert set(pos) >= {"x", "y", "w", "h"}
    assert pos["x"] >= 0 and pos["y"] >= 0 and pos["w"] > 0 and pos["h"] > 0
    assert pos["x"] + pos["w"] <= GRID_COLUMNS, f"{panel['title']!r} ends at column {pos['x'] + pos['w']}"


def cells(panel):
    pos = panel["gridPos"]
    return {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}


def test_panels_do_not_overlap():
    for a, b in itertools.combinations(PANELS, 2):
        assert not cells(a) & cells(b), f"{a['title']!r} overlaps {b['title']!r}"


@pytest.mark.parametrize("panel", CONTENT_PANELS, ids=lambda p: p["title"])
def test_panel_has_title_unit_and_templated_datasource(panel):
    assert panel["title"].strip()
    assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']!r} has no unit"
    assert panel["datasource"]["uid"] == DATASOURCE_VARIABLE
    assert panel["targets"], f"{panel['title']!r} has no query"
    ref_ids = [t["refId"] for t in panel["targets"]]
    assert len(ref_ids) == len(set(ref_ids))
    for target in panel["targets"]:
        assert target["datasource"] == {"type": "prometheus", "uid": DATASOURCE_VARIABLE}, target["refId"]
        assert target["expr"].strip()


def test_row_panels_carry_no_queries():
    for row in (p for p in PANELS if p["type"] == "row"):
        assert row["title"] and not row.get("targets") and not row["collapsed"]


def test_datasource_variable_is_a_prometheus_datasource_defaulting_to_the_provisioned_one():
    variables = {v["name"]: v for v in DASH["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource"
    assert ds["query"] == "prometheus"
    assert ds["current"]["value"] == render_datasource()["datasources"][0]["uid"]
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"]["uid"] == DATASOURCE_VARIABLE


def test_key_panels_are_present():
    exprs = "\n".join(e for _dummy, _dummy, e in EXPRESSIONS)
    for needle in (
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:prefix_cache_hits_total",
        "vllm:external_prefix_cache_hits_total",
        "vllm:external_prefix_cache_queries_total",
        "lmcache_mp_l1_usage_ratio",
        "lmcache_mp_l1_memory_usage_bytes",
        "lmcache_mp_lookup_hit_l1_tokens_total",
        "lmcache_mp_lookup_hit_l2_tokens_total",
        "lmcache_mp_lookup_requested_tokens_total",
        "lmcache_mp_l2_store_submitted_objects_chunks_total",
        "lmcache_mp_l2_store_completed_objects_chunks_total",
        "agent_rx_bytes_total",
        "agent_tx_bytes_total",
        "node_cpu_seconds_total",
        "node_memory_MemAvailable_bytes",
        "node_filesystem_avail_bytes",
        "gpu_gfx_activity",
    ):
        assert needle in exprs, needle
    assert exprs.count("histogram_quantile(0.95") >= 2


def test_the_cluster_view_filters_by_node_and_keeps_node_in_every_sum():
    """One Prometheus scrapes every node: the node variable selects nodes, and per-instance sums stay per node."""
    variables = {v["name"]: v for v in DASH["templating"]["list"]}
    node = variables["node"]
    assert node["type"] == "query" and node["multi"] and node["includeAll"] and node["allValue"] == ".*"
    assert "node" in node["query"]["query"]
    assert 'node=~"$node"' in variables["mountpoint"]["query"]["query"]
    for title, ref_id, expr in EXPRESSIONS:
        selectors = re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*\{([^}]*)\}", expr)
        assert selectors, f"{title} {ref_id}: no selector"
        for selector in selectors:
            assert 'node=~"$node"' in selector, f"{title} {ref_id}: {selector!r} ignores the node variable"
        for clause in re.findall(r"\b(?:sum|avg|max|min) by \(([^)]*)\)", expr):
            assert "node" in [label.strip() for label in clause.split(",")], f"{title} {ref_id}: by ({clause})"
    for panel in CONTENT_PANELS:
        if panel["type"] == "timeseries":
            for target in panel["targets"]:
                assert "{{node}}" in target["legendFormat"], f"{panel['title']} {target['refId']}"


# -- 2. every expression parses in a real Prometheus -------------------------------------------------------------


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus on a free localhost port with an empty TSDB; yields its base URL."""
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed")
    tmp = tmp_path_factory.mktemp("prometheus")
    config = tmp / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = free_port()
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited with {proc.returncode}: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                pytest.fail("prometheus did not become ready in 60s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def query(url, expr):
    """(HTTP status, JSON answer) of an instant query."""
    data = urllib.parse.urlencode({"query": expr}).encode()
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@needs_prometheus
@pytest.mark.parametrize("title, ref_id, expr", ALL_EXPRESSIONS, ids=[f"{t}/{r}" for t, r, _dummy in ALL_EXPRESSIONS])
def test_expression_is_accepted_by_prometheus(prometheus, title, ref_id, expr):
    status, answer = query(prometheus, substitute(expr))
    assert (status, answer.get("status")) == (200, "success"), f"{title} {ref_id}: {answer.get('error')}"


@needs_prometheus
@pytest.mark.parametrize(
    "expr",
    [
        "sum(rate(vllm:request_success_total[1m])",  # unbalanced parenthesis
        "rate(vllm:request_success_total)",  # rate of an instant vector
        "histogram_quantile(0.95, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[$__rate_interval])))",
    ],
    ids=["syntax", "type", "unreplaced-variable"],
)
def test_a_broken_expression_is_rejected(prometheus, expr):
    status, answer = query(prometheus, expr)
    assert status == 400 and answer.get("status") == "error", answer


# -- 3. metric names exist ----------------------------------------------------------------------------------------


def test_metric_name_extraction():
    assert metric_names(
        'histogram_quantile(0.95, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket{job="vllm"}[1m])))'
    ) == {"vllm:e2e_request_latency_seconds_bucket"}
    assert metric_names(
        'sum(rate(a_total{x=~"b|c"}[5m])) / on (instance) group_left (d) max without (e) (f_bytes) or g 1e3'
    ) == {"a_total", "f_bytes", "g"}
    assert metric_names("1 - avg by (instance) (rate(node_cpu_seconds_total[1m]))") == {"node_cpu_seconds_total"}


def test_known_metrics_file_lists_valid_names():
    names = known_metrics()
    assert len(names) > 100
    assert all(re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", n) for n in names)


@pytest.mark.parametrize("title, ref_id, expr", ALL_EXPRESSIONS, ids=[f"{t}/{r}" for t, r, _dummy in ALL_EXPRESSIONS])
def test_every_metric_name_is_known(title, ref_id, expr):
    names = metric_names(substitute(expr))
    assert names, f"{title} {ref_id}: no metric name found in {expr!r}"
    unknown = sorted(names - known_metrics())
    assert not unknown, f"{title} {ref_id}: unknown metric name(s) {unknown} (typo? see known_metrics.txt)"


def test_a_misspelt_metric_name_is_caught():
    assert metric_names("sum(rate(vllm:external_prefix_cache_hit_total[1m]))") - known_metrics() == {
        "vllm:external_prefix_cache_hit_total"
    }


# -- provisioning -------------------------------------------------------------------------------------------------


def render_datasource(inputs=None):
    plan, _dummy = build_plan(inputs or {})
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return yaml.safe_load(env.from_string(DATASOURCE_TEMPLATE.read_text()).render(aic_plan=plan))


def grafana_mount_targets():
    """Container paths the Grafana task mounts, resolved through the role's vars."""
    role_vars = yaml.safe_load(ROLE_VARS.read_text())
    run = next(t for t in yaml.safe_load(GRAFANA_RUN.read_text()) if "community.docker.docker_container" in t)
    mounts = run["vars"]["_grafana_mounts"]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    return {env.from_string(m["target"]).render(**role_vars): m for m in mounts}


def test_dashboard_provider_points_at_the_mounted_dashboards():
    provider = yaml.safe_load(PROVIDER.read_text())
    assert provider["apiVersion"] == 1
    (prov,) = provider["providers"]
    assert prov["type"] == "file"
    mounts = grafana_mount_targets()
    path = prov["options"]["path"]
    assert path in mounts and mounts[path]["read_only"] is True
    assert mounts[path]["source"].endswith("/dashboards")
    provisioning = yaml.safe_load(ROLE_VARS.read_text())["_grafana_provisioning"]
    assert mounts[provisioning]["read_only"] is True


def test_datasource_points_at_the_stacks_prometheus():
    ds = render_datasource({"aic_stack_name": "lab", "aic_prometheus_scrape_interval": "15s"})
    assert ds["apiVersion"] == 1
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus"
    assert source["uid"] == "prometheus"
    assert source["url"] == "http://lab-prometheus:9090"
    assert source["jsonData"]["timeInterval"] == "15s"


def test_grafana_task_installs_the_files_the_provider_and_the_test_read():
    configure = yaml.safe_load(GRAFANA_CONFIGURE.read_text())
    sources = {t["ansible.builtin.copy"]["src"] for t in configure if "ansible.builtin.copy" in t}
    assert sources == {"provisioning/dashboards/aic.yml", "dashboards/aic-stack.json"}
    for src in sources:
        assert (ROLE / "files" / src).is_file()
    templates = {t["ansible.builtin.template"]["src"] for t in configure if "ansible.builtin.template" in t}
    assert templates == {"grafana-datasource.yml.j2"}
    # One rescue covers every step (configure, install, run): a failing Grafana leaves Prometheus running.
    (main,) = yaml.safe_load(GRAFANA_TASKS.read_text())
    steps = [t.get("ansible.builtin.import_tasks") for t in main["block"]]
    assert steps == ["configure.yml", "install.yml", "run.yml"]
    assert main["rescue"], "a failing Grafana must be rescued (Prometheus keeps running)"
    fail = next(t for t in main["rescue"] if "ansible.builtin.fail" in t)
    assert fail["when"] == "grafana_required | bool"
