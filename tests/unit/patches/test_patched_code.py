"""The patched upstream code behaves as the patches describe.

vLLM's platform modules and LMCache's NIXL adapter cannot be imported here (they need torch, amdsmi,
NIXL and the rest of their packages). Instead, each test takes the patched file (the real pinned
source with the real series applied), extracts the patched function or class with ``ast`` and runs
it against fakes. The fakes stand in for an AMD GPU stack (amdsmi, a HIP build of torch) and for a
NIXL agent, none of which can exist on this machine; each is named ``Fake...``.

Every behaviour is also run against the unpatched code, to show the test actually sees the bug.
"""

from __future__ import annotations
import __future__

import ast
import asyncio
import logging
import os
import sys
import threading
import time
import types
import uuid

import pytest
from nixl_agent import NixlAgentStandIn

PLATFORMS_INIT = "vllm/platforms/__init__.py"
PLATFORMS_ROCM = "vllm/platforms/rocm.py"
NIXL_ADAPTER = "lmcache/v1/distributed/l2_adapters/nixl_store_l2_adapter.py"
ROCM_PLATFORM = "vllm.platforms.rocm.RocmPlatform"


def _definition(text, name):
    """Source of the top-level function or class ``name`` in ``text``."""
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return ast.get_source_segment(text, node)
    raise AssertionError(f"{name} not found")


def _load(text, names, namespace):
    """Exec the top-level definitions ``names`` of ``text`` in ``namespace`` (annotations stay lazy)."""
    for name in names:
        code = compile(
            _definition(text, name),
            f"<{name}>",
            "exec",
            flags=__future__.annotations.compiler_flag,
            dont_inherit=True,
        )
        exec(code, namespace)  # noqa: S102 - running the upstream definition is the point of the test
    return namespace


@pytest.fixture
def pristine_file(pinned_sources):
    return lambda project, relpath: (pinned_sources[project] / relpath).read_text()


# -- 01: rocm_platform_plugin trusts torch.version.hip when amdsmi sees no devices --------------


class FakeAmdSmi(types.ModuleType):
    """Stands in for AMD's ``amdsmi`` module (needs the ROCm SMI library and an AMD GPU)."""

    def __init__(self, handles, init_error=None):
        super().__init__("amdsmi")
        self.handles = handles
        self.init_error = init_error
        self.calls = []

    def amdsmi_init(self):
        self.calls.append("init")
        if self.init_error is not None:
            raise self.init_error

    def amdsmi_get_processor_handles(self):
        self.calls.append("get_processor_handles")
        return list(self.handles)

    def amdsmi_shut_down(self):
        self.calls.append("shut_down")


def _fake_torch(hip):
    """Stands in for torch: a HIP (ROCm) build when ``hip`` is a version, else a CUDA/CPU build."""
    torch = types.ModuleType("torch")
    torch.version = types.SimpleNamespace(hip=hip, cuda=None if hip else "12.8")
    return torch


def _rocm_platform_plugin(text, monkeypatch, amdsmi, torch):
    monkeypatch.setitem(sys.modules, "amdsmi", amdsmi)
    monkeypatch.setitem(sys.modules, "torch", torch)
    namespace = {"__name__": "fake_vllm_platforms", "logger": logging.getLogger("fake_vllm_platforms")}
    return _load(text, ["rocm_platform_plugin"], namespace)["rocm_platform_plugin"]


@pytest.mark.parametrize(
    ("handles", "hip", "expected"),
    [
        pytest.param([], "6.4.43482", ROCM_PLATFORM, id="no-devices-hip-torch-rocm"),
        pytest.param([], None, None, id="no-devices-cuda-torch-none"),
        pytest.param(["gpu0"], None, ROCM_PLATFORM, id="devices-rocm-as-before"),
        pytest.param(["gpu0", "gpu1"], "6.4.43482", ROCM_PLATFORM, id="devices-and-hip-rocm"),
    ],
)
def test_01_rocm_plugin_trusts_torch_hip(patched_file, monkeypatch, handles, hip, expected):
    amdsmi = FakeAmdSmi(handles)
    plugin = _rocm_platform_plugin(patched_file("vllm", PLATFORMS_INIT), monkeypatch, amdsmi, _fake_torch(hip))

    assert plugin() == expected
    assert amdsmi.calls == ["init", "get_processor_handles", "shut_down"]


def test_01_amdsmi_that_cannot_initialise_still_means_no_rocm(patched_file, monkeypatch):
    amdsmi = FakeAmdSmi([], init_error=RuntimeError("AMDSMI_STATUS_INIT_ERROR"))
    plugin = _rocm_platform_plugin(patched_file("vllm", PLATFORMS_INIT), monkeypatch, amdsmi, _fake_torch("6.4"))

    assert plugin() is None


