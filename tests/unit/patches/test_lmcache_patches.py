"""LMCache v0.5.2 patches 01-08 behave as their headers say; the released code does not.

The LMCache modules cannot be imported here (they need torch, vLLM, NIXL, the native extensions and a
GPU). As in test_patched_code.py, each test takes the real file from the pinned wheel - with the whole
series applied ("patched") or as released ("pristine") - extracts the definitions it exercises with
``ast`` and runs them. The fakes (each named ``Fake...``) stand in only for what needs torch, vLLM, NIXL,
a GPU DMA path, LMCache's native extensions or an OTel SDK; the other LMCache code involved (cache keys,
the chunked token database, the Bloom filter, the path sharder, the store results) is the real code of
the wheel.

Every check runs both ways: it passes on the patched tree and fails on the pristine one with an
AssertionError that names the old behaviour (``_run_both_ways``).
"""

from __future__ import annotations
import __future__

import abc
import array
import ast
import asyncio
import bisect
import enum
import functools
import hashlib
import io
import json
import logging
import math
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import types
import typing
import uuid
from collections import namedtuple
from dataclasses import dataclass, field

import pytest
from nixl_agent import NixlAgentStandIn

from ansible_collections.aic.stack.plugins.module_utils.patching import list_patches, touched_paths

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
SERIES = REPO_ROOT / "patches" / "lmcache" / "v0.5.2"

VLLM_ADAPTER = "lmcache/integration/vllm/vllm_v1_adapter.py"
LOCAL_CPU = "lmcache/v1/storage_backend/local_cpu_backend.py"
GDS_BACKEND = "lmcache/v1/storage_backend/gds_backend.py"
RECORD_STRATEGIES = "lmcache/v1/lookup_client/record_strategies"
NIXL_BACKEND = "lmcache/v1/storage_backend/nixl_storage_backend.py"
L1_MANAGER = "lmcache/v1/distributed/l1_manager.py"
GDS_CONTEXT = "lmcache/v1/gpu_connector/gds_context.py"
NIXL_L2 = "lmcache/v1/distributed/l2_adapters/nixl_store_l2_adapter.py"
# Not touched by the series: the same file in both trees.
UTILS = "lmcache/utils.py"
TOKEN_DATABASE = "lmcache/v1/token_database.py"
BLOOM_FILTER = "lmcache/v1/utils/bloom_filter.py"
PATH_SHARDER = "lmcache/v1/storage_backend/path_sharder.py"
INTERNAL_API = "lmcache/v1/distributed/internal_api.py"

PAGE = 4096
MASK64 = (1 << 64) - 1


# -- the two trees -----------------------------------------------------------------------------


class Tree:
    """The LMCache sources of one side: ``patched`` (whole series applied) or ``pristine``."""

    def __init__(self, name, root, pristine):
        self.name = name
        self.root = root
        self.pristine = pristine

    @property
    def patched(self):
        return self.name == "patched"

    def read(self, relpath):
        """The file's text; the patched tree holds only the files the series touches."""
        path = self.root / relpath
        return (path if path.is_file() else self.pristine / relpath).read_text()


@pytest.fixture(scope="module")
def patched_root(pinned_sources, tmp_path_factory):
    """The files the series touches, copied from the wheel and patched (``git apply``, lexical order), once."""
    source = pinned_sources["lmcache"]
    dest = tmp_path_factory.mktemp("lmcache-patched")
    patches = list_patches(str(SERIES))
    for patch in patches:
        for rel in touched_paths(patch):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / rel, dest / rel)
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(dest.parent))
    proc = subprocess.run(
        ["git", "apply", *patches], cwd=dest, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return dest


@pytest.fixture(params=["patched", "pristine"])
def tree(request, pinned_sources):
    pristine = pinned_sources["lmcache"]
    if request.param == "patched":
        return Tree("patched", request.getfixturevalue("patched_root"), pristine)
    return Tree("pristine", pristine, pristine)


def _run_both_ways(tree, check, *args, **kwargs):
    """Run ``check``: it must pass on the patched tree and fail (AssertionError) on the pristine one."""
    if tree.patched:
        check(*args, **kwargs)
        return None
    with pytest.raises(AssertionError) as failure:
        check(*args, **kwargs)
    return str(failure.value)


# -- loading upstream definitions ----------------------------------------------------------------


@functools.cache
def _top_level(text):
    """``(lines, {name: node})`` of the module's top-level functions, classes and simple assignments."""
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found[node.target.id] = node
    return text.splitlines(), found


def _source(lines, node, decorators=True):
    """The (dedented) source lines of ``node``, with its decorators unless ``decorators`` is false."""
    first = node.lineno
    if decorators and getattr(node, "decorator_list", None):
        first = min(d.lineno for d in node.decorator_list)
    return textwrap.dedent("\n".join(lines[first - 1 : node.end_lineno]))


def _exec(source, label, namespace):
    code = compile(source, label, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)  # noqa: S102 - running the upstream definition is the point of the test


def _load(text, names, namespace, optional=()):
    """Exec the top-level definitions ``names`` of ``text`` (in that order) in ``namespace``.

    Names in ``optional`` are loaded when the file defines them (new in the patched tree).
    """
    lines, defined = _top_level(text)
    for name in names:
        if name not in defined:
            if name in optional:
                continue
            raise AssertionError(f"{name} not found")
        _exec(_source(lines, defined[name]), f"<{name}>", namespace)
    return namespace


def _method(text, class_name, name, namespace):
    """The method ``class_name.name`` of ``text`` as a plain function (decorators dropped)."""
    lines, defined = _top_level(text)
    for node in defined[class_name].body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            _exec(_source(lines, node, decorators=False), f"<{name}>", namespace)
            return namespace[name]
    raise AssertionError(f"{class_name}.{name} not found")


def _namespace(name, **names):
    # __name__ is this module: dataclasses look string annotations up in the class's module, which must
    # be in sys.modules. ``name`` names the logger the upstream code logs to.
    namespace = {"__name__": __name__, "logger": logging.getLogger(name)}
    namespace.update(names)
    return namespace


def _identity(func):
    return func


def _messages(caplog, logger_name, text):
    """``(level, message)`` of the records of ``logger_name`` whose message contains ``text``."""
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == logger_name and text in r.getMessage()]


# -- fakes shared by several patches -------------------------------------------------------------

