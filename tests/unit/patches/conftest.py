"""The real pinned upstream sources the patch series are written against, downloaded once.

The wheels are downloaded with ``pip download --no-deps --only-binary :all:`` and unpacked where and
as the image_build role's patch check keeps them (``image_build_sources_dir``: the user's cache,
``$XDG_CACHE_HOME/aic-stack/sources/<project>-<version>/`` with the wheel and ``unpacked-<dist>``), so
the tests and the role share one download, reused by every later run and checkout. The unpacked trees
are read-only for the tests: a test that applies patches works on a copy of the few files the series
touches (``pristine_copy``).
"""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.aic.stack.plugins.module_utils.patching import list_patches, touched_paths

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
PATCHES = REPO_ROOT / "patches"
# The image_build role's default image_build_sources_dir.
SOURCES = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "aic-stack" / "sources"

# project -> (pip package, version, patch series directory)
PINNED = {
    "vllm": ("vllm", "0.26.0", PATCHES / "vllm" / "v0.26.0"),
    "lmcache": ("lmcache", "0.5.2", PATCHES / "lmcache" / "v0.5.2"),
}


def _dist(package):
    return package.lower().replace("-", "_").replace(".", "_")


def _download(package, version, wheels):
    pattern = str(wheels / f"{_dist(package)}-{version}-*.whl")
    found = sorted(glob.glob(pattern))
    if found:
        return pathlib.Path(found[0])
    partial = wheels / f".download-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
    cmd += ["--only-binary", ":all:", "-d", str(partial), f"{package}=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        pytest.fail(f"pip download {package}=={version} failed (needs PyPI once):\n{proc.stdout}{proc.stderr}")
    (wheel,) = partial.glob("*.whl")
    dest = wheels / wheel.name
    os.replace(wheel, dest)
    shutil.rmtree(partial, ignore_errors=True)
    return dest


def _unpack(wheel, dest):
    if dest.is_dir():
        return dest
    partial = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(partial)
    try:
        os.replace(partial, dest)
    except OSError:
        if not dest.is_dir():
            raise
        shutil.rmtree(partial, ignore_errors=True)  # another run unpacked it first
    return dest


@pytest.fixture(scope="session")
def pinned_sources():
    """``{project: unpacked wheel root}`` for every pinned project (downloaded and unpacked once)."""
    sources = {}
    for project, (package, version, _series) in PINNED.items():
        directory = SOURCES / f"{project}-{version}"
        directory.mkdir(parents=True, exist_ok=True)
        wheel = _download(package, version, directory)
        sources[project] = _unpack(wheel, directory / f"unpacked-{_dist(package)}")
    return sources


def _copy_touched(source, patch_dir, dest):
    for patch in list_patches(str(patch_dir)):
        for rel in touched_paths(patch):
            target = pathlib.Path(dest) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pathlib.Path(source) / rel, target)
    return pathlib.Path(dest)


@pytest.fixture
def pristine_copy(pinned_sources, tmp_path):
    """``f(project)``: a writable copy of only the files the project's series touches, unpatched."""

    def _copy(project):
        dest = tmp_path / f"{project}-src"
        counter = 1
        while dest.exists():
            counter += 1
            dest = tmp_path / f"{project}-src-{counter}"
        return _copy_touched(pinned_sources[project], PINNED[project][2], dest)

    return _copy


def _git_apply(tree, patches, reverse=False):
    args = ["git", "apply", *(["-R"] if reverse else []), *map(str, patches)]
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(pathlib.Path(tree).parent))
    proc = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def git_apply():
    """``f(tree, patches, reverse=False)``: plain ``git apply`` (what an upstream merge looks like)."""
    return _git_apply


@pytest.fixture
def series_dir():
    """``f(project)``: the real series directory, ``patches/<project>/<ref>``."""
    return lambda project: PINNED[project][2]


@pytest.fixture
def patched_file(pristine_copy):
    """``f(project, relpath)``: text of ``relpath`` after the project's whole series was applied."""

    def _patched(project, relpath):
        tree = pristine_copy(project)
        _git_apply(tree, list_patches(str(PINNED[project][2])))
        return (tree / relpath).read_text()

    return _patched


@pytest.fixture
def run_series(run_module, monkeypatch):
    """``run_module`` for aic.stack.patch_series, with the module warnings going into its result.

    AnsibleModule keeps warnings in a process-wide registry that ``run_module`` does not clear, so
    in-process runs would otherwise see the warnings of earlier runs (and earlier tests); and once
    any test imported ansible's controller code, warnings go to the controller's display instead of
    the result unless ``is_controller`` is reset.
    """
    from ansible.module_utils import _internal
    from ansible.module_utils.common import warnings as module_warnings

    from ansible_collections.aic.stack.plugins.modules import patch_series

    if hasattr(_internal, "is_controller"):
        monkeypatch.setattr(_internal, "is_controller", False)

    def _run(args, check_mode=False):
        for name in ("_global_warnings", "_global_deprecations"):
            registry = getattr(module_warnings, name, None)
            if registry is not None:
                registry.clear()
        return run_module(patch_series, args, check_mode=check_mode)

    return _run