def test_01_unpatched_plugin_reports_no_rocm(pristine_file, monkeypatch):
    """The bug: amdsmi sees no devices (HIP already initialised by torch) and vLLM concludes "no ROCm"."""
    amdsmi = FakeAmdSmi([])
    plugin = _rocm_platform_plugin(pristine_file("vllm", PLATFORMS_INIT), monkeypatch, amdsmi, _fake_torch("6.4"))

    assert plugin() is None


# -- 02: _get_gcn_arch warns on stderr, not through logger.warning_once ---------------------------


class FakeLoggerThatMustNotBeUsed:
    """Any use fails the test: the patched function must not touch the vLLM logger at import time."""

    def __getattr__(self, name):
        def _called(*args, **kwargs):
            raise AssertionError(f"logger.{name} called")

        return _called


class FakeVllmLogger:
    """Like vLLM's logger while vllm.platforms.rocm is half imported: warning_once hits the import cycle."""

    def __init__(self):
        self.debug_calls = []

    def debug(self, msg, *args):
        self.debug_calls.append(msg % args)

    def warning_once(self, msg, *args, **kwargs):
        raise ImportError(
            "cannot import name 'RocmPlatform' from partially initialized module 'vllm.platforms.rocm' "
            "(most likely due to a circular import)"
        )


def _fake_torch_cuda(arch):
    """Stands in for torch on a ROCm machine: torch.cuda.get_device_properties().gcnArchName."""
    calls = []

    def get_device_properties(device):
        calls.append(device)
        return types.SimpleNamespace(gcnArchName=arch)

    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(get_device_properties=get_device_properties)
    return torch, calls


def _amdsmi_query(arch=None):
    def _query_gcn_arch_from_amdsmi():
        if arch is None:
            raise RuntimeError("amdsmi did not return valid GCN arch")
        return arch

    return _query_gcn_arch_from_amdsmi


def _get_gcn_arch(text, logger, query, torch):
    namespace = {"__name__": "fake_vllm_rocm", "logger": logger, "_query_gcn_arch_from_amdsmi": query, "torch": torch}
    return _load(text, ["_get_gcn_arch"], namespace)["_get_gcn_arch"]


def test_02_gcn_arch_fallback_warns_on_stderr(patched_file, capsys):
    torch, calls = _fake_torch_cuda("gfx942:sramecc+:xnack-")
    get_arch = _get_gcn_arch(
        patched_file("vllm", PLATFORMS_ROCM), FakeLoggerThatMustNotBeUsed(), _amdsmi_query(None), torch
    )

    assert get_arch() == "gfx942:sramecc+:xnack-"
    assert calls == ["cuda"]
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(
        "WARNING: Failed to get GCN arch via amdsmi (RuntimeError('amdsmi did not return valid GCN arch')), "
        "falling back to torch.cuda."
    )
    assert "CUDA_VISIBLE_DEVICES" in err


def test_02_gcn_arch_from_amdsmi_prints_nothing(patched_file, capsys):
    torch, calls = _fake_torch_cuda("unused")
    get_arch = _get_gcn_arch(
        patched_file("vllm", PLATFORMS_ROCM), FakeLoggerThatMustNotBeUsed(), _amdsmi_query("gfx90a"), torch
    )

    assert get_arch() == "gfx90a"
    assert calls == []
    assert capsys.readouterr() == ("", "")


def test_02_unpatched_gcn_arch_hits_the_import_cycle(pristine_file):
    """The bug: the fallback path calls logger.warning_once() while the module is being imported."""
    torch, calls = _fake_torch_cuda("gfx942")
    logger = FakeVllmLogger()
    get_arch = _get_gcn_arch(pristine_file("vllm", PLATFORMS_ROCM), logger, _amdsmi_query(None), torch)

    with pytest.raises(ImportError, match="circular import"):
        get_arch()
    assert calls == []  # never reached the torch.cuda fallback


# -- 09: NixlStorageAgent serialises make_prepped_xfer only ---------------------------------------


class FakeNixlError(RuntimeError):
    pass


class FakeNixlAgentConfig:
    def __init__(self, backends):
        self.backends = backends


