# Copyright: aic.stack contributors
# Apache-2.0
"""LMCache server command line from the plan: the L2 adapter JSON per backend and the KV chunk size check.

Pure functions shared by the plan (validation, before any host is touched) and the lmcache role's filter.
"""

from __future__ import annotations

import json
import math

L2_BACKENDS = ("none", "nixl_posix", "ais_mt", "gds_l1", "nfs", "fs")
# Paths inside the LMCache container; the host directories are bind-mounted there.
CONTAINER_PATHS = {"nvme": "/data/nvme", "nfs": "/data/nfs", "slab": "/data/slab"}
# The fs backend's directory: on the NVMe dir, apart from NIXL's slot files (another format).
FS_DIR = "lmcache-fs"
FS_PATH = f"{CONTAINER_PATHS['nvme']}/{FS_DIR}"


def kv_chunk_bytes(chunk_tokens, layers, kv_heads, head_dim, dtype_bytes):
    """Bytes of one LMCache chunk: tokens x KV heads x head dim x 2 (K and V) x layers x dtype size."""
    return int(chunk_tokens) * int(kv_heads) * int(head_dim) * 2 * int(layers) * int(dtype_bytes)


def slot_size_for(backend, lmcache):
    """(variable name, slot bytes) that must hold one chunk for ``backend``, or None when slots are not used."""
    if backend in ("nixl_posix", "nfs"):
        return "aic_lmcache_posix_slot_size", lmcache["posix_slot_size"]
    if backend == "ais_mt":
        return "aic_lmcache_nvme_slot_size", lmcache["nvme_slot_size"]
    return None


def _nixl_store(backend, file_path, direct_io, file_size, pool):
    # NIXL wants Mapping[str, str]: every backend parameter is a string.
    return {
        "type": "nixl_store",
        "backend": backend,
        "backend_params": {
            "file_path": file_path,
            "use_direct_io": "true" if direct_io else "false",
            "file_size": str(int(file_size)),
        },
        "pool_size": int(pool),
    }


def l2_adapters(lmcache):
    """The --l2-adapter specs (dicts) for the plan's backend."""
    backend = lmcache["l2_backend"]
    if backend == "nixl_posix":
        return [
            _nixl_store(
                "POSIX", f"{CONTAINER_PATHS['nvme']}/lmcache", False, lmcache["posix_slot_size"], lmcache["posix_pool"]
            )
        ]
    if backend == "ais_mt":
        return [
            _nixl_store(
                "AIS_MT",
                f"{CONTAINER_PATHS['nvme']}/lmcache",
                lmcache["direct_io"],
                lmcache["nvme_slot_size"],
                lmcache["nvme_pool"],
            )
        ]
    if backend == "nfs":
        return [
            _nixl_store(
                "POSIX", f"{CONTAINER_PATHS['nfs']}/lmcache", False, lmcache["posix_slot_size"], lmcache["nfs_pool"]
            )
        ]
    if backend == "fs":
        # LMCache's file-system adapter: a file per KV chunk, named after its key (written to a temporary file, then
        # renamed), looked up on disk - so what it stored survives an LMCache restart (NIXL's slots and LMCache's
        # index of them do not).
        return [{"type": "fs", "base_path": FS_PATH, "relative_tmp_dir": "tmp"}]
    return []


def server_args(lmcache, ports):
    """Full ``lmcache server`` argv (list of strings) for the plan's lmcache section and ports."""
    l1 = format(float(lmcache["l1_size_gb"]), ".12g")
    # --l1-init-size-gb is an integer; LMCache caps the initial allocation at the L1 size.
    l1_init = str(max(1, math.ceil(float(lmcache["l1_size_gb"]))))
    args = [
        "lmcache",
        "server",
        "--host",
        "0.0.0.0",
        "--port",
        str(ports["lmcache"]),
        "--http-host",
        "0.0.0.0",
        "--http-port",
        str(ports["lmcache_http"]),
        "--chunk-size",
        str(lmcache["chunk_size"]),
        "--max-gpu-workers",
        str(lmcache["max_gpu_workers"]),
        "--worker-reap-timeout-seconds",
        str(lmcache["worker_reap_timeout"]),
        "--supported-transfer-mode",
        "auto",
        "--shm-name",
        lmcache["shm_name"],
        "--eviction-policy",
        lmcache["eviction_policy"],
    ]
    if lmcache["l2_backend"] == "gds_l1":
        # The hipFile NVMe slab is L1 itself (size = --l1-size-gb); there is no L2.
        args += ["--gds-l1-path", CONTAINER_PATHS["slab"], "--l1-size-gb", l1]
    else:
        args += ["--l1-size-gb", l1, "--l1-init-size-gb", l1_init]
    adapters = l2_adapters(lmcache)
    if adapters:
        args += ["--l2-prefetch-max-in-flight", str(lmcache["l2_prefetch_max_in_flight"])]
        for adapter in adapters:
            args += ["--l2-adapter", json.dumps(adapter, sort_keys=True, separators=(",", ":"))]
    args.append("--separate-object-groups" if lmcache["separate_object_groups"] else "--no-separate-object-groups")
    return args
