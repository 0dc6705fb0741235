"""Golden test of the SPUR container specs (LMCache and vLLM) rendered from inventories/spur.

No AMD GPU exists here: the specs are pure data built from the plan, checked field by field against the SPUR
defaults of the stack's release notes, and against golden files (UPDATE_GOLDEN=1 rewrites them).
"""

from __future__ import annotations

import json
import os
import pathlib

import pytest
import yaml

from ansible_collections.aic.stack.plugins.module_utils.container_specs import lmcache_env, vllm_spec
from ansible_collections.aic.stack.plugins.module_utils.lmcache_args import server_args
from ansible_collections.aic.stack.plugins.module_utils.plan import PlanError, build_plan

REPO = pathlib.Path(__file__).resolve().parents[3]
GOLDEN = pathlib.Path(__file__).parent / "golden"


def spur_inputs(**overrides):
    values = yaml.safe_load((REPO / "inventories" / "spur" / "group_vars" / "all" / "main.yml").read_text())
    # The inventory reads the job's GPUs from SLURM_JOB_GPUS; here the "job" has GPU 2.
    values["aic_gpus"] = "2"
    values.update(overrides)
    return values


@pytest.fixture(scope="module")
def plan():
    return build_plan(spur_inputs())[0]


def arg(argv, flag):
    return argv[argv.index(flag) + 1]


def golden(name, data):
    path = GOLDEN / name
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file (UPDATE_GOLDEN=1 to accept)"


def test_lmcache_command_carries_every_spur_default(plan):
    argv = server_args(plan["lmcache"], plan["ports"])
    assert argv[:2] == ["lmcache", "server"]
    assert arg(argv, "--port") == "6555"
    assert arg(argv, "--http-port") == "8080"  # /metrics lives here; the scrape config reads the same value
    assert "--prometheus-port" not in argv
    assert arg(argv, "--l1-size-gb") == "20"
    assert arg(argv, "--chunk-size") == "256"
    assert arg(argv, "--max-gpu-workers") == "1"
    assert arg(argv, "--l2-prefetch-max-in-flight") == "4"
    assert "--no-separate-object-groups" in argv
    adapter = json.loads(arg(argv, "--l2-adapter"))
    assert adapter == {
        "type": "nixl_store",
        "backend": "POSIX",
        "backend_params": {"file_path": "/data/nvme/lmcache", "use_direct_io": "false", "file_size": "16777216"},
        "pool_size": 32768,
    }
    assert all(isinstance(v, str) for v in adapter["backend_params"].values())
    golden("spur-lmcache-command.json", argv)


def test_lmcache_env_sees_the_allocation_not_gpu0(plan):
    env = lmcache_env(plan)
    assert env["ROCR_VISIBLE_DEVICES"] == "2"
    assert env["HIP_VISIBLE_DEVICES"] == "0"
    assert env["NIXL_TELEMETRY_PROMETHEUS_PORT"] == "19090"
    golden("spur-lmcache-env.json", env)


def test_vllm_spec_carries_every_spur_default(plan):
    spec = vllm_spec(plan, 0)
    env = spec["env"]
    assert env["ROCR_VISIBLE_DEVICES"] == "2"  # the same GPU LMCache sees
    assert env["PYTORCH_HIP_ALLOC_CONF"] == "expandable_segments:False"
    assert "PYTORCH_ALLOC_CONF" not in env
    for key, value in {
        "HSA_ENABLE_IPC_MODE_LEGACY": "1",
        "SAFETENSORS_FAST_GPU": "1",
        "HIP_FORCE_DEV_KERNARG": "1",
    }.items():
        assert env[key] == value
    assert spec["ipc_mode"] == "container:aic-lmcache"
    assert spec["pid_mode"] == "container:aic-lmcache"
    assert spec["devices"] == ["/dev/kfd", "/dev/dri"]
    assert spec["mounts"] == [
        {
            "type": "bind",
            "source": "/var/tmp/aic/vllm/aic_vllm_guard.py",
            "target": "/opt/aic-guard/aic_vllm_guard.py",
            "read_only": True,
        },
        {"type": "bind", "source": "/shared_nfs/huggingface", "target": "/hf"},
    ]
    kv = json.loads(arg(spec["command"], "--kv-transfer-config"))
    assert kv["kv_connector"] == "LMCacheMPConnector"
    assert kv["kv_connector_extra_config"] == {
        "lmcache.mp.host": "tcp://aic-lmcache",
        "lmcache.mp.port": 6555,
        "lmcache.mp.heartbeat_interval": 900,
    }
    assert arg(spec["command"], "--kv-cache-dtype") == "fp8"
    golden("spur-vllm-spec.json", spec)