FakeDtype = namedtuple("FakeDtype", "name")
FAKE_BF16 = FakeDtype("bfloat16")


def _fake_torch():
    """Stands in for torch where LMCache only uses it for type checks, dtypes and annotations."""

    class FakeTensor:
        pass

    return types.SimpleNamespace(Tensor=FakeTensor, uint8=FakeDtype("uint8"), bfloat16=FAKE_BF16)


def _cache_engine_key_class(tree):
    """The real CacheEngineKey of lmcache/utils.py (a torch dtype replaced by a named fake)."""
    namespace = _namespace(
        "fake_lmcache_utils",
        dataclass=dataclass,
        field=field,
        Optional=typing.Optional,
        List=list,
        TORCH_DTYPE_TO_STR_DTYPE={FAKE_BF16: "bfloat16"},
        STR_DTYPE_TO_TORCH_DTYPE={"bfloat16": FAKE_BF16},
    )
    return _load(tree.read(UTILS), ["CacheEngineKey"], namespace)["CacheEngineKey"]


def _fake_sha256_cbor(obj):
    """Stands in for vLLM's sha256_cbor (vLLM needs torch): a 32-byte digest of the object."""
    return hashlib.sha256(repr(obj).encode()).digest()


def _install_fake_vllm_hashing(monkeypatch):
    """Fake ``vllm.utils.hashing`` and ``vllm.v1.core.kv_cache_utils`` (vLLM itself needs torch).

    ``init_none_hash`` behaves as vLLM's with PYTHONHASHSEED set: the seed hashed with the given function.
    """

    def get_hash_fn_by_name(name):
        functions = {"builtin": hash, "sha256_cbor": _fake_sha256_cbor}
        if name not in functions:
            raise ValueError(name)
        return functions[name]

    kv_cache_utils = types.ModuleType("vllm.v1.core.kv_cache_utils")
    kv_cache_utils.NONE_HASH = None

    def init_none_hash(hash_fn):
        kv_cache_utils.NONE_HASH = hash_fn("0")

    kv_cache_utils.init_none_hash = init_none_hash
    hashing = types.ModuleType("vllm.utils.hashing")
    hashing.get_hash_fn_by_name = get_hash_fn_by_name
    modules = {
        "vllm": types.ModuleType("vllm"),
        "vllm.utils": types.ModuleType("vllm.utils"),
        "vllm.utils.hashing": hashing,
        "vllm.v1": types.ModuleType("vllm.v1"),
        "vllm.v1.core": types.ModuleType("vllm.v1.core"),
        "vllm.v1.core.kv_cache_utils": kv_cache_utils,
    }
    for parent, child in (
        ("vllm", "utils"),
        ("vllm.utils", "hashing"),
        ("vllm", "v1"),
        ("vllm.v1", "core"),
        ("vllm.v1.core", "kv_cache_utils"),
    ):
        setattr(modules[parent], child, modules[f"{parent}.{child}"])
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)


def _token_database_class(tree, monkeypatch):
    """The real ChunkedTokenDatabase (lmcache/v1/token_database.py) over the fake vLLM hashing."""
    _install_fake_vllm_hashing(monkeypatch)
    namespace = _namespace(
        "fake_lmcache_token_database",
        abc=abc,
        os=os,
        torch=_fake_torch(),
        CacheEngineKey=_cache_engine_key_class(tree),
        _lmcache_nvtx_annotate=_identity,
        Any=typing.Any,
        Iterable=typing.Iterable,
        List=list,
        Optional=typing.Optional,
        Tuple=tuple,
        Union=typing.Union,
    )
    names = ["NONE_HASH", "_normalize_hash_to_int", "TokenDatabase", "ChunkedTokenDatabase"]
    return _load(tree.read(TOKEN_DATABASE), names, namespace)["ChunkedTokenDatabase"]


class FakeEngineConfig:
    """The few LMCacheEngineConfig fields the token database and the chunk-statistics recorders read."""

    def __init__(self, output_dir=None):
        self.chunk_size = 4
        self.pre_caching_hash_algorithm = "sha256_cbor"
        self.save_unfull_chunk = False
        self.remote_url = None
        self.enable_pd = False
        self.extra_config = {
            "chunk_statistics_file_output_dir": str(output_dir),
            "chunk_statistics_mem_bf_expected_chunks": 1000,
        }

    def get_extra_config_value(self, key, default):
        return self.extra_config.get(key, default)


METADATA = types.SimpleNamespace(model_name="demo/model", world_size=1, worker_id=0, kv_dtype=FAKE_BF16, use_mla=False)


# -- 01: vLLM cache_salt becomes the lmcache.tag.cachesalt tag of the request's keys -------------


class FakeLookupClient:
    """Stands in for the scheduler-side lookup client: records the request configs of each lookup."""

    def __init__(self, hits):
        self.hits = hits
        self.configs = []

    def lookup_cache(self, lookup_id):
        return -1  # no cached result: look up

    def lookup(self, token_ids, lookup_id, request_configs=None):
        self.configs.append(request_configs)
        return self.hits


class FakeVllmRequest:
    """Stands in for vllm.v1.request.Request (what get_num_new_matched_tokens and the tracker read)."""

    def __init__(self, req_id, token_ids, cache_salt):
        self.request_id = req_id
        self.all_token_ids = list(token_ids)
        self.prompt_token_ids = list(token_ids)
        self.num_tokens = len(token_ids)
        self.sampling_params = types.SimpleNamespace(extra_args=None)
        self.cache_salt = cache_salt


class FakeConnectorMetadata:
    def __init__(self):
        self.requests = []

    def add_request(self, req_meta):
        self.requests.append(req_meta)


class FakeReqMeta:
    """Stands in for ReqMeta (which builds torch slot mappings): keeps the tracker's request configs."""

    @staticmethod
    def from_request_tracker(tracker, block_size, chunk_size, load_spec=None, **kwargs):
        return types.SimpleNamespace(req_id=tracker.req_id, request_configs=tracker.request_configs)


