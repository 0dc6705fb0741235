"""make build on the real engine: image, tarball, sha256, manifest; no-op rerun; a failing build ships nothing."""

from __future__ import annotations

import hashlib
import json
import os

import docker
import pytest

from .conftest import REPO, changed_tasks, failures, run_playbook

pytestmark = pytest.mark.integration

ARTIFACTS = REPO / ".work" / "artifacts"
CURRENT = ARTIFACTS / "aic-stack-cpu.current.json"


def snapshot():
    """Content hash of every small file and (size, mtime, inode) of every tarball of the stack image's artifacts (what
    a build writes; a rollout's distribution saves the monitoring images' next to them, which is not the build's)."""
    state = {}
    for name in sorted(n for n in os.listdir(ARTIFACTS) if n.startswith("aic-stack-cpu")):
        path = ARTIFACTS / name
        if name.endswith(".tar.zst"):
            st = path.stat()
            state[name] = (st.st_size, st.st_mtime_ns, st.st_ino)
        else:
            state[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


@pytest.fixture(scope="module")
def built(session_tmp):
    runner = run_playbook("playbooks/build.yml", session_tmp)
    assert runner.status == "successful", failures(runner)
    return runner


def test_build_produces_image_tarball_checksum_and_manifest(built):
    manifest = json.loads(CURRENT.read_text())
    tarball = ARTIFACTS / manifest["tarball"]
    assert tarball.is_file()
    assert tarball.stat().st_size == manifest["tarball_bytes"]
    sha_line = (ARTIFACTS / (manifest["tarball"] + ".sha256")).read_text()
    assert sha_line.split()[0] == manifest["sha256"]
    image = docker.from_env().images.get(manifest["image"])
    assert image.id == manifest["image_id"]
    assert manifest["pins"]["pip"], manifest
    assert image.labels["ai.aic.inputs"] == manifest["image"].split(":")[1]


def test_second_build_does_nothing(built, session_tmp):
    before = snapshot()
    runner = run_playbook("playbooks/build.yml", session_tmp)
    assert runner.status == "successful", failures(runner)
    assert changed_tasks(runner) == []
    assert snapshot() == before


def test_failed_build_fails_the_run_and_ships_nothing(built, session_tmp):
    before = snapshot()
    current_before = json.loads(CURRENT.read_text())
    runner = run_playbook(
        "playbooks/build.yml",
        session_tmp,
        extravars={"image_build_extra_steps": ["echo injected build failure >&2; exit 3"]},
    )
    assert runner.status == "failed"
    assert runner.rc != 0
    failed = [e["event_data"]["task"] for e in runner.events if e.get("event") == "runner_on_failed"]
    assert failed == ["Build the stack image"], failures(runner)
    # No new tarball; the previous artifact and its manifest are byte-identical; the pointer did not move.
    assert snapshot() == before
    assert json.loads(CURRENT.read_text()) == current_before
