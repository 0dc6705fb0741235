# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Check and apply a series of patches (``patches/<project>/<ref>/NN-name.patch``) with ``git apply``.

A series is every ``*.patch`` file of one directory, applied in lexical order of the file names.
Patches are ``git diff`` / ``git format-patch`` output with ``a/`` and ``b/`` prefixes and paths
relative to the root of the patched source (for vLLM: ``a/vllm/platforms/__init__.py``), so the
same patch applies to an upstream git checkout and to an unpacked wheel.

Nothing heavy is copied: the series is replayed in a temporary directory that holds only the files
the patches touch, so patch N is always checked on top of patches 1..N-1. Each patch gets a status:

``applies``
    ``git apply --check`` succeeds on top of the previous patches.
``merged``
    it does not apply but ``git apply --check -R`` does: the change is already in the source
    (merged upstream, or applied by someone else).
``applied``
    like ``merged``, but this exact patch (same sha256) was applied by :func:`apply_series`,
    which records what it applied in :data:`STAMP_NAME` at the root of the source.
``fails``
    neither: the patch no longer applies; ``message`` holds git's error.

Only the Python standard library and the ``git`` executable are used.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

from ansible_collections.aic.stack.plugins.module_utils.atomic import replace_file
from ansible_collections.aic.stack.plugins.module_utils.digest import sha256_file

APPLIES = "applies"
MERGED = "merged"
APPLIED = "applied"
FAILS = "fails"

PATCH_SUFFIX = ".patch"
# Written at the root of the source by apply_series(): the patches it applied and their sha256.
STAMP_NAME = ".aic-patch-series.json"
GIT_TIMEOUT = 120

# Environment variables that would make git work on another repository than the one we point it at.
_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR")


class PatchSeriesError(Exception):
    """The series cannot be checked at all (no patches, no git, unsafe path in a patch...)."""


def list_patches(patch_dir):
    """Absolute paths of the ``*.patch`` files of ``patch_dir``, in lexical order of their names."""
    if not os.path.isdir(patch_dir):
        raise PatchSeriesError(f"patch directory {patch_dir} does not exist")
    names = sorted(n for n in os.listdir(patch_dir) if n.endswith(PATCH_SUFFIX))
    paths = [os.path.join(os.path.abspath(patch_dir), n) for n in names]
    paths = [p for p in paths if os.path.isfile(p)]
    if not paths:
        raise PatchSeriesError(f"no *{PATCH_SUFFIX} files in {patch_dir}")
    return paths


def series_label(patch_dir):
    """``<project> <ref>`` from ``.../patches/<project>/<ref>``, e.g. ``vllm v0.26.0``."""
    path = os.path.abspath(patch_dir).rstrip(os.sep)
    return f"{os.path.basename(os.path.dirname(path))} {os.path.basename(path)}"


def _unquote(name):
    """Undo git's C-style quoting of a path (``"a/caf\\303\\251.py"``)."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):
        return name
    body = name[1:-1]
    out = bytearray()
    i = 0
    simple = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in simple:
                out.append(simple[nxt])
                i += 2
                continue
            if body[i + 1 : i + 4].isdigit():
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
        out.extend(char.encode("utf-8"))
        i += 1
    return out.decode("utf-8", errors="surrogateescape")


def _git_env(cwd):
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
    env["LC_ALL"] = "C"
    # Never let git discover a repository above the directory it works in (a temporary directory
    # under a checkout would otherwise make `git apply` resolve paths against that checkout).
    env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(os.path.abspath(cwd))
    return env


def _git(args, cwd, git="git"):
    try:
        return subprocess.run(
            [git, *args],
            cwd=cwd,
            env=_git_env(cwd),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise PatchSeriesError(f"git executable {git!r} not found")
    except subprocess.TimeoutExpired:
        raise PatchSeriesError(f"git {' '.join(args)} timed out after {GIT_TIMEOUT}s")


def _message(proc):
    """git's stderr (or stdout) as one line."""
    text = (proc.stderr or proc.stdout or b"").decode("utf-8", errors="replace")
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _check_relative(path, patch):
    parts = path.replace("\\", "/").split("/")
    if not path or os.path.isabs(path) or ".." in parts:
        raise PatchSeriesError(f"{os.path.basename(patch)} touches an unsafe path: {path!r}")
    return path