def _vllm_adapter(tree):
    """The patched/pristine adapter's request-config, lookup and connector-metadata code."""
    text = tree.read(VLLM_ADAPTER)
    namespace = _namespace(
        "fake_vllm_v1_adapter",
        dataclass=dataclass,
        field=field,
        hashlib=hashlib,
        Optional=typing.Optional,
        _lmcache_nvtx_annotate=_identity,
        extract_mm_features=lambda request, modify=False: ([], []),
        apply_mm_hashes_to_token_ids=None,
        tmp_disagg_tracker={},
        ReqMeta=FakeReqMeta,
        LMCacheConnectorMetadata=FakeConnectorMetadata,
    )
    names = ["CACHE_SALT_TAG", "_cache_salt_tag_value", "extract_request_configs", "LoadSpec", "RequestTracker"]
    _load(text, names, namespace, optional={"CACHE_SALT_TAG", "_cache_salt_tag_value"})
    lookup = _method(text, "LMCacheConnectorV1Impl", "get_num_new_matched_tokens", namespace)
    build_meta = _method(text, "LMCacheConnectorV1Impl", "build_connector_meta", namespace)
    return lookup, build_meta


def _connector(tokens):
    """The LMCacheConnectorV1Impl state the two methods use (scheduler side, kv_both, no limits)."""
    return types.SimpleNamespace(
        kv_role="kv_both",
        lookup_client=FakeLookupClient(hits=len(tokens)),
        skip_last_n_tokens=0,
        _requests_priority={},
        config=types.SimpleNamespace(min_retrieve_tokens=0, priority_limit=None, save_decode_cache=False),
        _max_tokens_per_load=0,
        _lmcache_chunk_size=4,
        load_specs={},
        force_skip_save=False,
        _request_trackers={},
        _unfinished_requests={},
        _block_size=4,
        _discard_partial_chunks=True,
    )


def check_01_cache_salt_isolates_keys(tree, monkeypatch):
    lookup, build_meta = _vllm_adapter(tree)
    storage = _token_database_class(tree, monkeypatch)(FakeEngineConfig(), METADATA)
    tokens = list(range(100, 112))  # three chunks of 4

    def keys(request_configs):
        return [
            key.to_string() for _dummy, _dummy, key in storage.process_tokens(tokens, request_configs=request_configs)
        ]

    def lookup_keys(salt):
        """Keys of the scheduler's lookup (get_num_new_matched_tokens) for a request with ``salt``."""
        connector = _connector(tokens)
        assert lookup(connector, FakeVllmRequest("req-1", tokens, salt), 0) == len(tokens) - 1
        (configs,) = connector.lookup_client.configs
        return keys(configs)

    def store_keys(salt):
        """Keys the worker stores for the request: build_connector_meta's request configs."""
        connector = _connector(tokens)
        new_request = types.SimpleNamespace(
            req_id="req-1",
            prompt_token_ids=tokens,
            block_ids=([0, 1, 2],),
            num_computed_tokens=0,
            sampling_params=types.SimpleNamespace(extra_args=None),
        )
        connector._unfinished_requests["req-1"] = FakeVllmRequest("req-1", tokens, salt)  # update_state_after_alloc
        output = types.SimpleNamespace(
            finished_req_ids=[],
            scheduled_new_reqs=[new_request],
            num_scheduled_tokens={"req-1": len(tokens)},
            scheduled_cached_reqs=types.SimpleNamespace(req_ids=[], new_block_ids=[]),
        )
        (req_meta,) = build_meta(connector, output).requests
        return keys(req_meta.request_configs)

    unsalted = keys(None)
    assert lookup_keys(None) == lookup_keys("") == store_keys(None) == unsalted  # no salt: keys unchanged
    tenant_a = lookup_keys("tenant-a")
    assert lookup_keys("tenant-a") == tenant_a, "the same salt must give the same keys"
    assert tenant_a != lookup_keys("tenant-b"), "two cache salts share the same LMCache keys (lookup)"
    assert tenant_a != unsalted, "a salted request shares the keys of unsalted requests"
    assert store_keys("tenant-a") == tenant_a, "the stored keys of a salted request are not the keys it looks up"
    assert store_keys("tenant-b") != tenant_a, "two cache salts share the same LMCache keys (store)"
    digest = hashlib.sha256(b"tenant-a").hexdigest()
    assert all(key.endswith(f"@cachesalt%{digest}") for key in tenant_a), tenant_a  # sha256 hex, no raw salt


def test_01_cache_salt_isolates_keys(tree, monkeypatch):
    failure = _run_both_ways(tree, check_01_cache_salt_isolates_keys, tree, monkeypatch)
    if failure is not None:
        assert "two cache salts share the same LMCache keys" in failure


def test_01_salt_with_key_delimiters_stays_one_tag(patched_root, pinned_sources):
    """A raw salt may contain LMCache's key delimiters; the key still parses back to the same key."""
    tree = Tree("patched", patched_root, pinned_sources["lmcache"])
    namespace = _namespace("fake_vllm_v1_adapter", hashlib=hashlib, Optional=typing.Optional)
    _load(tree.read(VLLM_ADAPTER), ["CACHE_SALT_TAG", "_cache_salt_tag_value", "extract_request_configs"], namespace)
    sampling = types.SimpleNamespace(extra_args={"kv_transfer_params": {"lmcache.skip_save": True}})
    configs = namespace["extract_request_configs"](sampling, cache_salt="a@b%c")
    assert configs == {
        "lmcache.skip_save": True,
        "lmcache.tag.cachesalt": hashlib.sha256(b"a@b%c").hexdigest(),
    }
    key_class = _cache_engine_key_class(tree)
    key = key_class("demo/model", 1, 0, 0x1234, FAKE_BF16, configs)
    assert key_class.from_string(key.to_string()) == key


# -- 02: "Controller message sender is not initialized" at DEBUG unless a controller is enabled ---


class FakeBackendBase:
    """Stands in for the storage backend interfaces (their module imports torch)."""

    def __init__(self, dst_device="cpu"):
        self.dst_device = dst_device