def test_spur_job_with_four_gpus_runs_four_vllm_containers_each_on_its_own_gpu():
    plan = build_plan(spur_inputs(aic_gpus="1,3,4,6"))[0]
    specs = [vllm_spec(plan, i) for i in range(len(plan["vllm_instances"]))]
    assert [s["name"] for s in specs] == ["aic-vllm", "aic-vllm-1", "aic-vllm-2", "aic-vllm-3"]
    # Each container sees exactly its GPU of the allocation, renumbered to device 0 for HIP.
    assert [s["env"]["ROCR_VISIBLE_DEVICES"] for s in specs] == ["1", "3", "4", "6"]
    assert {s["env"]["HIP_VISIBLE_DEVICES"] for s in specs} == {"0"}
    assert [arg(s["command"], "--port") for s in specs] == ["8000", "8001", "8002", "8003"]
    # All of them share the one LMCache server, which sees the whole allocation.
    assert {s["ipc_mode"] for s in specs} == {"container:aic-lmcache"}
    assert lmcache_env(plan)["ROCR_VISIBLE_DEVICES"] == "1,3,4,6"
    with pytest.raises(ValueError, match="vLLM instance 4 does not exist"):
        vllm_spec(plan, 4)
    golden("spur-vllm-spec-gpu3.json", specs[3])


def test_spur_without_a_gpu_allocation_never_falls_back_to_gpu0():
    plan = build_plan(spur_inputs(aic_gpus=""))[0]  # a build needs no GPU
    with pytest.raises(ValueError, match="^aic_gpus: no GPU allocation"):
        vllm_spec(plan, 0)
    with pytest.raises(ValueError, match="^aic_gpus: no GPU allocation"):
        lmcache_env(plan)


def test_spur_slot_smaller_than_a_chunk_fails_preflight():
    # 256 tokens x 8 KV heads x 64 x 2 x 36 layers x 1 byte (fp8) = 9437184 bytes per chunk.
    with pytest.raises(
        PlanError, match="^aic_lmcache_posix_slot_size: 4194304 bytes is smaller than one KV chunk of 9437184"
    ):
        build_plan(spur_inputs(aic_lmcache_posix_slot_size=4194304))


@pytest.mark.parametrize(
    "backend, expected",
    [
        ("none", []),
        ("nixl_posix", [("POSIX", "/data/nvme/lmcache", "false", "16777216", 32768)]),
        ("ais_mt", [("AIS_MT", "/data/nvme/lmcache", "true", "268435456", 4096)]),
        ("nfs", [("POSIX", "/data/nfs/lmcache", "false", "16777216", 1024)]),
        ("gds_l1", []),
    ],
)
def test_l2_adapter_per_backend(backend, expected):
    plan = build_plan({"aic_lmcache_l2_backend": backend, "aic_model_kv_dtype_bytes": 1})[0]
    argv = server_args(plan["lmcache"], plan["ports"])
    adapters = [json.loads(argv[i + 1]) for i, a in enumerate(argv) if a == "--l2-adapter"]
    got = [
        (
            a["backend"],
            a["backend_params"]["file_path"],
            a["backend_params"]["use_direct_io"],
            a["backend_params"]["file_size"],
            a["pool_size"],
        )
        for a in adapters
    ]
    assert got == expected
    assert ("--l2-prefetch-max-in-flight" in argv) == bool(expected)
    assert ("--gds-l1-path" in argv) == (backend == "gds_l1")


def test_unknown_backend_is_rejected_naming_the_variable():
    with pytest.raises(PlanError, match="^aic_lmcache_l2_backend: unknown backend 'gds'"):
        build_plan({"aic_lmcache_l2_backend": "gds"})


@pytest.mark.parametrize("inventory", ["spur", "local"])
def test_neither_vllm_nor_lmcache_sends_usage_statistics(inventory):
    """Both projects report usage to their servers by default; a node without egress made LMCache's SIGTERM take
    30 s (its usage threads flush at shutdown, each blocking until its timeout). Both containers opt out, each by
    the shared DO_NOT_TRACK and by its own switch, on every flavour."""
    if inventory == "spur":
        values = spur_inputs()
    else:
        values = yaml.safe_load((REPO / "inventories" / "local" / "group_vars" / "all" / "main.yml").read_text())
        # Its templated values (paths of its own directory, the host's CA files) are Ansible's to render.
        values = {k: v for k, v in values.items() if "{{" not in str(v)} | {"aic_work_dir": str(REPO / ".work")}
    plan = build_plan(values)[0]
    quiet = {"DO_NOT_TRACK": "1", "VLLM_NO_USAGE_STATS": "1", "LMCACHE_TRACK_USAGE": "false"}
    assert quiet.items() <= lmcache_env(plan).items()
    assert quiet.items() <= vllm_spec(plan)["env"].items()
