# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The sha256 of a file, read in chunks: a multi-gigabyte image tarball never sits in memory whole."""

from __future__ import annotations

import hashlib

# Bytes read at a time.
CHUNK = 4 * 1024 * 1024


def sha256_file(path, chunk=CHUNK):
    """Hex sha256 digest (64 lowercase hex digits, no ``sha256:`` prefix) of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()