class FakeNixlAgent(NixlAgentStandIn):
    """Stands in for ``nixl._api.nixl_agent`` (NIXL with a storage backend cannot run here).

    ``make_prepped_xfer`` takes MAKE_S and, like the real agent did on shared prepped dlist handles,
    fails with NIXL_ERR_INVALID_PARAM when another call overlaps it. A transfer takes TRANSFER_S
    between ``transfer()`` and the ``check_xfer_state()`` that returns DONE. Both record how many
    calls overlapped at most.
    """

    MAKE_S = 0.02
    TRANSFER_S = 0.1

    def __init__(self, name, config):
        self.name = name
        self._stats = threading.Lock()
        self.in_make = self.max_in_make = 0
        self.in_flight = self.max_in_flight = 0
        self.made = []
        self.ends = {}
        self.make_lock = None  # the agent's lock, to check it is held during make_prepped_xfer

    def make_prepped_xfer(self, op, local_dlist, local_indices, remote_dlist, remote_indices):
        with self._stats:
            self.in_make += 1
            self.max_in_make = max(self.max_in_make, self.in_make)
            overlapped = self.in_make > 1
        held = self.make_lock is not None and self.make_lock.locked()
        time.sleep(self.MAKE_S)
        with self._stats:
            self.in_make -= 1
        if overlapped:
            raise FakeNixlError("NIXL_ERR_INVALID_PARAM")
        handle = (op, tuple(local_indices), tuple(remote_indices), held)
        self.made.append(handle)
        return handle

    def transfer(self, handle):
        with self._stats:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.ends[handle] = time.monotonic() + self.TRANSFER_S
        return "PROC"

    def check_xfer_state(self, handle):
        time.sleep(max(0.0, min(0.01, self.ends[handle] - time.monotonic())))
        if time.monotonic() < self.ends[handle]:
            return "PROC"
        with self._stats:
            self.in_flight -= 1
        return "DONE"


def _nixl_storage_agent(text):
    namespace = {
        "__name__": "fake_nixl_store_l2_adapter",
        "asyncio": asyncio,
        "os": os,
        "threading": threading,
        "uuid": uuid,
        "logger": logging.getLogger("fake_nixl_store_l2_adapter"),
        "NixlAgent": FakeNixlAgent,
        "NixlAgentConfig": FakeNixlAgentConfig,
        "nixlBind": types.SimpleNamespace(nixlBackendError=FakeNixlError),
    }
    _load(text, ["NixlObjPool", "NixlStorageAgent"], namespace)
    page = 4096
    # The real constructor, with the object backend (no files) and a fake L1 buffer of 16 pages.
    return namespace["NixlStorageAgent"](
        device="cpu",
        backend="OBJ",
        backend_params={},
        pool_size=16,
        l1_memory_desc=types.SimpleNamespace(ptr=0, size=16 * page, align_bytes=page),
    )


def _concurrent_transfers(agent, workers=6):
    """Each worker creates a handle (READ or WRITE) and runs the transfer (blocking or async)."""
    barrier = threading.Barrier(workers)
    errors = []

    def work(i):
        try:
            barrier.wait()
            make = agent.get_storage_to_mem_handle if i % 2 else agent.get_mem_to_storage_handle
            handle = make([i], [i])
            if i % 3:
                agent.post_blocking(handle)
            else:
                asyncio.run(agent.post_non_blocking(handle))
            agent.release_handle(handle)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return errors


def test_09_agent_has_a_lock(patched_file):
    agent = _nixl_storage_agent(patched_file("lmcache", NIXL_ADAPTER))
    assert isinstance(agent._make_xfer_lock, type(threading.Lock()))
    assert not agent._make_xfer_lock.locked()


def test_09_lock_wraps_only_make_prepped_xfer(patched_file):
    cls = ast.parse(_definition(patched_file("lmcache", NIXL_ADAPTER), "NixlStorageAgent")).body[0]
    methods = {node.name: node for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    guarded = {}
    for name, method in methods.items():
        for node in ast.walk(method):
            if isinstance(node, ast.With) and "_make_xfer_lock" in ast.unparse(node.items[0].context_expr):
                guarded[name] = [ast.unparse(stmt) for stmt in node.body]
    assert sorted(guarded) == ["get_mem_to_storage_handle", "get_storage_to_mem_handle"]
    for body in guarded.values():
        assert len(body) == 1 and body[0].startswith("return self.nixl_agent.make_prepped_xfer(")
    for name in ("post_blocking", "post_non_blocking", "release_handle"):
        assert "_make_xfer_lock" not in ast.unparse(methods[name])


def test_09_make_prepped_xfer_serialised_transfers_parallel(patched_file):
    agent = _nixl_storage_agent(patched_file("lmcache", NIXL_ADAPTER))
    fake = agent.nixl_agent
    fake.make_lock = agent._make_xfer_lock

    errors = _concurrent_transfers(agent)

    assert errors == []
    assert len(fake.made) == 6
    assert fake.max_in_make == 1  # never two make_prepped_xfer at once
    assert all(held for *_dummy, held in fake.made)  # ... because each ran under the agent's lock
    assert fake.max_in_flight >= 2  # while the transfers did overlap
    assert fake.in_flight == 0


def test_09_unpatched_agent_overlaps_make_prepped_xfer(pristine_file):
    """The bug: concurrent handle creation overlaps and NIXL answers NIXL_ERR_INVALID_PARAM."""
    agent = _nixl_storage_agent(pristine_file("lmcache", NIXL_ADAPTER))

    errors = _concurrent_transfers(agent)

    assert agent.nixl_agent.max_in_make > 1
    assert errors and all(str(e) == "NIXL_ERR_INVALID_PARAM" for e in errors)