def touched_paths(patch, git="git"):
    """Relative paths a patch reads or writes (new names from git, old names of renames and copies)."""
    proc = _git(["apply", "--numstat", "-z", patch], cwd=os.path.dirname(patch), git=git)
    if proc.returncode != 0:
        raise PatchSeriesError(f"{os.path.basename(patch)} is not a valid patch: {_message(proc)}")
    paths = set()
    for record in proc.stdout.split(b"\0"):
        if record.count(b"\t") >= 2:
            paths.add(record.split(b"\t", 2)[2].decode("utf-8", errors="surrogateescape"))
    # git reports only the new name of a rename or copy: read the old one from the extended headers.
    with open(patch, encoding="utf-8", errors="surrogateescape") as handle:
        in_header = False
        for line in handle:
            line = line.rstrip("\n")
            if line.startswith("diff --git "):
                in_header = True
            elif line.startswith(("@@", "--- ", "GIT binary patch", "Binary files ")):
                in_header = False
            elif in_header and line.startswith(("rename from ", "copy from ")):
                paths.add(_unquote(line.split(" ", 2)[2]))
    return sorted(_check_relative(p, patch) for p in paths if p)


def _copy_touched(source_dir, work_dir, paths):
    for rel in paths:
        src = os.path.join(source_dir, rel)
        if os.path.lexists(src) and not os.path.isdir(src):
            dest = os.path.join(work_dir, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(src, dest)


def _replay(source_dir, patches, work_dir, git):
    """Replay ``patches`` in order in ``work_dir`` (a copy of the touched files of ``source_dir``)."""
    touched = {}
    for patch in patches:
        touched[patch] = touched_paths(patch, git=git)
    _copy_touched(source_dir, work_dir, sorted({p for paths in touched.values() for p in paths}))

    results = []
    for patch in patches:
        entry = {
            "name": os.path.basename(patch),
            "path": patch,
            "sha256": sha256_file(patch),
            "files": touched[patch],
            "status": FAILS,
            "message": "",
        }
        # `git apply` is atomic: a patch that does not apply leaves the work copy untouched.
        forward = _git(["apply", "--whitespace=nowarn", patch], cwd=work_dir, git=git)
        if forward.returncode == 0:
            entry["status"] = APPLIES
        elif _git(["apply", "--check", "-R", "--whitespace=nowarn", patch], cwd=work_dir, git=git).returncode == 0:
            entry["status"] = MERGED
        else:
            entry["message"] = _message(forward)
        results.append(entry)
    return results


def read_stamp(source_dir):
    """``{patch name: sha256}`` of the patches :func:`apply_series` applied to ``source_dir``."""
    try:
        with open(os.path.join(source_dir, STAMP_NAME), encoding="utf-8") as handle:
            data = json.load(handle)
        return {str(p["name"]): str(p["sha256"]) for p in data.get("patches", [])}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def _mark_applied(source_dir, results):
    stamp = read_stamp(source_dir)
    for entry in results:
        if entry["status"] == MERGED and stamp.get(entry["name"]) == entry["sha256"]:
            entry["status"] = APPLIED
    return results


def _series_reverses(source_dir, patches, git):
    """True when the whole series is already in ``source_dir``: it reverses, last patch first."""
    with tempfile.TemporaryDirectory(prefix="patch-series-") as work_dir:
        paths = sorted({p for patch in patches for p in touched_paths(patch, git=git)})
        _copy_touched(source_dir, work_dir, paths)
        for patch in reversed(patches):
            if _git(["apply", "-R", "--whitespace=nowarn", patch], cwd=work_dir, git=git).returncode != 0:
                return False
    return True


def _validate_source(source_dir):
    if not os.path.isdir(source_dir):
        raise PatchSeriesError(f"source directory {source_dir} does not exist")


def _resolve(source_dir, patch_dir):
    source_dir = os.path.abspath(source_dir)
    _validate_source(source_dir)
    if isinstance(patch_dir, (list, tuple)):
        patches = [os.path.abspath(p) for p in patch_dir]
    else:
        patches = list_patches(patch_dir)
    return source_dir, patches


def _evaluate(source_dir, patches, work_dir, git):
    results = _replay(source_dir, patches, work_dir, git)
    if first_failure(results) is not None and _series_reverses(source_dir, patches, git):
        for entry in results:
            entry["status"] = MERGED
            entry["message"] = ""
    return _mark_applied(source_dir, results)


def first_failure(results):
    """The first patch of ``results`` whose status is ``fails``, or None."""
    return next((r for r in results if r["status"] == FAILS), None)


def check_series(source_dir, patch_dir, git="git"):
    """Check every patch of ``patch_dir`` against ``source_dir``, cumulatively; change nothing.

    ``patch_dir`` may also be a list of patch files (checked in the given order).
    Returns one dict per patch, in order: ``name``, ``path``, ``sha256``, ``files`` (the relative
    paths it touches), ``status`` (``applies``, ``merged``, ``applied`` or ``fails``) and ``message``
    (git's error for ``fails``). A patch that fails is left out of the state the next patches are
    checked against.

    When some patch fails, the whole series is also tried in reverse, last patch first: if it
    reverses, the source already holds the complete series (patches that overlap one another do
    not reverse one by one on top of the complete series) and every patch is reported ``merged``
    (or ``applied``).
    """
    source_dir, patches = _resolve(source_dir, patch_dir)
    with tempfile.TemporaryDirectory(prefix="patch-series-") as work_dir:
        return _evaluate(source_dir, patches, work_dir, git)


def apply_series(source_dir, patch_dir, git="git"):
    """Apply the patches of ``patch_dir`` that are not in ``source_dir`` yet, in place.

    The series is replayed in a temporary copy of the touched files first; ``source_dir`` is only
    written when no patch fails, and then only the files changed by the patches with status
    ``applies`` are replaced (each one atomically; files a patch deletes are removed). The names and
    sha256 of the applied patches are recorded in :data:`STAMP_NAME` at the root of ``source_dir``,
    so that later checks report them ``applied`` rather than ``merged``.

    Returns ``(results, applied_names)``: ``results`` as :func:`check_series` returns them for the
    source as it was before the call. When a patch fails nothing is written and ``applied_names``
    is empty: the caller looks at :func:`first_failure`.
    """
    source_dir, patches = _resolve(source_dir, patch_dir)
    with tempfile.TemporaryDirectory(prefix="patch-series-") as work_dir:
        results = _evaluate(source_dir, patches, work_dir, git)
        to_apply = [r for r in results if r["status"] == APPLIES]
        if first_failure(results) is not None or not to_apply:
            return results, []
        for rel in sorted({p for r in to_apply for p in r["files"]}):
            work_file = os.path.join(work_dir, rel)
            dest = os.path.join(source_dir, rel)
            if os.path.lexists(work_file):
                replace_file(dest, source=work_file, make_dirs=True)
            elif os.path.lexists(dest):
                os.unlink(dest)
    stamp = read_stamp(source_dir)
    stamp.update({r["name"]: r["sha256"] for r in to_apply})
    entries = [{"name": name, "sha256": stamp[name]} for name in sorted(stamp)]
    replace_file(
        os.path.join(source_dir, STAMP_NAME), make_dirs=True, text=json.dumps({"patches": entries}, indent=2) + "\n"
    )
    return results, [r["name"] for r in to_apply]
