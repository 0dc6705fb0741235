#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prometheus_targets
short_description: Check that Prometheus scrapes the expected jobs and targets successfully
version_added: 0.1.0
description:
  - Read-only check of a Prometheus server's scrape targets through C(GET /api/v1/targets).
  - Polls until every job in O(expected_jobs) has at least one active target whose health is
    C(up), and every entry of O(expected_targets) matches at least one active target and all of
    its matching targets are C(up), or until O(wait_timeout) expires.
  - On failure the message names the Prometheus URL and each expected job or target that is not
    up, with the scrape URL, health and last scrape error of its targets, or C(no target configured)
    (C(no target with these labels)) when nothing matches, and the nodes that have a target down.
author:
  - aic.stack developers (!UNKNOWN)
extends_documentation_fragment:
  - aic.stack.attributes
  - aic.stack.health
options:
  url:
    description:
      - Base URL of the Prometheus server.
    type: str
    required: true
    aliases: [base_url]
  expected_jobs:
    description:
      - Scrape job names (C(job_name) in C(scrape_configs)) that must have a healthy target.
      - A target belongs to a job when its scrape pool or its C(job) label equals the job name.
      - At least one of O(expected_jobs) and O(expected_targets) is required.
    type: list
    elements: str
    default: []
  expected_targets:
    description:
      - 'Label matchers of targets that must be up, for example C({job: vllm, node: node2, gpu: "3"})
        (aic.stack.cluster_expected_targets builds them for every node of the job).'
      - 'Each key is a target label name and each value must equal that label exactly; a label the
        target does not carry counts as the empty string, so C(gpu: "") matches a vLLM target on cpu.
        C(job) also matches the scrape pool.'
      - 'An entry is up when at least one active target matches it and every matching target is
        C(up); so C({job: vllm, node: node2}) requires every vLLM instance of node2.'
      - At least one of O(expected_jobs) and O(expected_targets) is required.
    type: list
    elements: dict
    default: []
  wait_timeout:
    description:
      - Seconds to keep polling C(/api/v1/targets) (every second) until all expected jobs are up.
      - Prometheus marks new targets C(unknown) until their first scrape, so allow at least a
        couple of scrape intervals.
      - V(0) checks once without waiting.
    type: int
    default: 60
  request_timeout:
    description:
      - Timeout in seconds for each request to the Prometheus API.
    type: int
    default: 10
notes:
  - Only active targets are considered; targets dropped by relabelling do not count.
seealso:
  - module: aic.stack.vllm_health
  - module: aic.stack.lmcache_health
  - name: Prometheus HTTP API, targets
    description: Format of the C(/api/v1/targets) response.
    link: https://prometheus.io/docs/prometheus/latest/querying/api/#targets
"""

EXAMPLES = r"""
- name: Wait until Prometheus scrapes vLLM and LMCache
  aic.stack.prometheus_targets:
    url: http://127.0.0.1:9090
    expected_jobs:
      - vllm
      - lmcache

- name: Check the scrape jobs without failing the play
  aic.stack.prometheus_targets:
    url: "http://{{ prometheus_host }}:9090"
    expected_jobs: "{{ prometheus_scrape_jobs | map(attribute='job_name') | list }}"
    wait_timeout: 0
  register: targets
  ignore_errors: true

- name: Report jobs that are not up
  ansible.builtin.debug:
    msg: "{{ item }}: {{ targets.jobs[item].health }} {{ targets.jobs[item].last_error }}"
  loop: "{{ targets.down_jobs | default([]) }}"

