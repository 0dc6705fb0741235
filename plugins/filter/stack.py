# Copyright: aic.stack contributors
# Apache-2.0
"""Pure helper filters for aic.stack roles."""

from __future__ import annotations

import hashlib
import json
import posixpath
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.module_utils.container_specs import lmcache_env, vllm_spec
from ansible_collections.aic.stack.plugins.module_utils.lmcache_args import l2_adapters, server_args


def content_tag(value, length=12):
    """A stable short tag for any JSON-serialisable build input: same inputs, same tag."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[: int(length)]


def context_digests(files, root):
    """``{path relative to root: sha256}`` of the files under ``root`` among ``files`` (ansible.builtin.find's
    ``files``, found with ``get_checksum``): what a build context carries, for its content tag."""
    root = posixpath.normpath(str(root))
    out = {}
    for entry in files or []:
        path = posixpath.normpath(str(entry.get("path", "")))
        if not path.startswith(root + "/"):
            continue
        checksum = entry.get("checksum")
        if not checksum:
            raise AnsibleFilterError(f"context_digests: {path} has no checksum (find it with get_checksum: true)")
        out[posixpath.relpath(path, root)] = checksum
    return out


def kv_transfer_config(host, port, extra=None):
    """vLLM --kv-transfer-config JSON for LMCache's multi-process connector."""
    config = {
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.mp.host": f"tcp://{host}", "lmcache.mp.port": int(port)},
    }
    if extra:
        config["kv_connector_extra_config"].update(extra)
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


_LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _static_config(job_name, targets, labels=None):
    entry = {"targets": [str(target) for target in targets]}
    if labels:
        for name in labels:
            if not _LABEL_NAME_RE.match(str(name)) or str(name).startswith("__"):
                raise ValueError(f"prometheus_config: job {job_name}: {name!r} is not a valid target label name")
        entry["labels"] = {str(name): "" if value is None else str(value) for name, value in labels.items()}
    return entry


def prometheus_config(jobs, scrape_interval="5s", scrape_timeout=None, labels=None, rule_files=None):
    """A prometheus.yml document (as a dict) with one static job per plan entry.

    ``jobs`` is a list of ``{"job", "targets"[, "labels"][, "metrics_path"]}`` (the plan's jobs plus those of the
    exporters that run), or ``{"job", "groups": [{"targets", "labels"}, ...]}`` for targets with their own labels
    (one ``static_configs`` entry per group: per node, per GPU; ``aic.stack.cluster_scrape_jobs``). A job listed
    twice is an error, since Prometheus refuses duplicate job names.
    """
    interval = str(scrape_interval)
    global_cfg = {"scrape_interval": interval, "evaluation_interval": interval}
    if scrape_timeout:
        global_cfg["scrape_timeout"] = str(scrape_timeout)
    if labels:
        global_cfg["external_labels"] = dict(labels)
    names = [job["job"] for job in jobs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"prometheus_config: duplicate scrape job names: {', '.join(duplicates)}")
    config = {"global": global_cfg}
    if rule_files:
        config["rule_files"] = [str(path) for path in rule_files]
    config["scrape_configs"] = []
    for job in jobs:
        if "groups" in job:
            static = [_static_config(job["job"], g["targets"], g.get("labels")) for g in job["groups"]]
        else:
            static = [_static_config(job["job"], job["targets"], job.get("labels"))]
        config["scrape_configs"].append(
            {"job_name": job["job"], "metrics_path": job.get("metrics_path", "/metrics"), "static_configs": static}
        )
    return config


def lmcache_server_args(plan):
    """``lmcache server`` argv for an aic_plan (L2 adapter JSON per backend, prefetch cap, workers)."""
    return server_args(plan["lmcache"], plan["ports"])


def lmcache_l2_adapters(plan):
    """The L2 adapter specs (list of dicts) an aic_plan configures; empty for DRAM-only."""
    return l2_adapters(plan["lmcache"])


def vllm_container_spec(plan, index=0):
    """name/port/gpu/command/env/devices/mounts/ipc_mode/pid_mode of vLLM instance ``index`` (one per GPU)."""
    return vllm_spec(plan, int(index))


def vllm_container_specs(plan):
    """The specs of every vLLM instance of the plan, in index order (one container per GPU)."""
    return [vllm_spec(plan, i["index"]) for i in plan["vllm_instances"]]


def lmcache_container_env(plan):
    """Environment of the LMCache container (NIXL telemetry; on ROCm the allocation's GPUs and the ROCm env)."""
    return lmcache_env(plan)


class FilterModule:
    def filters(self):
        return {
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
