"""The ``fake_bin`` fixture: a PATH of fake GPU tools (see gpu_fakes.py; no real GPU is involved)."""

from __future__ import annotations

import pytest
from gpu_fakes import FakeBin

from ansible_collections.aic.stack.plugins.module_utils import gpu


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """An empty PATH of fakes, and no KFD topology unless a test builds one."""
    fakes = FakeBin(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(fakes.path))
    monkeypatch.setattr(gpu, "KFD_NODES_DIR", str(tmp_path / "no-kfd" / "topology" / "nodes"))
    for name in gpu.VISIBILITY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return fakes