def check_02_controller_sender_message(tree, caplog):
    namespace = _namespace(
        "fake_local_cpu_backend",
        AllocatorBackendInterface=FakeBackendBase,
        torch_dev=types.SimpleNamespace(is_available=lambda: False),  # no CUDA/HIP device here
        torch_device_type="cpu",
        threading=threading,
        get_cache_policy=lambda name: types.SimpleNamespace(init_mutable_mapping=dict),
        LMCStatsMonitor=types.SimpleNamespace(GetOrCreate=lambda: None),
        _lmcache_nvtx_annotate=_identity,
    )
    backend_class = _load(tree.read(LOCAL_CPU), ["LocalCPUBackend"], namespace)["LocalCPUBackend"]

    def level(enable_controller):
        caplog.clear()
        config = types.SimpleNamespace(
            cache_policy="LRU",
            local_cpu=True,
            lmcache_instance_id="lmcache-test",
            use_layerwise=False,
            enable_blending=False,
            enable_controller=enable_controller,
        )
        # No LMCacheWorker: the backend has no controller message sender.
        backend = backend_class(config, metadata=None, memory_allocator=object(), lmcache_worker=None)
        assert backend.batched_msg_sender is None
        (record,) = _messages(caplog, "fake_local_cpu_backend", "Controller message sender is not initialized")
        return record[0]

    with caplog.at_level(logging.DEBUG, logger="fake_local_cpu_backend"):
        assert level(enable_controller=False) == logging.DEBUG, "WARNING although no controller is configured"
        assert level(enable_controller=True) == logging.WARNING  # a controller was asked for: still a warning


def test_02_controller_sender_warning_only_with_a_controller(tree, caplog):
    failure = _run_both_ways(tree, check_02_controller_sender_message, tree, caplog)
    if failure is not None:
        assert "WARNING although no controller is configured" in failure


# -- 03: "GDS Backend does not support eviction" at DEBUG unless an allocation fails --------------


class FakeGdsAllocator:
    """Stands in for the cuFile/hipFile buffer allocator (GPU memory): allocates ``free`` objects."""

    def __init__(self, free):
        self.free = free

    def allocate(self, shapes, dtypes, fmt):
        if self.free < 1:
            return None
        self.free -= 1
        return "memory-obj"

    def batched_allocate(self, shapes, dtypes, batch_size, fmt):
        if self.free < batch_size:
            return None
        self.free -= batch_size
        return ["memory-obj"] * batch_size

    def memcheck(self):
        return True


def check_03_no_eviction_message(tree, caplog):
    text = tree.read(GDS_BACKEND)
    namespace = _namespace(
        "fake_gds_backend", time=time, MemoryFormat=types.SimpleNamespace(KV_2LTD="KV_2LTD"), torch=_fake_torch()
    )
    allocate = _method(text, "GdsBackend", "allocate", namespace)
    batched_allocate = _method(text, "GdsBackend", "batched_allocate", namespace)

    def backend(free):
        return types.SimpleNamespace(
            max_alloc_attempts=2, alloc_attempt_delay_secs=0, memory_allocator=FakeGdsAllocator(free)
        )

    def eviction_levels():
        return {level for level, _dummy in _messages(caplog, "fake_gds_backend", "does not support eviction")}

    with caplog.at_level(logging.DEBUG, logger="fake_gds_backend"):
        # Room in the buffer: asking for eviction (StorageManager always does) is no reason to warn.
        assert allocate(backend(free=4), "shape", "dtype") == "memory-obj"
        assert batched_allocate(backend(free=4), "shape", "dtype", 3) == ["memory-obj"] * 3
        assert eviction_levels() == {logging.DEBUG}, "WARNING on an allocation that needed no eviction"
        # Full buffer: now the missing eviction matters, and says so.
        caplog.clear()
        assert allocate(backend(free=0), "shape", "dtype") is None
        assert logging.WARNING in eviction_levels()
        caplog.clear()
        assert batched_allocate(backend(free=2), "shape", "dtype", 3) is None
        assert logging.WARNING in eviction_levels()
        # eviction=False: nothing about eviction at all.
        caplog.clear()
        assert allocate(backend(free=0), "shape", "dtype", eviction=False) is None
        assert eviction_levels() == set()


def test_03_no_eviction_warning_only_when_an_allocation_fails(tree, caplog):
    failure = _run_both_ways(tree, check_03_no_eviction_message, tree, caplog)
    if failure is not None:
        assert "WARNING on an allocation that needed no eviction" in failure


# -- 04: the chunk-statistics hasher uses the engine config, so its hashes are the storage keys' ---


def _record_strategies(tree, token_database_class):
    base = _namespace(
        "fake_record_strategies_base",
        ABC=abc.ABC,
        abstractmethod=abc.abstractmethod,
        threading=threading,
        ChunkedTokenDatabase=token_database_class,
        Any=typing.Any,
        Optional=typing.Optional,
        Union=typing.Union,
        torch=_fake_torch(),
    )
    record_strategy = _load(tree.read(f"{RECORD_STRATEGIES}/base.py"), ["RecordStrategy"], base)["RecordStrategy"]
    file_hash = _namespace(
        "fake_file_hash",
        RecordStrategy=record_strategy,
        Path=pathlib.Path,
        Optional=typing.Optional,
        cast=typing.cast,
        io=io,
        json=json,
        time=time,
    )
    bloom = _namespace("fake_bloom_filter", Union=typing.Union, array=array, hashlib=hashlib)
    bloom["math"] = math
    _load(tree.read(BLOOM_FILTER), ["BloomFilter"], bloom)
    memory_bloom = _namespace(
        "fake_memory_bloom_filter", RecordStrategy=record_strategy, BloomFilter=bloom["BloomFilter"]
    )
    return (
        _load(tree.read(f"{RECORD_STRATEGIES}/file_hash.py"), ["FileHashStrategy"], file_hash)["FileHashStrategy"],
        _load(tree.read(f"{RECORD_STRATEGIES}/memory_bloom_filter.py"), ["MemoryBloomFilterStrategy"], memory_bloom)[
            "MemoryBloomFilterStrategy"
        ],
    )


