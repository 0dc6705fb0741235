"""Tests for plugins/module_utils/digest.py: the one sha256_file, read in chunks, against hashlib."""

from __future__ import annotations

import hashlib
import os

import pytest

from ansible_collections.aic.stack.plugins.module_utils import artifact, digest, patching, relay


@pytest.fixture(scope="module")
def payload():
    # Two whole default chunks and a partial third: the file is read in three blocks.
    return os.urandom(2 * digest.CHUNK + 12345)


def test_a_multi_chunk_file_hashes_as_hashlib_does(tmp_path, payload):
    path = tmp_path / "blob"
    path.write_bytes(payload)
    expected = hashlib.sha256(payload).hexdigest()
    assert digest.sha256_file(str(path)) == expected
    assert digest.sha256_file(path) == expected  # a pathlib.Path works too


@pytest.mark.parametrize("chunk", [1, 4096, 12345, 2 * digest.CHUNK + 12345, 8 * digest.CHUNK])
def test_any_chunk_size_gives_the_same_digest(tmp_path, payload, chunk):
    path = tmp_path / "blob"
    path.write_bytes(payload[: 3 * 12345] if chunk == 1 else payload)
    data = path.read_bytes()
    assert digest.sha256_file(str(path), chunk=chunk) == hashlib.sha256(data).hexdigest()


def test_the_digest_is_64_lowercase_hex_digits_without_prefix(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    value = digest.sha256_file(str(path))
    assert value == hashlib.sha256(b"").hexdigest()
    assert len(value) == 64 and value == value.lower() and not value.startswith("sha256:")


def test_a_missing_file_raises_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        digest.sha256_file(str(tmp_path / "nope"))


def test_the_old_names_are_the_one_function():
    assert patching.sha256_file is relay.sha256_file is artifact.sha256_file is digest.sha256_file
