#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lmcache_health
short_description: Check that an LMCache server answers its health check and exports metrics
version_added: 0.1.0
description:
  - Read-only health check of an LMCache server HTTP port.
  - Waits for C(GET /healthcheck) to return HTTP 200, then checks that C(GET /metrics) exposes at
    least one metric family starting with O(metric_prefix).
  - LMCache answers C(/health) with 404; this module therefore uses C(/healthcheck).
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
      - Base URL of the LMCache server HTTP port.
    type: str
    required: true
    aliases: [base_url]
  wait_timeout:
    description:
      - Seconds to wait for C(GET /healthcheck) to return HTTP 200, polling every 2 seconds.
      - V(0) probes once without waiting.
    type: int
    default: 120
  request_timeout:
    description:
      - Timeout in seconds for each individual HTTP request.
    type: int
    default: 10
  metric_prefix:
    description:
      - Prefix that at least one metric family on C(/metrics) must start with.
    type: str
    default: lmcache_mp_
  l2_reads:
    description:
      - Check the L2 tier is really read back. Run it after a warm-up that overflows L1 and re-reads stored
        prefixes. With V(required) it fails, naming the cause, when
      - L2 writes fail - chunks submitted to L2 (C(lmcache_mp_l2_store_submitted_objects_chunks_total)) but fewer
        stored (C(lmcache_mp_l2_store_completed_objects_chunks_total)) - an L2 directory that cannot be written;
      - fewer than O(l2_min_stored_chunks) chunks were stored at all - no active L2 adapter
        (C(lmcache_mp_l2_store_adapters{state="active"})), vLLM outside LMCache's IPC namespace (no lookup ever hit,
        L1 stuck full), or a warm-up that never overflowed L1;
      - chunks were stored but no L2 read ever happened (C(lmcache_mp_lookup_hit_l2_tokens_total) and
        C(lmcache_mp_l2_prefetch_load_completed_chunks_total) both 0 or absent). When no lookup hit at all, L1
        included (C(lmcache_mp_lookup_hit_tokens_total) 0 while C(lmcache_mp_lookup_requested_tokens_total) grew),
        the cause named is vLLM not sharing LMCache's IPC namespace; otherwise the silent NIXL failure (transfer
        race, slots smaller than a chunk, stale slot files).
      - V(ignore) skips the check.
    type: str
    choices: [ignore, required]
    default: ignore
  l2_min_stored_chunks:
    description: With O(l2_reads=required), also fail when fewer L2 chunks than this were stored.
    type: int
    default: 1
notes:
  - Counter family names are compared as normalised by C(prometheus_client), that is without
    their C(_total) suffix.
seealso:
  - module: aic.stack.vllm_health
  - module: aic.stack.prometheus_targets
"""

EXAMPLES = r"""
- name: Wait for the LMCache server to be healthy
  aic.stack.lmcache_health:
    url: http://127.0.0.1:8080

- name: Check LMCache on every cache node and list its metric families
  aic.stack.lmcache_health:
    url: "http://{{ inventory_hostname }}:{{ lmcache_http_port }}"
    wait_timeout: 30
  register: lmcache

- name: Show what LMCache exports
  ansible.builtin.debug:
    var: lmcache.metric_families
"""

RETURN = r"""
url:
  description: The LMCache base URL that was checked.
  returned: always
  type: str
  sample: http://127.0.0.1:8080
metric_families:
  description: Sorted names of the metric families whose name starts with O(metric_prefix).
  returned: success
  type: list
  elements: str
  sample: [lmcache_mp_l1_usage_ratio, lmcache_mp_num_hit_tokens]
l2:
  description: L2 counters read from C(/metrics) (null when absent) and the verdict of the L2 check.
  returned: success
  type: dict
  sample:
    submitted_chunks: 12.0
    stored_chunks: 12.0
    hit_tokens: 256.0
    loaded_chunks: 2.0
    lookup_requested_tokens: 3328.0
    lookup_hit_tokens: 512.0
    reads_ok: true
elapsed:
  description: Seconds spent by the module, including waiting for C(/healthcheck).
  returned: always
  type: float
  sample: 2.04
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.aic.stack.plugins.module_utils.health_check import Check, run
from ansible_collections.aic.stack.plugins.module_utils.metrics import (
    HAS_PROMETHEUS_CLIENT,
    PROMETHEUS_CLIENT_IMPORT_ERROR,
    sample_value,
)

COMPONENT = "LMCache"