def check_04_hasher_and_storage_agree(tree, monkeypatch, tmp_path):
    token_database_class = _token_database_class(tree, monkeypatch)
    file_hash_class, bloom_class = _record_strategies(tree, token_database_class)
    config = FakeEngineConfig(tmp_path / "chunk_hashes")  # sha256_cbor, chunks of 4, no unfull chunk
    tokens = list(range(7, 17))  # two full chunks and a partial one

    # The storage (cache engine / lookup client) keys, then the recorders built beside it.
    storage = token_database_class(config, METADATA)
    stored = [key for _dummy, _dummy, key in storage.process_tokens(tokens)]
    assert len(stored) == 2
    recorder = file_hash_class(config, config.chunk_size)
    bloom = bloom_class(config, config.chunk_size)
    try:
        restored = [key for _dummy, _dummy, key in storage.process_tokens(tokens)]
        assert restored == stored, "building the recorder changed the keys the storage computes"
        recorded = recorder.preprocess(tokens)
        assert recorded == [hex(key.chunk_hash & MASK64) for key in stored], (
            f"recorded chunk hashes {recorded} are not the stored keys' {[k.chunk_hash_hex for k in stored]}"
        )
        assert bloom._compute_chunk_hashes(tokens) == [key.chunk_hash for key in stored]
        # What the recorder writes to its file is what the storage holds.
        recorder.record(recorded, "lookup-1")
        recorder.close()
        (written,) = (tmp_path / "chunk_hashes").glob("chunk_hashes_*.jsonl")
        assert json.loads(written.read_text())["chunk_hashes"] == recorded
    finally:
        recorder.close()


def test_04_chunk_statistics_hashes_match_storage_keys(tree, monkeypatch, tmp_path):
    failure = _run_both_ways(tree, check_04_hasher_and_storage_agree, tree, monkeypatch, tmp_path)
    if failure is not None:
        assert "changed the keys" in failure or "are not the stored keys" in failure


# -- 05: the AIS_MT file pool sizes each slot (fds[index]) to slot_size before its first write ----


class FakeStaticNixlAgent:
    """Stands in for NixlStaticStorageAgent (NIXL): records the slot files' sizes when a write is posted."""

    def __init__(self, pool):
        self.pool = pool
        self.writes = []

    def get_mem_to_storage_handle(self, mem_indices, storage_indices):
        sizes = {index: os.fstat(self.pool.fds[index]).st_size for index in storage_indices}
        self.writes.append(sizes)
        return ("WRITE", tuple(storage_indices))

    def post_blocking(self, handle):
        pass

    def release_handle(self, handle):
        pass


def _nixl_backend_module(tree):
    sharder = _namespace(
        "fake_path_sharder", os=os, List=list, torch_dev=types.SimpleNamespace(is_available=lambda: False)
    )
    _load(tree.read(PATH_SHARDER), ["_resolve_device_id", "PathSharder"], sharder)
    namespace = _namespace(
        "fake_nixl_storage_backend",
        ABC=abc.ABC,
        abstractmethod=abc.abstractmethod,
        dataclass=dataclass,
        threading=threading,
        os=os,
        uuid=uuid,
        asyncio=asyncio,
        List=list,
        Optional=typing.Optional,
        Union=typing.Union,
        Any=typing.Any,
        PathSharder=sharder["PathSharder"],
        NixlStorageBackend=FakeBackendBase,
    )
    names = [
        "NixlStorageConfig",
        "NixlDescPool",
        "NixlFilePool",
        "NixlObjectPool",
        "NixlKeyMetadata",
        "NixlStaticStorageBackend",
    ]
    return _load(tree.read(NIXL_BACKEND), names, namespace)


def _static_backend(module, pool):
    backend = module["NixlStaticStorageBackend"].__new__(module["NixlStaticStorageBackend"])
    backend.pool = pool
    backend.agent = FakeStaticNixlAgent(pool)
    backend.key_lock = threading.RLock()
    backend.key_dict = {}
    backend.cache_policy = types.SimpleNamespace(update_on_put=lambda key: None)
    backend.progress_lock = threading.RLock()
    backend.progress_set = set()
    return backend


def _chunks(count, start=0):
    meta = types.SimpleNamespace(address=0, shape=(2, 4), dtype=FAKE_BF16, fmt="KV_2LTD")
    return [f"key-{start + i}" for i in range(count)], [types.SimpleNamespace(meta=meta) for _dummy in range(count)]


def check_05_ais_mt_slots_sized_before_first_write(tree, tmp_path, monkeypatch):
    module = _nixl_backend_module(tree)
    slot = 4 * PAGE
    truncated = []
    real_ftruncate = os.ftruncate

    def ftruncate(fd, length):
        truncated.append((fd, length))
        real_ftruncate(fd, length)

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    config = module["NixlStorageConfig"]
    assert config.validate_nixl_backend("AIS_MT", "cuda:0"), "AIS_MT is not a valid NIXL storage backend"
    assert config.validate_nixl_backend("AIS_MT", "cpu")
    create_pool = module["NixlStaticStorageBackend"].createPool
    try:
        pool = create_pool("AIS_MT", 3, str(tmp_path / "ais"), False, "by_gpu", "cuda:0", slot_size=slot)
    except (TypeError, ValueError) as exc:  # the released createPool: no slot_size, no AIS_MT
        raise AssertionError(f"no AIS_MT file pool: {exc!r}") from exc
    try:
        assert isinstance(pool, module["NixlFilePool"])
        assert all(os.fstat(fd).st_size == 0 for fd in pool.fds)  # created empty
        backend = _static_backend(module, pool)

        asyncio.run(backend.mem_to_storage(*_chunks(2)))
        (first,) = backend.agent.writes
        assert first == {0: slot, 1: slot}, f"slot file sizes when the write was posted: {first}"
        # The slot's file is fds[index] (fds is built in reverse file-name order).
        assert truncated == [(pool.fds[0], slot), (pool.fds[1], slot)]
        assert os.fstat(pool.fds[2]).st_size == 0  # an unused slot is left alone

        # A slot freed and written again is not truncated again.
        pool.push(1)
        asyncio.run(backend.mem_to_storage(*_chunks(1, start=2)))
        assert backend.agent.writes[-1] == {1: slot}
        assert len(truncated) == 2

        # Other file backends keep their files as they are.
        posix = create_pool("POSIX", 2, str(tmp_path / "posix"), False, "by_gpu", "cuda:0", slot_size=slot)
        posix_backend = _static_backend(module, posix)
        asyncio.run(posix_backend.mem_to_storage(*_chunks(1)))
        assert posix_backend.agent.writes == [{0: 0}]
        assert len(truncated) == 2
        posix.close()
    finally:
        pool.close()


def test_05_ais_mt_pool_sizes_each_slot_before_its_first_write(tree, tmp_path, monkeypatch):
    failure = _run_both_ways(tree, check_05_ais_mt_slots_sized_before_first_write, tree, tmp_path, monkeypatch)
    if failure is not None:
        assert "AIS_MT is not a valid NIXL storage backend" in failure


