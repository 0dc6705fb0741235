#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_health
short_description: Check that a vLLM OpenAI-compatible server is up and serving a model
version_added: 0.1.0
description:
  - Read-only end-to-end health check of a vLLM server (C(vllm serve)).
  - Waits for C(GET /health) to return HTTP 200, then checks that C(GET /v1/models) lists O(model),
    that C(POST /v1/completions) with O(prompt) returns a non-empty completion, and that
    C(GET /metrics) exposes at least one metric family starting with O(metric_prefix).
  - The checks run in that order; the first one that fails fails the task with a message naming
    the server URL and what was wrong.
author:
  - aic.stack developers (!UNKNOWN)
requirements:
  - prometheus_client (Python library on the managed node, used to parse C(/metrics))
extends_documentation_fragment:
  - aic.stack.attributes
  - aic.stack.health
options:
  url:
    description:
      - Base URL of the vLLM OpenAI-compatible server, without the C(/v1) suffix.
    type: str
    required: true
    aliases: [base_url]
  model:
    description:
      - Served model name (C(--served-model-name), or the model path when not set) that must be
        listed by C(/v1/models) and is used for the test completion.
    type: str
    required: true
  prompt:
    description:
      - Prompt sent to C(/v1/completions).
    type: str
    default: The capital of France is
  max_tokens:
    description:
      - C(max_tokens) for the test completion. The completion is requested with C(temperature=0).
    type: int
    default: 8
  wait_timeout:
    description:
      - Seconds to wait for C(GET /health) to return HTTP 200, polling every 2 seconds.
      - vLLM typically needs about a minute to load weights and capture CUDA graphs.
      - V(0) probes once without waiting.
    type: int
    default: 300
  request_timeout:
    description:
      - Timeout in seconds for each individual HTTP request (including the completion).
    type: int
    default: 60
  metric_prefix:
    description:
      - Prefix that at least one metric family on C(/metrics) must start with.
    type: str
    default: "vllm:"
  container:
    description:
      - Name of the vLLM container on this node's Docker engine. While the module waits for C(/health) it watches
        the container. When it exited or restarted since the check began, waiting cannot help, so the check fails
        at once with the exit code and the container's last log lines (a bad image fails in seconds, not after
        O(wait_timeout)). A failed check also reports the container healthcheck's verdict (a hung engine answers
        C(/health) but no completion; its healthcheck has been failing since it hung).
      - Empty (the default) watches nothing.
    type: str
    default: ""
  docker_host:
    description:
      - The Docker engine that runs O(container), V(unix:///path/to/docker.sock) or V(tcp://host:port) (plain HTTP).
      - Empty means the environment's E(DOCKER_HOST), else V(unix:///var/run/docker.sock).
    type: str
    default: ""
notes:
  - Only the length of the completion text is checked, so tiny models with random weights,
    which may answer with whitespace or garbage, pass.
  - Counter family names are compared as normalised by C(prometheus_client), that is without
    their C(_total) suffix.
seealso:
  - module: aic.stack.lmcache_health
  - module: aic.stack.prometheus_targets
"""

EXAMPLES = r"""
- name: Wait for vLLM to load the model and answer a completion
  aic.stack.vllm_health:
    url: http://127.0.0.1:8000
    model: tiny-llama

- name: Wait for vLLM, failing at once when its container exits or restarts
  aic.stack.vllm_health:
    url: http://127.0.0.1:8000
    model: tiny-llama
    container: aic-vllm

- name: Check a remote node quickly, with a custom prompt
  aic.stack.vllm_health:
    url: "http://{{ inventory_hostname }}:{{ vllm_port }}"
    model: "{{ vllm_served_model_name }}"
    prompt: "Hello, my name is"
    max_tokens: 4
    wait_timeout: 600
  register: vllm

- name: Show the completion
  ansible.builtin.debug:
    msg: "{{ vllm.model }} answered {{ vllm.completion_text | to_json }} in {{ vllm.elapsed }}s"
"""

RETURN = r"""
url:
  description: The vLLM base URL that was checked.
  returned: always
  type: str
  sample: http://127.0.0.1:8000
model:
  description: The model name that was checked.
  returned: always
  type: str
  sample: tiny-llama
models:
  description: Model IDs listed by C(/v1/models).
  returned: when C(/v1/models) could be read
  type: list
  elements: str
  sample: [tiny-llama]
completion_text:
  description: Text of the first choice returned by C(/v1/completions).
  returned: success
  type: str
  sample: " Paris, and the capital of"
metric_families:
  description: Number of metric families on C(/metrics) whose name starts with O(metric_prefix).
  returned: success
  type: int
  sample: 42
elapsed:
  description: Seconds spent by the module, including waiting for C(/health).
  returned: always
  type: float
  sample: 61.3
"""

import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.aic.stack.plugins.module_utils.container_watch import ContainerWatch
from ansible_collections.aic.stack.plugins.module_utils.health_check import Check, run
from ansible_collections.aic.stack.plugins.module_utils.http import excerpt
from ansible_collections.aic.stack.plugins.module_utils.metrics import (
    HAS_PROMETHEUS_CLIENT,
    PROMETHEUS_CLIENT_IMPORT_ERROR,
)

COMPONENT = "vLLM"


def run_checks(params, result, watch=None):
    base = params["url"]
    model = params["model"]
    # A hung engine answers /health but no completion: its container's own healthcheck tells since when.
    check = Check(COMPONENT, base, params["request_timeout"], remark=watch.health if watch is not None else None)

    # 1. /health, waiting for the server to come up.
    check.wait("/health", params["wait_timeout"], abort=watch.check if watch is not None else None)

    # 2. /v1/models lists the model.
    resp = check.request("/v1/models")
    try:
        data = resp.json().get("data")
        models = [str(m["id"]) for m in data]
    except (ValueError, AttributeError, TypeError, KeyError):
        check.fail(
            check.url("/v1/models"),
            f'unexpected /v1/models response (expected {{"data": [{{"id": ...}}]}}): {excerpt(resp.body)}',
        )
    result["models"] = models
    if model not in models:
        check.fail(base, f"model {model!r} not listed by /v1/models (served: {models!r})")

    # 3. A real completion.
    completions_url = check.url("/v1/completions")
    payload = {
        "model": model,
        "prompt": params["prompt"],
        "max_tokens": params["max_tokens"],
        "temperature": 0,
    }
    resp = check.request("/v1/completions", method="POST", json_data=payload)
    try:
        text = resp.json()["choices"][0]["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        check.fail(completions_url, f"unexpected /v1/completions response (no choices[0].text): {excerpt(resp.body)}")
    if not isinstance(text, str) or len(text) == 0:
        check.fail(
            completions_url, f"empty completion for model {model!r} (choices[0].text={text!r}): {excerpt(resp.body)}"
        )
    result["completion_text"] = text

    # 4. Prometheus metrics.
    _dummy, matching = check.metrics(params["metric_prefix"])
    result["metric_families"] = len(matching)


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True, "aliases": ["base_url"]},
            "model": {"type": "str", "required": True},
            "prompt": {"type": "str", "default": "The capital of France is"},
            "max_tokens": {"type": "int", "default": 8, "no_log": False},
            "wait_timeout": {"type": "int", "default": 300},
            "request_timeout": {"type": "int", "default": 60},
            "metric_prefix": {"type": "str", "default": "vllm:"},
            "container": {"type": "str", "default": ""},
            "docker_host": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    if not HAS_PROMETHEUS_CLIENT:
        module.fail_json(msg=missing_required_lib("prometheus_client"), exception=PROMETHEUS_CLIENT_IMPORT_ERROR)

    start = time.monotonic()
    result = {"changed": False, "url": module.params["url"], "model": module.params["model"]}
    watch = None
    if module.params["container"]:
        try:
            watch = ContainerWatch(module.params["container"], docker_host=module.params["docker_host"] or None)
        except Exception as exc:  # noqa: BLE001 - any Engine error is the message
            module.fail_json(
                msg=f"{COMPONENT}: cannot inspect its container {module.params['container']!r}: {exc}", **result
            )
    run(module, result, lambda out: run_checks(module.params, out, watch), start=start)


if __name__ == "__main__":
    main()
