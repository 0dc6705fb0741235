"""The rehearsal overlay (inventories/rehearsal) changes only what stands in for parts this machine cannot have.

The container specs of a SPUR node are rendered from inventories/spur alone and from inventories/spur plus the
overlay (templated with a node of the rehearsal bed); the differences are listed key by key: the model and its KV
geometry, the CPU-only vLLM flags, the fake GPU device nodes, the node's own directories, and the scaled pools.
Everything else (ports, namespaces, L2 backend, GPU visibility, monitoring mode, rollout) is SPUR's.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.aic.stack.plugins.module_utils.container_specs import lmcache_env, vllm_spec
from ansible_collections.aic.stack.plugins.module_utils.lmcache_args import server_args
from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan, normalize

REPO = pathlib.Path(__file__).resolve().parents[3]
# A node of the bed as scripts/rehearsal.sh writes it (bed.yml), with the GPU id the job gave it.
BED_NODE = {
    "inventory_hostname": "node2",
    "ansible_host": "10.78.0.12",
    "slurm_job_gpu_ids": ["0"],
    "aic_rehearsal_node_dir": "/bed/nodes/node2",
    "aic_rehearsal_kfd": "/bed/nodes/node2/dev/kfd",
    "aic_rehearsal_slab_parent": "/bed/nodes/node2/m2m_nobackup",
    "aic_rehearsal_hf_home": "/bed/nodes/node2/hf",
    "aic_rehearsal_stack_image": "aic-stack-cpu:0123456789ab",
    "aic_rehearsal_artifact_dir": "/repo/.work/artifacts",
    "aic_rehearsal_prometheus_image": "aic-prometheus:0123456789ab",
    "aic_rehearsal_node_exporter_image": "aic-node-exporter:0123456789ab",
}
# The only non-plan variables the overlay may set: role inputs that are stand-ins too (the CPU vLLM's environment,
# the machine's file limit, no GPU to check, the rehearsal's Slurm for SPUR's scheduler, the tiny model's cliff sizes).
ROLE_STANDINS = {
    "vllm_env",
    "lmcache_ulimits",
    "health_gpu_check",
    "slurm_job_dialect",
    "cliff_bench_slurm_partition",
    "image_build_slurm_partition",
    "cliff_bench_site_overrides",
}


def group_vars(inventory):
    out = {}
    for path in sorted((REPO / "inventories" / inventory / "group_vars" / "all").glob("*.yml")):
        out.update(yaml.safe_load(path.read_text()) or {})
    return out


def trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: trusted(v) for k, v in value.items()}
    return value


def render(variables):
    templar = Templar(loader=DataLoader(), variables={**BED_NODE, **variables})
    return {k: templar.template(trusted(v)) for k, v in variables.items()}


def plan_inputs(variables):
    return {k: v for k, v in variables.items() if k.startswith("aic_")}


@pytest.fixture(scope="module")
def both():
    spur = render(group_vars("spur"))
    rehearsal = render({**group_vars("spur"), **group_vars("rehearsal")})
    return spur, rehearsal, build_plan(plan_inputs(spur))[0], build_plan(plan_inputs(rehearsal))[0]


def flags(argv):
    """``{flag: value or True}`` of an argv (a flag followed by a non-flag takes it as its value)."""
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--"):
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[argv[i]] = argv[i + 1]
                i += 2
                continue
            out[argv[i]] = True
        i += 1
    return out


def differing(a, b):
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def test_the_overlay_sets_only_stand_ins():
    overlay = group_vars("rehearsal")
    assert set(overlay) - ROLE_STANDINS == {k for k in overlay if k.startswith("aic_")}
    for path in (REPO / "inventories" / "rehearsal" / "group_vars" / "all").glob("*.yml"):
        assert "STAND-IN" in path.read_text().split("\n\n", 1)[0], f"{path.name}: say what it stands in for"


def test_only_the_overlays_inputs_differ_in_the_plan(both):
    spur, rehearsal, _dummy, _dummy = both
    a, b = normalize(plan_inputs(spur))[0], normalize(plan_inputs(rehearsal))[0]
    assert differing(a, b) == sorted(k for k in group_vars("rehearsal") if k.startswith("aic_") and a[k] != b[k])
    # SPUR's own choices stay: flavour, arch, ports, namespaces, L2 backend, monitoring, this node's GPU.
    for key in (
        "aic_flavour",
        "aic_rocm_arches",
        "aic_lmcache_port",
        "aic_lmcache_http_port",
        "aic_vllm_pid_mode",
        "aic_vllm_ipc_mode",
        "aic_lmcache_l2_backend",
        "aic_monitoring_mode",
        "aic_bind_address",
        "aic_advertise_address",
        "aic_gpus",
        "aic_rollout_batch_size",
    ):
        assert a[key] == b[key], key
    assert b["aic_gpus"] == ["0"]


def test_vllm_spec_differs_only_in_model_cpu_flags_fake_devices_and_the_node_cache(both):
    _dummy, _dummy, spur, rehearsal = both
    a, b = vllm_spec(spur, 0), vllm_spec(rehearsal, 0)
    assert differing(a, b) == ["command", "devices", "healthcheck", "mounts"]
    # The healthcheck asks the served model by its name; nothing else of it differs.
    assert a["healthcheck"]["test"][-2:] != b["healthcheck"]["test"][-2:]
    assert {**a["healthcheck"], "test": a["healthcheck"]["test"][:-2]} == {
        **b["healthcheck"],
        "test": b["healthcheck"]["test"][:-2],
    }
    fa, fb = flags(a["command"]), flags(b["command"])
    assert differing(fa, fb) == [
        "--dtype",
        "--enforce-eager",
        "--kv-cache-dtype",
        "--max-model-len",
        "--model",
        "--served-model-name",
    ]
    assert fb["--model"] == "/opt/aic/models/tiny-llama" and fb["--enforce-eager"] is True
    assert a["devices"] == ["/dev/kfd", "/dev/dri"]
    assert b["devices"] == ["/bed/nodes/node2/dev/kfd:/dev/kfd", "/bed/nodes/node2/dev/dri:/dev/dri"]
    # The guard from the node's work directory (the same path as on SPUR), then the node's model cache.
    assert a["mounts"][0] == b["mounts"][0] and a["mounts"][0]["source"] == "/var/tmp/aic/vllm/aic_vllm_guard.py"
    assert [m["source"] for m in b["mounts"]][1:] == ["/bed/nodes/node2/hf"]
    # The GPU the container sees, its namespaces and its environment are SPUR's.
    assert (a["env"], a["ipc_mode"], a["pid_mode"], a["gpu"]) == (b["env"], b["ipc_mode"], b["pid_mode"], b["gpu"])


def test_lmcache_differs_only_in_scaled_pools(both):
    _dummy, _dummy, spur, rehearsal = both
    fa = flags(server_args(spur["lmcache"], spur["ports"]))
    fb = flags(server_args(rehearsal["lmcache"], rehearsal["ports"]))
    assert differing(fa, fb) == ["--chunk-size", "--l1-init-size-gb", "--l1-size-gb", "--l2-adapter"]
    la, lb = json.loads(fa["--l2-adapter"]), json.loads(fb["--l2-adapter"])
    assert la["type"] == lb["type"] == "nixl_store" and la["backend"] == lb["backend"] == "POSIX"
    assert differing(la, lb) == ["backend_params", "pool_size"]
    assert differing(la["backend_params"], lb["backend_params"]) == ["file_size"]
    assert lmcache_env(spur) == lmcache_env(rehearsal)
    # The slab directories are each node's own, under its root-owned parent (the sudo fallback).
    assert rehearsal["paths"]["l2_dirs"] == ["/bed/nodes/node2/m2m_nobackup/aic-cliff/nvme/lmcache"]
    assert spur["paths"]["l2_dirs"] == ["/mnt/m2m_nobackup/aic-cliff/nvme/lmcache"]
