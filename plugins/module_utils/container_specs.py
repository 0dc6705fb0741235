# Copyright: aic.stack contributors
# Apache-2.0
"""Container specs (command, env, devices, namespaces, mounts) for the LMCache and vLLM containers, from aic_plan.

Pure data, so the SPUR specs can be golden-tested without a GPU; the roles hand these values to
community.docker.docker_container unchanged.
"""

from __future__ import annotations

import json

# Baked into the rocm image as well; repeated here so a container never runs without them.
ROCM_ENV = {
    "HSA_ENABLE_IPC_MODE_LEGACY": "1",
    "SAFETENSORS_FAST_GPU": "1",
    "HIP_FORCE_DEV_KERNARG": "1",
    # ROCm reads the HIP name; expandable segments make the KV export fail with "invalid device pointer".
    "PYTORCH_HIP_ALLOC_CONF": "expandable_segments:False",
    "VLLM_TARGET_DEVICE": "rocm",
    "AMDGCN_USE_BUFFER_OPS": "0",
    "MIOPEN_FIND_MODE": "FAST",
}
# Neither vLLM nor LMCache sends its anonymous usage statistics (both report to their projects' servers by default;
# DO_NOT_TRACK is the convention both honour, each also has its own switch). Beyond what an operator expects of a
# node, it is what a node without egress needs: LMCache flushes its usage threads at shutdown, each blocking on the
# unreachable server until its 10 s timeout, so a SIGTERM took 30 s and ended in the engine's SIGKILL (measured on
# the rehearsal cluster's nodes, which have no route out); with it off, LMCache stops in about a second.
NO_USAGE_STATS_ENV = {"DO_NOT_TRACK": "1", "VLLM_NO_USAGE_STATS": "1", "LMCACHE_TRACK_USAGE": "false"}
# The plan's default for aic_rocm_devices (the GPU compute and render nodes).
ROCM_DEVICES = ["/dev/kfd", "/dev/dri"]
# Seconds the engine waits beyond vLLM's own drain (--shutdown-timeout) before it kills the container.
STOP_GRACE = 10
HF_MOUNT = "/hf"
# Where the vLLM guard (roles/vllm/files/aic_vllm_guard.py) is mounted in the vLLM containers, how often it looks at
# LMCache's start time (a GET of its /metrics), and how long a vLLM it ends gets after SIGTERM: none, its requests
# are hung on the old server and it would wait for them (--shutdown-timeout). A restarted LMCache costs its own
# restart, at most a second, and vLLM's start.
GUARD_MOUNT = "/opt/aic-guard/aic_vllm_guard.py"
GUARD_INTERVAL = 1
GUARD_GRACE = 0


def gpu_visibility(gpus):
    """ROCR_VISIBLE_DEVICES takes the absolute ids of the allocation; HIP/CUDA see them renumbered from 0."""
    gpus = [str(g) for g in gpus]
    if not gpus:
        return {}
    relative = ",".join(str(i) for i in range(len(gpus)))
    return {"ROCR_VISIBLE_DEVICES": ",".join(gpus), "HIP_VISIBLE_DEVICES": relative, "CUDA_VISIBLE_DEVICES": relative}


# The vLLM container's healthcheck: one 1-token completion, bounded by a timeout. vLLM's own /health answers 200 while
# its engine hangs (an LMCache server that restarted under it), so only a completion tells the truth. Standard library
# only and no site packages (-S): it starts in milliseconds next to a loaded engine. Arguments: URL, model, timeout.
HEALTHCHECK_PROBE = (
    "import json,sys,urllib.request as r;"
    "q=r.Request(sys.argv[1],json.dumps({'model':sys.argv[2],'prompt':'ping','max_tokens':1,'temperature':0})"
    ".encode(),{'Content-Type':'application/json'});"
    "sys.exit(0 if json.load(r.urlopen(q,timeout=float(sys.argv[3]))).get('choices') else 1)"
)


def vllm_healthcheck(plan, port):
    """docker_container's healthcheck for the vLLM instance on ``port``: a hung engine fails a probe within
    ``timeout`` seconds of the hang, however the hang falls between two runs; test NONE (explicitly none, so a container
    that had one is recreated without it) when aic_vllm_healthcheck_interval is 0."""
    check = plan["vllm"]["healthcheck"]
    if not check["interval"]:
        return {"test": ["NONE"]}
    interval, timeout = int(check["interval"]), int(check["timeout"])
    url = f"http://127.0.0.1:{port}/v1/completions"
    # The wait for the next run counts: a probe that starts up to interval seconds after the hang began still reports
    # it within timeout seconds of it (the plan keeps timeout above interval).
    budget = max(timeout - interval, 1)
    probe = ["python3", "-S", "-c", HEALTHCHECK_PROBE, url, plan["vllm"]["model_name"], str(budget)]
    return {
        "test": ["CMD", *probe],
        "interval": f"{int(check['interval'])}s",
        "timeout": f"{timeout}s",
        "retries": int(check["retries"]),
        "start_period": f"{int(check['start_period'])}s",
    }