# -- 06: GDS L1 registers slab gauges instead of the DRAM L1 gauges, and counts its DMA bytes ------


class FakeL1MemoryManager:
    """Stands in for the L1 memory managers (pinned DRAM, Device-DAX or the GDS slab)."""

    def __init__(self, config):
        self.config = config

    def get_memory_usage(self):
        return 3 * 2**20, 64 * 2**20


def _l1_manager_class(tree, gauges):
    def register_gauge(meter_name, gauge_name, description, func):
        gauges[gauge_name] = func

    namespace = _namespace(
        "fake_l1_manager",
        threading=threading,
        GDSL1MemoryManager=type("FakeGdsL1MemoryManager", (FakeL1MemoryManager,), {}),
        DevDaxL1MemoryManager=type("FakeDevDaxL1MemoryManager", (FakeL1MemoryManager,), {}),
        L1MemoryManager=type("FakeDramL1MemoryManager", (FakeL1MemoryManager,), {}),
        get_event_bus=lambda: None,
        register_gauge=register_gauge,
    )
    names = ["l1_mgr_synchronized", "_l1_usage_or_zero", "_l1_usage_ratio_or_zero", "L1Manager"]
    return _load(tree.read(L1_MANAGER), names, namespace, optional={"_l1_usage_or_zero"})["L1Manager"]


def _l1_config(gds):
    return types.SimpleNamespace(
        gds_l1_config=types.SimpleNamespace(size_in_bytes=64 * 2**20) if gds else None,
        memory_config=types.SimpleNamespace(devdax_path=None),
        write_ttl_seconds=30,
        read_ttl_seconds=30,
    )


class FakeOtelCounter:
    def __init__(self, name):
        self.name = name
        self.value = 0

    def add(self, amount, attributes=None):
        self.value += amount


class FakeOtelMetrics(types.ModuleType):
    """Stands in for ``opentelemetry.metrics`` (no OTel SDK here): records the counters created."""

    def __init__(self):
        super().__init__("opentelemetry.metrics")
        self.counters = {}

    def get_meter(self, name):
        def create_counter(counter_name, unit="", description=""):
            self.counters[counter_name] = FakeOtelCounter(counter_name)
            return self.counters[counter_name]

        return types.SimpleNamespace(create_counter=create_counter)


class FakeGpuBuffer:
    """Stands in for a CUDA/HIP staging tensor: a byte range at a device address."""

    device = "cuda:0"

    def __init__(self, ptr, nbytes):
        self.ptr = ptr
        self.nbytes = nbytes

    def view(self, dtype):
        return self

    def numel(self):
        return self.nbytes

    def element_size(self):
        return 1

    def data_ptr(self):
        return self.ptr

    def __getitem__(self, part):
        start, stop, _dummy = part.indices(self.nbytes)
        return FakeGpuBuffer(self.ptr + start, stop - start)


class FakeGdsAsync:
    """Stands in for ``_gds_async`` (cuFile/hipFile): records the registrations and the slab DMAs."""

    def __init__(self):
        self.dmas = []
        outer = self

        class AsyncHandle:
            @staticmethod
            def from_fd(fd, handle, path, writable):
                return AsyncHandle(fd)

            def __init__(self, fd):
                self.fd = fd

            def read_async(self, buf_base, size, slab_offset, dev_offset, stream):
                outer.dmas.append(("read", size))
                return object()

            def write_async(self, buf_base, size, slab_offset, dev_offset, stream):
                outer.dmas.append(("write", size))
                return object()

            def close(self):
                os.close(self.fd)

        self.AsyncHandle = AsyncHandle

    def register_handle(self, fd):
        return ("handle", fd)

    def register_stream(self, stream):
        pass

    def register_buffer(self, buffer):
        pass

    def deregister_buffer(self, buffer):
        pass

    def deregister_stream(self, stream):
        pass


def _gds_context_module(tree, ca):
    stream = types.SimpleNamespace(cuda_stream=7, synchronize=lambda: None)
    namespace = _namespace(
        "fake_gds_context",
        dataclass=dataclass,
        field=field,
        Optional=typing.Optional,
        bisect=bisect,
        enum=enum,
        functools=functools,
        os=os,
        threading=threading,
        torch=_fake_torch(),
        torch_dev=types.SimpleNamespace(current_stream=lambda: stream, synchronize=lambda device=None: None),
        ca=ca,
    )
    names = [
        "_SLAB_FILENAME",
        "_CUFILE_ALIGNMENT",
        "_MAX_CUFILE_REGION",
        "_SUBMISSION_CHECKPOINT_EVERY",
        "SlabDirection",
        "_GdsL1ByteCounters",
        "_StreamSubmissions",
        "GDSContext",
    ]
    return _load(tree.read(GDS_CONTEXT), names, namespace, optional={"_GdsL1ByteCounters"})


def check_06_gds_l1_gauges(tree):
    gds_gauges = {}
    _l1_manager_class(tree, gds_gauges)(_l1_config(gds=True))
    assert sorted(gds_gauges) == ["lmcache_mp.gds_l1_slab_total_bytes", "lmcache_mp.gds_l1_slab_used_bytes"], (
        f"GDS L1 registered the gauges {sorted(gds_gauges)}"
    )
    assert gds_gauges["lmcache_mp.gds_l1_slab_used_bytes"]() == 3 * 2**20
    assert gds_gauges["lmcache_mp.gds_l1_slab_total_bytes"]() == 64 * 2**20
    dram_gauges = {}  # a fresh process (the gauges are registered once per process)
    _l1_manager_class(tree, dram_gauges)(_l1_config(gds=False))
    assert sorted(dram_gauges) == ["lmcache_mp.l1_memory_usage_bytes", "lmcache_mp.l1_usage_ratio"]
    assert dram_gauges["lmcache_mp.l1_usage_ratio"]() == 3 / 64


def test_06_gds_l1_registers_slab_gauges_instead_of_dram_ones(tree):
    failure = _run_both_ways(tree, check_06_gds_l1_gauges, tree)
    if failure is not None:
        assert "GDS L1 registered the gauges ['lmcache_mp.l1_memory_usage_bytes'" in failure


