"""The build as an operator runs it (playbooks/build.yml, the instance as the build host) against the engine of the
machine running molecule: converge built the stack image, its zstd tarball, the tarball's sha256 and the manifest;
here each is checked against the others and against the engine, then playbooks/build.yml runs again as separate
ansible-playbook processes: a build step that fails fails the run at the build and ships nothing, and --check builds
and writes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tarfile

import docker

PROJECT = pathlib.Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(PROJECT / "molecule" / "shared"))
from playbook_report import run_playbook  # noqa: E402 - the scenarios' shared helper, found through the path above

NODE = "aic-molecule-image-build"
ARTIFACTS = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "aic", "artifacts")
POINTER = ARTIFACTS / "aic-stack-cpu.current.json"
STEP = "echo aic-molecule-image-build > /etc/aic-molecule-image-build"


def build(*args, **variables):
    """One operator's ansible-playbook playbooks/build.yml; (exit code, {task name: result})."""
    return run_playbook(PROJECT / "playbooks" / "build.yml", (NODE, "localhost"), variables, *args, timeout=900)


def artifacts():
    """Every file of the artifact directory: small ones by content, tarballs by (size, mtime, inode)."""
    state = {}
    for path in sorted(ARTIFACTS.iterdir()):
        if path.name.endswith(".tar.zst"):
            st = path.stat()
            state[path.name] = (st.st_size, st.st_mtime_ns, st.st_ino)
        else:
            state[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def stack_tags():
    return sorted(tag for image in docker.from_env().images.list("aic-stack-cpu") for tag in image.tags)


def run_tag(results):
    """The stack image reference the run computed from its inputs (what its build tags, and nothing else does): the
    scenario's check looks at it alone, as other tests on the same engine may tag their own stack images meanwhile."""
    facts = results["Compute the stack image tag from every build input"]["ansible_facts"]
    return f"aic-stack-cpu:{facts['image_build_inputs_tag']}"


def sha256_of(path):
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def archive_manifest(tarball):
    """The manifest.json of the docker-save archive inside the zstd tarball (what docker load reads)."""
    zstd = subprocess.Popen(["zstd", "-dc", str(tarball)], stdout=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=zstd.stdout, mode="r|") as archive:
            for member in archive:
                if member.name == "manifest.json":
                    return json.load(archive.extractfile(member))
    finally:
        zstd.stdout.close()
        zstd.kill()
        zstd.wait()
    raise AssertionError(f"{tarball}: no manifest.json in the archive")


def test_the_build_is_an_image_its_tarball_sha256_and_manifest_of_its_own():
    manifest = json.loads(POINTER.read_text())
    name, tag = manifest["image"].split(":")
    assert name == "aic-stack-cpu" and manifest["inputs_tag"] == tag, manifest
    # The scenario's build step made a tag no other build has: the local stack's release is another image.
    local = PROJECT / ".work" / "artifacts" / "aic-stack-cpu.current.json"
    if local.exists():
        assert json.loads(local.read_text())["image"] != manifest["image"]
    tarball = ARTIFACTS / manifest["tarball"]
    assert tarball.stat().st_size == manifest["tarball_bytes"]
    digest = sha256_of(tarball)
    assert digest == manifest["sha256"]
    assert (ARTIFACTS / f"{manifest['tarball']}.sha256").read_text().split() == [digest, manifest["tarball"]]
    assert json.loads((ARTIFACTS / f"{name}-{tag}.manifest.json").read_text()) == manifest
    assert manifest["pins"]["pip"] and manifest["wheels"]["stack"] and manifest["wheels"]["deps"], manifest
    # The tarball is the image as docker load reads it.
    (entry,) = archive_manifest(tarball)
    assert entry["RepoTags"] == [manifest["image"]], entry
    assert entry["Config"].removesuffix(".json").split("/")[-1] == manifest["image_id"].split(":")[1]

    client = docker.from_env()
    image = client.images.get(manifest["image"])
    assert image.id == manifest["image_id"]
    assert image.labels["ai.aic.inputs"] == tag and image.labels["ai.aic.deps-image"] == manifest["deps_image"]
    out = client.containers.run(manifest["image"], ["cat", "/etc/aic-molecule-image-build"], remove=True)
    assert out == b"aic-molecule-image-build\n"


def test_a_failing_build_step_fails_the_run_at_the_build_and_ships_nothing():
    before, pointer, tags = artifacts(), POINTER.read_bytes(), stack_tags()
    rc, results = build(image_build_extra_steps=[STEP, "echo injected build failure >&2; exit 3"])
    assert rc == 2, {k: v for k, v in results.items() if v.get("failed")}
    failed = [task for task, result in results.items() if result.get("failed")]
    assert failed == ["Build the stack image"], failed
    tag = run_tag(results)
    assert "injected build failure" in json.dumps(results["Build the stack image"])
    assert (
        "Save the image as a tarball with sha256 and manifest (atomic; a failed build never gets here)" not in results
    )
    # No tarball, manifest or pointer moved; no image was tagged.
    assert artifacts() == before
    assert POINTER.read_bytes() == pointer
    assert tag not in tags and tag not in stack_tags(), tag


def test_check_mode_builds_and_writes_nothing():
    before, tags = artifacts(), stack_tags()
    rc, results = build("--check", image_build_extra_steps=[STEP, "echo a change never built"])
    assert rc == 0, {k: v for k, v in results.items() if v.get("failed")}
    tag = run_tag(results)
    # It says it would build (a new tag: its inputs changed), and builds nothing.
    assert results["Build the stack image"].get("changed"), results["Build the stack image"]
    assert artifacts() == before
    assert tag not in tags and tag not in stack_tags(), tag
