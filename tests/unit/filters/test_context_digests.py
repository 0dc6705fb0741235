"""context_digests: what a build context carries, relative to its root, from ansible.builtin.find's answer."""

from __future__ import annotations

import hashlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.filter.stack import FilterModule, context_digests


def found(*paths):
    """find's ``files`` for real files (path + sha256 checksum, as get_checksum/checksum_algorithm sha256 give)."""
    return [{"path": str(p), "checksum": hashlib.sha256(p.read_bytes()).hexdigest(), "size": p.stat().st_size}
            for p in paths]  # fmt: skip


@pytest.fixture
def contexts(tmp_path):
    base, stack = tmp_path / "rocm-base", tmp_path / "rocm-base-stack"
    for path, text in {
        base / "patches" / "nixl" / "01-x.patch": "nixl",
        base / "certs" / "ca.crt": "ca",
        stack / "patches" / "vllm" / "01-y.patch": "vllm",
    }.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return base, stack


def test_each_context_gets_its_own_files_relative_to_its_root(contexts):
    base, stack = contexts
    files = found(*sorted(p for p in base.parent.rglob("*") if p.is_file()))
    assert context_digests(files, base) == {
        "certs/ca.crt": hashlib.sha256(b"ca").hexdigest(),
        "patches/nixl/01-x.patch": hashlib.sha256(b"nixl").hexdigest(),
    }
    # A sibling whose name starts with the root's name is another context, not a subdirectory.
    assert context_digests(files, stack) == {"patches/vllm/01-y.patch": hashlib.sha256(b"vllm").hexdigest()}
    assert context_digests(files, str(base) + "/") == context_digests(files, base)


def test_nothing_found_is_an_empty_context(tmp_path):
    assert context_digests([], tmp_path) == {}
    assert context_digests(None, tmp_path) == {}


def test_a_file_without_checksum_is_refused_naming_it(contexts):
    base, _dummy = contexts
    with pytest.raises(AnsibleFilterError, match=r"ca\.crt has no checksum"):
        context_digests([{"path": str(base / "certs" / "ca.crt")}], base)


def test_it_is_a_collection_filter():
    assert FilterModule().filters()["context_digests"] is context_digests