def run_checks(params, result):
    check = Check(COMPONENT, params["url"], params["request_timeout"])
    check.wait("/healthcheck", params["wait_timeout"])

    metrics_url = check.url("/metrics")
    families, matching = check.metrics(params["metric_prefix"])
    result["metric_families"] = matching
    stored = sample_value(families, "lmcache_mp_l2_store_completed_objects_chunks_total")
    submitted = sample_value(families, "lmcache_mp_l2_store_submitted_objects_chunks_total")
    hits = sample_value(families, "lmcache_mp_lookup_hit_l2_tokens_total")
    loaded = sample_value(families, "lmcache_mp_l2_prefetch_load_completed_chunks_total")
    requested = sample_value(families, "lmcache_mp_lookup_requested_tokens_total")
    hit_any = sample_value(families, "lmcache_mp_lookup_hit_tokens_total")
    adapters = sample_value(families, "lmcache_mp_l2_store_adapters", {"state": "active"})
    alloc_failures = sample_value(families, "lmcache_mp_l1_allocation_failure_chunks_total")
    reads_ok = bool(hits) or bool(loaded)
    result["l2"] = {
        "submitted_chunks": submitted,
        "stored_chunks": stored,
        "hit_tokens": hits,
        "loaded_chunks": loaded,
        "lookup_requested_tokens": requested,
        "lookup_hit_tokens": hit_any,
        "reads_ok": reads_ok,
    }
    if params["l2_reads"] == "required":
        # Every lookup missed (L1 included) although vLLM asked: vLLM's KV reaches LMCache, but vLLM cannot use
        # LMCache's shared memory, so no lookup ever matches - the silent failure of unshared IPC namespaces.
        never_hit = (requested or 0) > 0 and not hit_any
        ipc_cause = (
            f"every LMCache lookup missed ({int(requested or 0)} tokens requested, 0 hit in L1 or L2) although vLLM "
            "sent its KV: vLLM does not share LMCache's IPC namespace (run vLLM with "
            "--ipc=container:<lmcache> and LMCache with --ipc=shareable, or both with --ipc=host)"
        )
        if (stored or 0) < params["l2_min_stored_chunks"]:
            if (submitted or 0) > (stored or 0):
                check.fail(
                    metrics_url,
                    f"L2 writes fail: {int(submitted)} chunk(s) submitted to L2, {int(stored or 0)} stored - the L2 "
                    "directory is not writable (permissions, read-only or immutable file system) or full; LMCache "
                    "logs 'Store task ... failed'",
                )
            if not adapters:
                check.fail(metrics_url, "L2 stored 0 chunks: LMCache has no active L2 adapter (no L2 tier configured)")
            if never_hit:
                stuck = f"; {int(alloc_failures)} L1 allocation failures" if alloc_failures else ""
                check.fail(
                    metrics_url, f"nothing reached L2 ({int(submitted or 0)} chunks submitted{stuck}) and {ipc_cause}"
                )
            check.fail(
                metrics_url,
                f"L2 stored {int(stored or 0)} chunk(s), expected at least {params['l2_min_stored_chunks']}: no L2 "
                "tier configured, or the warm-up never overflowed L1 into L2",
            )
        if not reads_ok:
            if never_hit:
                check.fail(
                    metrics_url,
                    f"L2 reads stuck at zero while L2 stores grew ({int(stored)} chunks stored): {ipc_cause}",
                )
            check.fail(
                metrics_url,
                f"L2 reads stuck at zero while L2 stores grew ({int(stored)} chunks stored, 0 L2 hit tokens, 0 "
                "prefetched chunks) while L1 lookups hit: the silent NIXL failure (concurrent transfer race, slots "
                "smaller than a KV chunk, or stale slot files)",
            )


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True, "aliases": ["base_url"]},
            "wait_timeout": {"type": "int", "default": 120},
            "request_timeout": {"type": "int", "default": 10},
            "metric_prefix": {"type": "str", "default": "lmcache_mp_"},
            "l2_reads": {"type": "str", "default": "ignore", "choices": ["ignore", "required"]},
            "l2_min_stored_chunks": {"type": "int", "default": 1},
        },
        supports_check_mode=True,
    )
    if not HAS_PROMETHEUS_CLIENT:
        module.fail_json(msg=missing_required_lib("prometheus_client"), exception=PROMETHEUS_CLIENT_IMPORT_ERROR)

    run(module, {"changed": False, "url": module.params["url"]}, lambda out: run_checks(module.params, out))


if __name__ == "__main__":
    main()