- name: Every target of every node is up with its node label (the job's one Prometheus)
  aic.stack.prometheus_targets:
    url: http://node1:9090
    expected_targets:
      - {job: prometheus, node: node1}
      - {job: vllm, node: node1, gpu: "0"}
      - {job: vllm, node: node2, gpu: "3"}
      - {job: lmcache, node: node2}
      - {job: node_exporter, node: node2}

- name: The same, built from every node's plan
  aic.stack.prometheus_targets:
    url: "{{ hostvars | aic.stack.job_prometheus_url(monitoring_host) }}"
    expected_targets: "{{ hostvars | aic.stack.cluster_expected_targets(groups['aic_nodes'], monitoring_host) }}"
"""

RETURN = r"""
url:
  description: The Prometheus base URL that was checked.
  returned: always
  type: str
  sample: http://127.0.0.1:9090
jobs:
  description:
    - State of each expected job at the last poll.
    - C(health) is C(up) when at least one target is up, C(down) when none is up and at least one
      is down, C(unknown) when the targets have not been scraped yet, and C(missing) when the job
      has no active target.
  returned: when the targets API answered
  type: dict
  sample:
    vllm:
      health: up
      scrape_urls: [http://10.0.0.5:8000/metrics]
      last_error: ""
    lmcache:
      health: down
      scrape_urls: [http://10.0.0.5:8080/metrics]
      last_error: 'Get "http://10.0.0.5:8080/metrics": dial tcp 10.0.0.5:8080: connect: connection refused'
  contains:
    health:
      description: One of C(up), C(down), C(unknown), C(missing).
      type: str
    scrape_urls:
      description: Scrape URLs of the job's active targets.
      type: list
      elements: str
    last_error:
      description: Last scrape errors of the job's targets, joined with C(; ) (empty when none).
      type: str
up_jobs:
  description: Expected jobs that are up.
  returned: when the targets API answered
  type: list
  elements: str
  sample: [vllm]
down_jobs:
  description: Expected jobs that are not up (down, unknown or missing).
  returned: when the targets API answered
  type: list
  elements: str
  sample: [lmcache]
targets:
  description:
    - State of each entry of O(expected_targets) at the last poll, in the given order.
    - C(health) is C(up) when every matching target is up, C(down) when one is down, C(unknown)
      when none is down but one has not been scraped yet, C(missing) when no target matches.
  returned: when the targets API answered and O(expected_targets) was given
  type: list
  elements: dict
  sample:
    - labels: {job: vllm, node: node2, gpu: "3"}
      health: down
      scrape_urls: [http://10.0.0.12:8000/metrics]
      last_error: 'Get "http://10.0.0.12:8000/metrics": dial tcp 10.0.0.12:8000: connect: connection refused'
  contains:
    labels:
      description: The entry of O(expected_targets), values as strings.
      type: dict
    health:
      description: One of C(up), C(down), C(unknown), C(missing).
      type: str
    scrape_urls:
      description: Scrape URLs of the matching targets.
      type: list
      elements: str
    last_error:
      description: Last scrape errors of the matching targets, joined with C(; ).
      type: str
down_targets:
  description: The entries of O(expected_targets) that are not up.
  returned: when the targets API answered and O(expected_targets) was given
  type: list
  elements: dict
  sample: [{job: vllm, node: node2, gpu: "3"}]
down_nodes:
  description: The C(node) labels of the expected jobs' and targets' entries that are not up, sorted.
  returned: when the targets API answered
  type: list
  elements: str
  sample: [node2]
elapsed:
  description: Seconds spent by the module, including waiting.
  returned: always
  type: float
  sample: 3.02
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aic.stack.plugins.module_utils.health_check import Check, fetch
from ansible_collections.aic.stack.plugins.module_utils.http import excerpt, per_try_timeout, wait_until

COMPONENT = "Prometheus"
POLL_INTERVAL = 1.0
TARGETS_PATH = "/api/v1/targets?state=active"


def _unique(items):
    seen = []
    for item in items:
        if item and item not in seen:
            seen.append(item)
    return seen


def fetch_active_targets(targets_url, timeout):
    """Return ``(targets, None)`` or ``(None, error_string)``."""
    resp, error = fetch(targets_url, f"GET {TARGETS_PATH}", timeout)
    if error:
        return None, error
    try:
        doc = resp.json()
        if doc.get("status") != "success":
            status = doc.get("status")
            return None, f"GET {TARGETS_PATH} answered status {status!r}: {excerpt(resp.body)}"
        targets = doc["data"]["activeTargets"]
        if not isinstance(targets, list):
            raise TypeError("activeTargets is not a list")
    except (ValueError, AttributeError, KeyError, TypeError):
        return None, f"unexpected {TARGETS_PATH} response: {excerpt(resp.body)}"
    return [t for t in targets if isinstance(t, dict)], None


def summarize(targets, expected_jobs):
    """Map each expected job to its health, scrape URLs and last errors (plus the raw targets)."""
    jobs = {}
    details = {}
    for job in expected_jobs:
        mine = [t for t in targets if t.get("scrapePool") == job or (t.get("labels") or {}).get("job") == job]
        details[job] = mine
        if not mine:
            jobs[job] = {"health": "missing", "scrape_urls": [], "last_error": ""}
            continue
        healths = [t.get("health") or "unknown" for t in mine]
        if "up" in healths:
            health = "up"
        elif "down" in healths:
            health = "down"
        else:
            health = "unknown"
        jobs[job] = {
            "health": health,
            "scrape_urls": _unique(t.get("scrapeUrl") or "" for t in mine),
            "last_error": "; ".join(_unique(t.get("lastError") or "" for t in mine)),
        }
    return jobs, details


def _label_value(target, name):
    labels = target.get("labels") or {}
    value = labels.get(name)
    if name == "job" and value is None:
        value = target.get("scrapePool")
    return "" if value is None else str(value)


def _matches(target, matcher):
    for name, value in matcher.items():
        if name == "job" and target.get("scrapePool") == value:
            continue
        if _label_value(target, name) != value:
            return False
    return True


def normalize_matchers(entries):
    """``expected_targets`` entries as {label: str} dicts (None means the empty string); duplicates dropped."""
    out = []
    for entry in entries:
        matcher = {str(k): "" if v is None else str(v) for k, v in entry.items()}
        if matcher not in out:
            out.append(matcher)
    return out


def summarize_targets(targets, matchers):
    """State of each expected label matcher: up when it matches targets and all of them are up."""
    states = []
    details = []
    for matcher in matchers:
        mine = [t for t in targets if _matches(t, matcher)]
        details.append(mine)
        healths = [t.get("health") or "unknown" for t in mine]
        if not mine:
            health = "missing"
        elif "down" in healths:
            health = "down"
        elif all(h == "up" for h in healths):
            health = "up"
        else:
            health = "unknown"
        states.append(
            {
                "labels": dict(matcher),
                "health": health,
                "scrape_urls": _unique(t.get("scrapeUrl") or "" for t in mine),
                "last_error": "; ".join(_unique(t.get("lastError") or "" for t in mine)),
            }
        )
    return states, details


def describe_matcher(matcher):
    names = [n for n in ("node", "job", "gpu") if n in matcher] + sorted(
        n for n in matcher if n not in ("node", "job", "gpu")
    )
    return " ".join(f"{name} {matcher[name]!r}" for name in names) or "any target"


def describe_target(state, targets):
    if state["health"] == "missing":
        return f"{describe_matcher(state['labels'])}: no target with these labels"
    parts = []
    for t in targets:
        if (t.get("health") or "unknown") == "up":
            continue
        parts.append(
            f"{t.get('scrapeUrl') or '?'} health={t.get('health') or 'unknown'} lastError={t.get('lastError') or 'none'!r}"
        )
    return f"{describe_matcher(state['labels'])} is {state['health']} ({', '.join(parts)})"


def down_nodes(not_up_details):
    """Node labels of the entries that are not up: the entry's own node, and those of its targets not up."""
    nodes = set()
    for matcher, targets in not_up_details:
        if matcher.get("node"):
            nodes.add(matcher["node"])
        nodes.update(
            _label_value(t, "node")
            for t in targets
            if (t.get("health") or "unknown") != "up" and _label_value(t, "node")
        )
    return sorted(nodes)


def describe_job(job, info, targets):
    if info["health"] == "missing":
        return f"job {job!r}: no target configured"
    parts = []
    for t in targets:
        scrape_url = t.get("scrapeUrl") or "?"
        health = t.get("health") or "unknown"
        last_error = t.get("lastError") or "none"
        parts.append(f"{scrape_url} health={health} lastError={last_error!r}")
    return f"job {job!r} is {info['health']} ({', '.join(parts)})"


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True, "aliases": ["base_url"]},
            "expected_jobs": {"type": "list", "elements": "str", "default": []},
            "expected_targets": {"type": "list", "elements": "dict", "default": []},
            "wait_timeout": {"type": "int", "default": 60},
            "request_timeout": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )
    base = module.params["url"]
    expected = _unique(module.params["expected_jobs"] or [])
    matchers = normalize_matchers(module.params["expected_targets"] or [])
    request_timeout = module.params["request_timeout"]
    wait_timeout = module.params["wait_timeout"]
    check = Check(COMPONENT, base, request_timeout)
    targets_url = check.url(TARGETS_PATH)
    if not expected and not matchers:
        module.fail_json(
            msg=check.message(base, "expected_jobs or expected_targets must list at least one job or target"),
            url=base,
        )

    start = time.monotonic()
    state = {}

    def probe(remaining):
        targets, error = fetch_active_targets(targets_url, per_try_timeout(request_timeout, wait_timeout, remaining))
        if error:
            state["api_error"] = error
            return False, None, error
        state.pop("api_error", None)
        state["summary"] = summarize(targets, expected)
        state["targets"] = summarize_targets(targets, matchers)
        jobs = state["summary"][0]
        not_up = [j for j in expected if jobs[j]["health"] != "up"]
        not_up += [describe_matcher(t["labels"]) for t in state["targets"][0] if t["health"] != "up"]
        return not not_up, None, f"not up: {', '.join(not_up)}"

    waited = wait_until(probe, wait_timeout, interval=POLL_INTERVAL)
    result = {"changed": False, "url": base, "elapsed": round(time.monotonic() - start, 3)}

    if "summary" not in state:
        module.fail_json(
            msg=check.message(
                targets_url, f"{state.get('api_error')} (waited {wait_timeout}s, {waited.attempts} attempts)"
            ),
            **result,
        )

    jobs, details = state["summary"]
    target_states, target_details = state["targets"]
    not_up = [j for j in expected if jobs[j]["health"] != "up"]
    not_up_targets = [i for i, t in enumerate(target_states) if t["health"] != "up"]
    nodes = down_nodes(
        [({}, details[j]) for j in not_up] + [(target_states[i]["labels"], target_details[i]) for i in not_up_targets]
    )
    result.update(
        jobs=jobs,
        up_jobs=sorted(j for j in expected if jobs[j]["health"] == "up"),
        down_jobs=sorted(not_up),
        down_nodes=nodes,
    )
    if matchers:
        result.update(targets=target_states, down_targets=[target_states[i]["labels"] for i in not_up_targets])
    if waited.ok:
        module.exit_json(**result)

    parts = []
    if not_up:
        parts.append(
            f"{len(not_up)} of {len(expected)} expected jobs not up after {wait_timeout}s: "
            + "; ".join(describe_job(j, jobs[j], details[j]) for j in not_up)
        )
    if not_up_targets:
        parts.append(
            f"{len(not_up_targets)} of {len(matchers)} expected targets not up after {wait_timeout}s: "
            + "; ".join(describe_target(target_states[i], target_details[i]) for i in not_up_targets)
        )
    msg = check.message(base, "; ".join(parts))
    if matchers and nodes:
        msg += f" (nodes with a target not up: {', '.join(nodes)})"
    if state.get("api_error"):
        msg += f" (last poll failed: {state['api_error']})"
    module.fail_json(msg=msg, **result)


if __name__ == "__main__":
    main()
