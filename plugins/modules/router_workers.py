#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack contributors
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: router_workers
short_description: Take vLLM workers out of the job's vllm-router (draining them) or put them back
version_added: 0.1.0
description:
  - Drives the job's vllm-router through its API (C(/list_workers), C(/remove_worker), C(/add_worker)).
  - V(absent) removes the O(workers) the router has, so it sends them nothing new (requests already sent finish, the
    router does not cut them), then waits until the vLLM instances behind them (O(drain_metrics), their
    C(/metrics)) have nothing in flight (C(vllm:num_requests_running) + C(vllm:num_requests_waiting)), at most
    O(drain_timeout) seconds. A drain that runs out of time is not a failure (vLLM's own drain on SIGTERM goes on);
    the result says what was left.
  - V(present) adds the O(workers) the router lacks; the router answers once each passed its health check, which
    O(ready_timeout) bounds.
  - V(listed) changes nothing. It checks that the router's workers are exactly O(workers) and fails naming the
    missing and the unexpected ones (the health check at the end of a rollout).
author:
  - aic.stack developers (!UNKNOWN)
extends_documentation_fragment:
  - aic.stack.attributes
options:
  url:
    description: Base URL of the router (C(aic_plan.endpoints.router) of the router host).
    type: str
    required: true
  workers:
    description:
      - Worker URLs as the router knows them (aic.stack.router_workers), for example C(http://aic-vllm:8000) for the
        router host's own instance or C(http://10.0.0.2:8000) for another node's.
    type: list
    elements: str
    required: true
  state:
    description: V(absent) takes the workers out and drains them, V(present) puts them back, V(listed) checks them.
    type: str
    choices: [present, absent, listed]
    default: present
  drain_metrics:
    description:
      - The C(/metrics) URLs of the vLLM instances behind O(workers), as this host reaches them. V(absent) waits
        until none has a request in flight. Empty, nothing is waited for.
      - An instance whose metrics do not answer counts as drained (nothing can reach it).
    type: list
    elements: str
    default: []
  drain_timeout:
    description: Seconds V(absent) waits at most for the in-flight requests to finish (aic_router_drain_timeout_s).
    type: int
    default: 60
  ready_timeout:
    description: Seconds V(present) waits at most for the router to accept each worker (its health check).
    type: int
    default: 300
  request_timeout:
    description: Timeout in seconds of every other request.
    type: int
    default: 10
  router_required:
    description:
      - V(false) accepts a router that does not answer (not started yet, the first rollout of a job) as one with no
        workers to change. Nothing is done and RV(router_up) is V(false).
      - V(true) fails naming the router's URL.
    type: bool
    default: true
notes:
  - The router's list is the truth. A worker it does not have is not removed again, one it has is not added again,
    so a rerun changes nothing.
seealso:
  - name: vllm-router
    description: vllm-project's Rust router (PyPI C(vllm-router)).
    link: https://github.com/vllm-project/router
"""

EXAMPLES = r"""
- name: Take this node's vLLM instances out of the job's router and drain them
  aic.stack.router_workers:
    url: "{{ hostvars[aic_router_node].aic_plan.endpoints.router }}"
    workers: "{{ hostvars | aic.stack.router_workers([inventory_hostname], aic_router_node) }}"
    state: absent
    drain_metrics: "{{ aic_plan.vllm_instances | map(attribute='endpoint') | map('regex_replace', '$', '/metrics') }}"
    drain_timeout: "{{ aic_plan.router.drain_timeout_s }}"

- name: Put them back once the node passed health
  aic.stack.router_workers:
    url: "{{ hostvars[aic_router_node].aic_plan.endpoints.router }}"
    workers: "{{ hostvars | aic.stack.router_workers([inventory_hostname], aic_router_node) }}"
    state: present
"""

RETURN = r"""
workers:
  description: The router's workers after the change (what C(/list_workers) answered, changed as asked).
  returned: always
  type: list
  elements: str
  sample: [http://aic-vllm:8000, http://10.0.0.3:8000]
removed:
  description: The workers this run took out (state V(absent)).
  returned: always
  type: list
  elements: str
added:
  description: The workers this run put back (state V(present)).
  returned: always
  type: list
  elements: str
drained:
  description: V(absent) only. Whether every instance of O(drain_metrics) reached nothing in flight in time.
  returned: always
  type: bool
in_flight:
  description: V(absent) only. What was still in flight at the end, per metrics URL (empty when drained).
  returned: always
  type: dict
  sample: {"http://127.0.0.1:8000/metrics": 2}
drain_waited:
  description: Seconds V(absent) waited for the drain.
  returned: always
  type: float
router_up:
  description: Whether the router answered (V(false) only with O(router_required=false)).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.aic.stack.plugins.module_utils import metrics
from ansible_collections.aic.stack.plugins.module_utils.router_api import Router, RouterApiError, drain, in_flight


def run(module):
    params = module.params
    router = Router(params["url"], timeout=params["request_timeout"])
    result = {"changed": False, "removed": [], "added": [], "drained": True, "in_flight": {}, "drain_waited": 0.0}
    try:
        current = router.workers()
    except RouterApiError as exc:
        if params["router_required"] or not exc.unreachable:
            raise
        return dict(result, workers=[], router_up=False, msg=str(exc))
    result["router_up"] = True
    if params["state"] == "absent":
        result["removed"] = [w for w in dict.fromkeys(params["workers"]) if w in current]
        result["changed"] = bool(result["removed"])
        if not module.check_mode:
            for worker in result["removed"]:
                router.remove(worker)
            if params["drain_metrics"]:
                urls = params["drain_metrics"]
                drained, left, waited = drain(
                    urls, params["drain_timeout"], count=lambda u: in_flight(u, timeout=params["request_timeout"])
                )
                result.update(drained=drained, in_flight=left, drain_waited=waited)
                if not drained:
                    module.warn(
                        f"the drain ran out of time ({params['drain_timeout']} s) with requests in flight: "
                        + ", ".join(f"{u}: {n}" for u, n in left.items())
                    )
        result["workers"] = [w for w in current if w not in result["removed"]]
    elif params["state"] == "listed":
        result["workers"] = current
        missing = [w for w in dict.fromkeys(params["workers"]) if w not in current]
        unexpected = [w for w in current if w not in params["workers"]]
        if missing or unexpected:
            detail = "; ".join(
                part
                for part in (
                    "missing: " + ", ".join(missing) if missing else "",
                    "not expected: " + ", ".join(unexpected) if unexpected else "",
                )
                if part
            )
            module.fail_json(
                msg=f"the router at {params['url']} does not route to exactly the healthy workers ({detail})", **result
            )
    else:
        result["added"] = [w for w in dict.fromkeys(params["workers"]) if w not in current]
        result["changed"] = bool(result["added"])
        if not module.check_mode:
            for worker in result["added"]:
                router.add(worker, timeout=params["ready_timeout"])
        result["workers"] = current + result["added"]
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "workers": {"type": "list", "elements": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent", "listed"], "default": "present"},
            "drain_metrics": {"type": "list", "elements": "str", "default": []},
            "drain_timeout": {"type": "int", "default": 60},
            "ready_timeout": {"type": "int", "default": 300},
            "request_timeout": {"type": "int", "default": 10},
            "router_required": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    if module.params["drain_metrics"] and not metrics.HAS_PROMETHEUS_CLIENT:
        module.fail_json(
            msg=missing_required_lib("prometheus_client"), exception=metrics.PROMETHEUS_CLIENT_IMPORT_ERROR
        )
    try:
        result = run(module)
    except RouterApiError as exc:
        module.fail_json(msg=str(exc), changed=False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