def check_06_gds_l1_dma_counters(tree, tmp_path, monkeypatch):
    metrics = FakeOtelMetrics()
    otel = types.ModuleType("opentelemetry")
    otel.metrics = metrics
    monkeypatch.setitem(sys.modules, "opentelemetry", otel)
    monkeypatch.setitem(sys.modules, "opentelemetry.metrics", metrics)
    ca = FakeGdsAsync()
    module = _gds_context_module(tree, ca)
    context = module["GDSContext"]()
    assert metrics.counters == {}  # GDS L1 off: no counters
    context.initialize(types.SimpleNamespace(size_in_bytes=64 * PAGE, file_location=str(tmp_path), use_direct_io=False))
    try:
        staging = FakeGpuBuffer(0x10000, 32 * PAGE)
        context.register_gpu_buffer(staging)
        read, write = module["SlabDirection"].READ, module["SlabDirection"].WRITE
        context.transfer_async(types.SimpleNamespace(get_size=lambda: 12 * PAGE, slab_offset=0), staging, write)
        context.transfer_async(types.SimpleNamespace(get_size=lambda: 8 * PAGE, slab_offset=0), staging, write)
        context.transfer_async(types.SimpleNamespace(get_size=lambda: 3 * PAGE, slab_offset=0), staging[PAGE:], read)
        assert ca.dmas == [("write", 12 * PAGE), ("write", 8 * PAGE), ("read", 3 * PAGE)]
        counted = {name: counter.value for name, counter in metrics.counters.items()}
        assert counted == {"lmcache_mp.gds_l1_bytes_read": 3 * PAGE, "lmcache_mp.gds_l1_bytes_written": 20 * PAGE}, (
            f"GDS L1 DMA counters: {counted}"
        )
    finally:
        context.close()


def test_06_gds_l1_counts_slab_dma_bytes(tree, tmp_path, monkeypatch):
    failure = _run_both_ways(tree, check_06_gds_l1_dma_counters, tree, tmp_path, monkeypatch)
    if failure is not None:
        assert "GDS L1 DMA counters: {}" in failure


# -- 07/08: the NIXL store L2 adapter ---------------------------------------------------------------


class FakeNixlAgent(NixlAgentStandIn):
    """Stands in for ``nixl._api.nixl_agent`` (NIXL): records what is registered; transfers finish at once."""

    created = []

    def __init__(self, name, config):
        FakeNixlAgent.created.append(self)
        self.registered = []
        self.transfers = []

    def register_memory(self, reg_list, mem_type):
        self.registered.append((mem_type, list(reg_list)))
        return super().register_memory(reg_list, mem_type)

    def make_prepped_xfer(self, op, local_dlist, local_indices, remote_dlist, remote_indices):
        self.transfers.append((op, list(local_indices), list(remote_indices)))
        return len(self.transfers)

    def transfer(self, handle):
        return "DONE"

    def check_xfer_state(self, handle):
        return "DONE"

    def deregister_memory(self, descs):
        pass


class FakeEventNotifier:
    """Stands in for LMCache's eventfd notifier (native)."""

    def fileno(self):
        return -1

    def notify(self):
        pass

    def close(self):
        pass


class FakeBitmap:
    """Stands in for lmcache.native_storage_ops.Bitmap (native extension)."""

    def __init__(self, size):
        self.bits = [False] * size

    def set(self, index):
        self.bits[index] = True


class FakeL2AdapterBase:
    """Stands in for L2AdapterInterface's usage bookkeeping (its module imports the native extension)."""

    def __init__(self, max_capacity_bytes):
        self.max_capacity_bytes = max_capacity_bytes
        self.stored = []

    def _notify_keys_stored(self, keys, sizes):
        self.stored.extend(zip(keys, sizes, strict=True))


def _nixl_l2_module(tree):
    api = _namespace("fake_internal_api")
    store_result = _load(tree.read(INTERNAL_API), ["L2StoreResult"], api)["L2StoreResult"]
    namespace = _namespace(
        "fake_nixl_store_l2_adapter",
        dataclass=dataclass,
        field=field,
        Optional=typing.Optional,
        asyncio=asyncio,
        os=os,
        threading=threading,
        uuid=uuid,
        NixlAgent=FakeNixlAgent,
        NixlAgentConfig=lambda backends: types.SimpleNamespace(backends=backends),
        nixlBind=types.SimpleNamespace(nixlBackendError=RuntimeError),
        L2AdapterInterface=FakeL2AdapterBase,
        L2AdapterConfigBase=object,
        L2StoreResult=store_result,
        Bitmap=FakeBitmap,
        MemoryLayoutDesc=lambda shapes, dtypes: (tuple(shapes), tuple(dtypes)),
        create_event_notifier=FakeEventNotifier,
    )
    names = [
        "NixlStoreObj",
        "NixlObjPool",
        "NixlStorageAgent",
        "NixlStoreL2Adapter",
        "_VALID_NIXL_BACKENDS",
        "_FILE_BACKENDS",
        "NixlStoreL2AdapterConfig",
        "_create_nixl_store_adapter",
    ]
    return _load(tree.read(NIXL_L2), names, namespace)


def _l1(pages=64):
    """A fake L1 buffer description (pages of 4 KiB; the address is never dereferenced)."""
    return types.SimpleNamespace(ptr=0x7F0000000000, size=pages * PAGE, align_bytes=PAGE)


def _file_params(path, **extra):
    return {"file_path": str(path), "use_direct_io": "false", **extra}


def check_07_ais_mt_accepted(tree, tmp_path):
    module = _nixl_l2_module(tree)
    config_class = module["NixlStoreL2AdapterConfig"]
    params = _file_params(tmp_path / "ais", file_size=str(4 * PAGE))
    try:
        config = config_class.from_dict({"backend": "AIS_MT", "backend_params": params, "pool_size": 2})
    except ValueError as exc:
        raise AssertionError(f"AIS_MT refused: {exc}") from exc
    with pytest.raises(ValueError, match="file_path"):  # a file backend: its parameters are required
        config_class.from_dict({"backend": "AIS_MT", "backend_params": {}, "pool_size": 2})
    agent = module["NixlStorageAgent"]("cpu", config.backend, config.backend_params, config.pool_size, _l1())
    try:
        assert agent.nixl_agent.backend == ("AIS_MT", params)
        assert agent.pool.total_objs == 2 * 4  # two files of four pages
        files = [reg for mem_type, regs in agent.nixl_agent.registered if mem_type == "FILE" for reg in regs]
        assert [(offset, length) for offset, length, _fd, _dummy in files] == [(0, 4 * PAGE)] * 2
        assert len(list((tmp_path / "ais").glob("obj_*.bin"))) == 2
    finally:
        agent.close()


