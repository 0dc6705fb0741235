# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Save a Docker image as an atomic ``.tar.zst`` artifact with its sha256 and manifest.

Nothing is visible under its final name until the whole image was saved, compressed, hashed and fsynced:
a failure at any point leaves the previous artifact (and the ``<name>.current.json`` pointer) untouched.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import subprocess
import tempfile

from ansible_collections.aic.stack.plugins.module_utils.atomic import replace_file
from ansible_collections.aic.stack.plugins.module_utils.digest import sha256_file

CHUNK = 4 * 1024 * 1024


class ArtifactError(Exception):
    pass


def artifact_base(image):
    """File stem for an image reference: ``registry/name:tag`` -> ``registry-name-tag``."""
    return re.sub(r"[/:@]+", "-", image)


def paths(dest_dir, image):
    base = os.path.join(dest_dir, artifact_base(image))
    name = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return {
        "tarball": base + ".tar.zst",
        "sha256": base + ".tar.zst.sha256",
        "manifest": base + ".manifest.json",
        "current": os.path.join(dest_dir, artifact_base(name) + ".current.json"),
    }


def read_manifest(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def is_current(files, image_id, verify=False):
    """True when a complete artifact for ``image_id`` exists (and, with ``verify``, its checksum holds)."""
    manifest = read_manifest(files["manifest"])
    if not manifest or manifest.get("image_id") != image_id:
        return False
    if not (os.path.isfile(files["tarball"]) and os.path.isfile(files["sha256"])):
        return False
    if os.path.getsize(files["tarball"]) != manifest.get("tarball_bytes"):
        return False
    return not (verify and sha256_file(files["tarball"]) != manifest.get("sha256"))


def write_current(files, manifest):
    """Point ``<name>.current.json`` at ``manifest`` (atomically): the artifact later stages read."""
    replace_file(files["current"], json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def save(chunks, files, manifest, level=3, threads=0, zstd="zstd"):
    """Compress the ``docker save`` stream ``chunks`` into the artifact; return the final manifest.

    ``manifest`` holds what the caller knows (image, image_id, pins...); size, checksum and times are added.
    """
    if not shutil.which(zstd):
        raise ArtifactError(f"{zstd} not found on the build host (install the zstd package)")
    directory = os.path.dirname(files["tarball"])
    os.makedirs(directory, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=".partial-", suffix=".tar.zst", dir=directory)
    os.close(fd)
    started = datetime.datetime.now(datetime.UTC)
    try:
        with subprocess.Popen(
            [zstd, "-q", "-f", f"-{int(level)}", f"-T{int(threads)}", "-o", partial],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as proc:
            try:
                for chunk in chunks:
                    proc.stdin.write(chunk)
                proc.stdin.close()
            except BrokenPipeError:
                pass
            except Exception as exc:
                proc.kill()
                # zstd is gone: closing its stdin may fail on the buffered bytes; the save's own error is the cause.
                with contextlib.suppress(BrokenPipeError):
                    proc.stdin.close()
                raise ArtifactError(f"docker save failed: {exc}") from exc
            err = proc.stderr.read().decode(errors="replace")
            rc = proc.wait()
        if rc != 0:
            raise ArtifactError(f"zstd exited {rc}: {err.strip()}")
        with open(partial, "rb") as handle:
            os.fsync(handle.fileno())
        digest = sha256_file(partial)
        result = dict(manifest)
        result.update(
            tarball=os.path.basename(files["tarball"]),
            tarball_bytes=os.path.getsize(partial),
            sha256=digest,
            compression=f"zstd-{int(level)}",
            saved_at=started.isoformat(timespec="seconds"),
            save_seconds=round((datetime.datetime.now(datetime.UTC) - started).total_seconds(), 1),
        )
        os.chmod(partial, 0o644)
        os.replace(partial, files["tarball"])
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise
    replace_file(files["sha256"], f"{digest}  {os.path.basename(files['tarball'])}\n")
    replace_file(files["manifest"], json.dumps(result, indent=2, sort_keys=True) + "\n")
    # Last: the pointer operators and later stages read. Only a complete artifact becomes current.
    write_current(files, result)
    return result