def kv_transfer_config(plan):
    extra = {
        "lmcache.mp.host": f"tcp://{plan['containers']['lmcache']}",
        "lmcache.mp.port": int(plan["ports"]["lmcache"]),
        "lmcache.mp.heartbeat_interval": int(plan["vllm"]["heartbeat_interval"]),
    }
    config = {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both", "kv_connector_extra_config": extra}
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def _namespace(mode, lmcache_container):
    """Docker's value for a namespace mode of the plan. Never None: an omitted option is never compared, so a
    container once created with LMCache's PID namespace would keep it after the setting was taken away; "" is
    Docker's own default (a private namespace) and is compared like any other value."""
    if mode == "lmcache":
        return f"container:{lmcache_container}"
    return mode or ""


GPU_ALLOCATION_ERROR = (
    "aic_gpus: no GPU allocation for the rocm flavour; set it from the job (e.g. SLURM_JOB_GPUS) - "
    "vLLM and LMCache never default to GPU 0"
)


def vllm_spec(plan, index=0):
    """docker_container parameters of vLLM instance ``index`` (plan["vllm_instances"]): on rocm it sees exactly
    GPU ``index`` of the allocation, never a silent GPU 0."""
    vllm = plan["vllm"]
    rocm = plan["flavour"] == "rocm"
    instances = plan["vllm_instances"]
    if not 0 <= index < len(instances):
        raise ValueError(f"vLLM instance {index} does not exist: the plan has {len(instances)} (aic_vllm_instances)")
    instance = instances[index]
    if rocm and instance["gpu"] is None:
        raise ValueError(GPU_ALLOCATION_ERROR)
    command = [
        "python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--host",
        "0.0.0.0",
        "--port",
        str(instance["port"]),
        "--model",
        vllm["model"],
        "--served-model-name",
        vllm["model_name"],
        "--max-model-len",
        str(vllm["max_model_len"]),
        "--dtype",
        vllm["dtype"],
    ]
    if rocm:
        command += [
            "--gpu-memory-utilization",
            format(vllm["gpu_memory_utilization"], "g"),
            "--kv-cache-dtype",
            vllm["kv_cache_dtype"],
            "--enable-prefix-caching",
        ]
    else:
        command += ["--enforce-eager"]
    if vllm.get("lmcache", True):
        command += ["--kv-transfer-config", kv_transfer_config(plan)]
    drain = int(vllm.get("drain_timeout", 0))
    if drain:
        # SIGTERM: refuse new requests, let in-flight ones finish for up to `drain` seconds (vLLM >= 0.18).
        command += ["--shutdown-timeout", str(drain)]
    command += list(vllm["extra_args"])
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **NO_USAGE_STATS_ENV}
    mounts = []
    if vllm.get("lmcache", True):
        # The guard runs vLLM and ends the container when the LMCache server restarted under it (the restart policy
        # then attaches a fresh vLLM): a restarted LMCache otherwise hangs vLLM behind a green /health.
        lmcache_url = f"http://{plan['containers']['lmcache']}:{plan['ports']['lmcache_http']}"
        guard = ["python3", GUARD_MOUNT, "--lmcache-url", lmcache_url]
        guard += ["--interval", str(GUARD_INTERVAL), "--grace", str(GUARD_GRACE), "--"]
        command = guard + command
        mounts.append({"type": "bind", "source": plan["paths"]["vllm_guard"], "target": GUARD_MOUNT, "read_only": True})
    devices = []
    if rocm:
        env.update(ROCM_ENV)
        env.update(gpu_visibility([instance["gpu"]]))
        env.update(HF_HOME=HF_MOUNT, VLLM_CACHE_ROOT=f"{HF_MOUNT}/vllm", TORCH_HOME=f"{HF_MOUNT}/torch")
        mounts.append({"type": "bind", "source": plan["paths"]["hf_home"], "target": HF_MOUNT})
        devices = list(plan.get("rocm_devices") or ROCM_DEVICES)
    else:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(vllm["cpu_kvcache_space_gb"])
    return {
        "name": instance["name"],
        "port": instance["port"],
        "gpu": instance["gpu"],
        "command": command,
        "env": env,
        "devices": devices,
        "mounts": mounts,
        "ipc_mode": _namespace(vllm["ipc_mode"], plan["containers"]["lmcache"]),
        "pid_mode": _namespace(vllm["pid_mode"], plan["containers"]["lmcache"]),
        # docker stop waits this long after SIGTERM before SIGKILL: the drain plus a grace period.
        "stop_timeout": drain + STOP_GRACE,
        "healthcheck": vllm_healthcheck(plan, instance["port"]),
    }


def lmcache_env(plan):
    """LMCache sees the same GPUs as the vLLM containers it serves (never a silent GPU 0); it sends no usage
    statistics (NO_USAGE_STATS_ENV)."""
    env = {
        "NIXL_TELEMETRY_ENABLE": "y",
        "NIXL_TELEMETRY_EXPORTER": "prometheus",
        "NIXL_TELEMETRY_PROMETHEUS_PORT": str(plan["ports"]["nixl_telemetry"]),
        **NO_USAGE_STATS_ENV,
    }
    if plan["flavour"] == "rocm":
        if not plan["gpus"]:
            raise ValueError(GPU_ALLOCATION_ERROR)
        env.update(ROCM_ENV)
        env.update(gpu_visibility(plan["gpus"]))
    return env
