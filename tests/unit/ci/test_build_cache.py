"""scripts/build-cache.sh: the local build's outputs (content-tagged artifacts, the wheelhouse) kept between test runs:
seeded into a fresh work directory without overwriting, kept as one generation, copies that a test may corrupt
without touching the cache, release pointers never cached."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "build-cache.sh"
TAG = "0123456789ab"


def run(action, work, cache, check=True, **extra_env):
    env = {**os.environ, "AIC_BUILD_CACHE": str(cache), **extra_env}
    proc = subprocess.run([str(SCRIPT), action, str(work)], env=env, capture_output=True, text=True, check=False)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def build_outputs(work, tag=TAG, wheels="86e678b1591d"):
    arts = work / "artifacts"
    arts.mkdir(parents=True, exist_ok=True)
    tarball = arts / f"aic-stack-cpu-{tag}.tar.zst"
    tarball.write_bytes(b"tarball " + tag.encode())
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    (arts / f"aic-stack-cpu-{tag}.tar.zst.sha256").write_text(f"{digest}  {tarball.name}\n")
    (arts / f"aic-stack-cpu-{tag}.manifest.json").write_text(json.dumps({"tag": tag}) + "\n")
    (arts / "aic-stack-cpu.current.json").write_text(json.dumps({"pointer": tag}) + "\n")
    house = work / "wheelhouse" / wheels
    house.mkdir(parents=True, exist_ok=True)
    (house / "torch-2.0-cp311.whl").write_bytes(b"wheel")
    (work / "wheelhouse" / f"{wheels}.partial").mkdir(exist_ok=True)  # a download that was cut: never cached


def files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_keep_then_seed_gives_a_fresh_work_directory_the_outputs_but_not_the_pointer(tmp_path):
    first, cache, fresh = tmp_path / "first", tmp_path / "cache", tmp_path / "fresh"
    build_outputs(first)
    run("keep", first, cache)
    assert files(cache) == [
        f"artifacts/aic-stack-cpu-{TAG}.manifest.json",
        f"artifacts/aic-stack-cpu-{TAG}.tar.zst",
        f"artifacts/aic-stack-cpu-{TAG}.tar.zst.sha256",
        "wheelhouse/86e678b1591d/torch-2.0-cp311.whl",
    ]
    out = run("seed", fresh, cache)
    assert files(fresh) == files(cache)
    assert (fresh / "artifacts" / f"aic-stack-cpu-{TAG}.tar.zst").read_bytes() == b"tarball " + TAG.encode()
    assert f"aic-stack-cpu-{TAG}.tar.zst -> {fresh}/artifacts" in out.stdout
    # Copies: corrupting the work directory's tarball (as the distribution tests do) leaves the cache whole.
    tarball = fresh / "artifacts" / f"aic-stack-cpu-{TAG}.tar.zst"
    assert tarball.stat().st_ino != (cache / "artifacts" / tarball.name).stat().st_ino
    with open(tarball, "r+b") as fh:
        fh.write(b"XXXX")
    assert (cache / "artifacts" / tarball.name).read_bytes() == b"tarball " + TAG.encode()


def test_seed_never_overwrites_and_keep_holds_one_generation(tmp_path):
    old, cache, new = tmp_path / "old", tmp_path / "cache", tmp_path / "new"
    build_outputs(old)
    run("keep", old, cache)
    # A work directory with its own file of that name keeps it.
    (new / "artifacts").mkdir(parents=True)
    (new / "artifacts" / f"aic-stack-cpu-{TAG}.tar.zst.sha256").write_text("mine\n")
    run("seed", new, cache)
    assert (new / "artifacts" / f"aic-stack-cpu-{TAG}.tar.zst.sha256").read_text() == "mine\n"
    # The next build has other content tags: keep drops what that run did not have.
    other = tmp_path / "other"
    build_outputs(other, tag="fedcba987654", wheels="aaaaaaaaaaaa")
    out = run("keep", other, cache)
    assert files(cache) == [
        "artifacts/aic-stack-cpu-fedcba987654.manifest.json",
        "artifacts/aic-stack-cpu-fedcba987654.tar.zst",
        "artifacts/aic-stack-cpu-fedcba987654.tar.zst.sha256",
        "wheelhouse/aaaaaaaaaaaa/torch-2.0-cp311.whl",
    ]
    assert f"aic-stack-cpu-{TAG}.tar.zst dropped (not this run's)" in out.stdout


def test_a_tarball_that_does_not_match_its_sha256_is_not_kept(tmp_path):
    work, cache = tmp_path / "work", tmp_path / "cache"
    build_outputs(work)
    with open(work / "artifacts" / f"aic-stack-cpu-{TAG}.tar.zst", "r+b") as fh:
        fh.write(b"XXXX")
    out = run("keep", work, cache)
    assert (
        f"aic-stack-cpu-{TAG}.tar.zst: its tarball is missing or does not match its .sha256: not cached" in out.stdout
    )
    # None of the artifact's files: a seeded .sha256 or manifest without its tarball would only mislead.
    assert [f for f in files(cache) if f.startswith("artifacts/")] == []
    assert files(cache) == ["wheelhouse/86e678b1591d/torch-2.0-cp311.whl"]


def test_an_empty_cache_seeds_nothing_off_does_nothing_and_bad_arguments_are_refused(tmp_path):
    fresh = tmp_path / "fresh"
    run("seed", fresh, tmp_path / "none")
    assert not fresh.exists()
    build_outputs(tmp_path / "work")
    run("keep", tmp_path / "work", "off", XDG_CACHE_HOME=str(tmp_path / "xdg"), HOME=str(tmp_path / "home"))
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()
    assert not (tmp_path / "work" / "off").exists() and not pathlib.Path("off").exists()
    bad = run("clear", tmp_path / "work", tmp_path / "cache", check=False)
    assert bad.returncode == 2 and "usage" in bad.stderr