def test_07_nixl_l2_accepts_ais_mt(tree, tmp_path):
    failure = _run_both_ways(tree, check_07_ais_mt_accepted, tree, tmp_path)
    if failure is not None:
        assert "AIS_MT refused: backend must be one of" in failure


def check_07_no_l1_refused(tree, tmp_path):
    """No L1 memory (GDS L1: get_l1_memory_desc() is None; or an empty buffer): refused before NIXL is touched."""
    module = _nixl_l2_module(tree)
    posix = module["NixlStoreL2AdapterConfig"].from_dict(
        {"backend": "POSIX", "backend_params": _file_params(tmp_path / "posix", file_size=str(PAGE)), "pool_size": 2}
    )
    for l1 in (None, types.SimpleNamespace(ptr=0, size=0, align_bytes=PAGE)):
        for create in (module["NixlStoreL2Adapter"], module["_create_nixl_store_adapter"]):
            FakeNixlAgent.created.clear()
            try:
                adapter = create(posix, l1)
            except Exception as exc:  # noqa: BLE001 - which exception, and its text, is the check
                error = exc
            else:
                adapter.close()
                error = None
            assert isinstance(error, ValueError) and "needs L1 memory" in str(error), (
                f"NIXL L2 without L1 memory ({l1}) via {create.__name__}: {error!r}"
            )
            assert "GDS L1" in str(error)
            assert FakeNixlAgent.created == []


def test_07_nixl_l2_without_l1_memory_is_refused(tree, tmp_path):
    failure = _run_both_ways(tree, check_07_no_l1_refused, tree, tmp_path)
    if failure is not None:
        assert "NIXL L2 without L1 memory (None) via NixlStoreL2Adapter: AttributeError" in failure


def _store(adapter, pages):
    """Run one store of a chunk of ``pages`` L1 pages in the adapter's store coroutine; its result."""
    meta = types.SimpleNamespace(address=_l1().ptr, phy_size=pages * PAGE, shape=(2, pages), dtype=FAKE_BF16)
    asyncio.run(adapter._execute_store_in_the_loop(["chunk-0"], [types.SimpleNamespace(meta=meta)], 0))
    return adapter._completed_store_tasks.pop(0)


NIXL_L2_LOGGER = "fake_nixl_store_l2_adapter"


def _nixl_l2_adapter(module, tmp_path, file_size=None, pool_size=4):
    """A NixlStoreL2Adapter over POSIX files (NIXL faked) with ``file_size`` (None: not given)."""
    extra = {} if file_size is None else {"file_size": str(file_size)}
    path = tmp_path / f"l2-{uuid.uuid4().hex[:6]}"
    config = module["NixlStoreL2AdapterConfig"].from_dict(
        {"backend": "POSIX", "backend_params": _file_params(path, **extra), "pool_size": pool_size}
    )
    return module["NixlStoreL2Adapter"](config, _l1())


def check_08_missing_file_size_warns(tree, tmp_path, caplog):
    module = _nixl_l2_module(tree)
    with caplog.at_level(logging.DEBUG, logger=NIXL_L2_LOGGER):
        with_size = _nixl_l2_adapter(module, tmp_path, file_size=8 * PAGE)
        with_size.close()
        assert _messages(caplog, NIXL_L2_LOGGER, "file_size") == []
        missing = _nixl_l2_adapter(module, tmp_path)
        missing.close()
    warnings = [m for level, m in _messages(caplog, NIXL_L2_LOGGER, "file_size") if level == logging.WARNING]
    assert warnings, "no warning for a NIXL L2 without file_size"
    assert "POSIX" in warnings[0] and "a single L1 page (4096 bytes)" in warnings[0]


def test_08_missing_file_size_warns(tree, tmp_path, caplog):
    failure = _run_both_ways(tree, check_08_missing_file_size_warns, tree, tmp_path, caplog)
    if failure is not None:
        assert "no warning for a NIXL L2 without file_size" in failure


def check_08_file_size_below_one_chunk_raises(tree, tmp_path, caplog):
    module = _nixl_l2_module(tree)
    logger_name = NIXL_L2_LOGGER

    def adapter(file_size):
        return _nixl_l2_adapter(module, tmp_path, file_size=file_size)

    with caplog.at_level(logging.DEBUG, logger=logger_name):
        # A 32 KiB chunk (8 pages) into files of one page: the store fails naming both sizes.
        small = adapter(file_size=PAGE)
        try:
            result = _store(small, pages=8)
            assert not result.is_successful(), (
                f"a chunk larger than file_size was reported stored ({result.bytes_transferred()} bytes)"
            )
            (failed,) = [r for r in caplog.records if r.name == logger_name and r.exc_info]
            error = failed.exc_info[1]
            assert isinstance(error, ValueError)
            assert "file_size (4096 bytes)" in str(error) and "one L1 chunk (32768 bytes)" in str(error)
            assert small.nixl_agent.nixl_agent.transfers == []  # nothing was written
            assert len(small.nixl_agent.pool.indices) == small.nixl_agent.pool.total_objs  # no slot leaked
        finally:
            small.close()

        # A file_size that holds the chunk stores it.
        fits = adapter(file_size=8 * PAGE)
        try:
            result = _store(fits, pages=8)
            assert result.is_successful() and result.bytes_transferred() == 8 * PAGE
            assert fits.stored == [("chunk-0", 8 * PAGE)]
            ((op, _mem, storage),) = fits.nixl_agent.nixl_agent.transfers
            assert op == "WRITE" and len(storage) == 8
        finally:
            fits.close()

        # A file_size below one L1 page would be a pool without pages.
        with pytest.raises(ValueError, match=r"file_size \(0 bytes\) is smaller than one L1 page \(4096 bytes\)"):
            adapter(file_size=0).close()


def test_08_file_size_below_one_chunk_raises(tree, tmp_path, caplog):
    failure = _run_both_ways(tree, check_08_file_size_below_one_chunk_raises, tree, tmp_path, caplog)
    if failure is not None:
        assert "a chunk larger than file_size was reported stored (0 bytes)" in failure
