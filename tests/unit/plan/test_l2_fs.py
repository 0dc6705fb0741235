"""The fs L2 backend: LMCache's file-system adapter on the NVMe dir (a file per KV chunk, kept across restarts)."""

from __future__ import annotations

import json
import pathlib

import yaml

from ansible_collections.aic.stack.plugins.module_utils import lmcache_args
from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"


def adapters(args):
    return [json.loads(args[i + 1]) for i, a in enumerate(args) if a == "--l2-adapter"]


def test_fs_puts_one_file_system_adapter_on_its_own_directory_of_the_nvme_dir():
    plan, warnings = build_plan({"aic_lmcache_l2_backend": "fs", "aic_lmcache_nvme_dir": "/mnt/nvme/aic"})
    assert warnings == []
    assert plan["lmcache"]["l2_backend"] == "fs"
    assert plan["paths"]["l2_dirs"] == ["/mnt/nvme/aic/lmcache-fs"]
    args = lmcache_args.server_args(plan["lmcache"], plan["ports"])
    assert adapters(args) == [{"type": "fs", "base_path": "/data/nvme/lmcache-fs", "relative_tmp_dir": "tmp"}]
    assert "--l2-prefetch-max-in-flight" in args
    # Not NIXL: no NIXL telemetry target to scrape, and no slot size to check against the chunk.
    assert "nixl" not in json.dumps(plan["monitoring"])
    assert lmcache_args.slot_size_for("fs", plan["lmcache"]) is None


def test_the_nixl_backend_keeps_its_directory_apart_from_fs():
    plan, _dummy = build_plan({"aic_lmcache_l2_backend": "nixl_posix", "aic_lmcache_nvme_dir": "/mnt/nvme/aic"})
    assert plan["paths"]["l2_dirs"] == ["/mnt/nvme/aic/lmcache"]
    assert [a["type"] for a in adapters(lmcache_args.server_args(plan["lmcache"], plan["ports"]))] == ["nixl_store"]


def test_every_backend_has_its_tier_mount_and_the_fs_one_is_the_nvme_dir():
    mounts = yaml.safe_load((ROLES / "lmcache" / "defaults" / "main.yml").read_text())["lmcache_tier_mounts"]
    assert sorted(mounts) == sorted(lmcache_args.L2_BACKENDS)
    assert mounts["fs"] == [
        {"type": "bind", "source": "{{ aic_plan.paths.nvme_dir }}", "target": lmcache_args.CONTAINER_PATHS["nvme"]}
    ]
    assert lmcache_args.FS_PATH.startswith(lmcache_args.CONTAINER_PATHS["nvme"] + "/")
