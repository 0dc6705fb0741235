"""Rollout safety on the real local stack: a broken image tag fails health and the previous stack keeps serving."""

from __future__ import annotations

import json

import docker
import pytest
import requests

from .conftest import REPO, failures, run_playbook
from .test_local_stack import MODEL, VLLM

pytestmark = pytest.mark.integration

BROKEN = "aic-stack-cpu:broken-rollout-test"


@pytest.fixture(scope="module")
def healthy(default_stack):
    # The session's default stack (conftest.py), healthy: the release it records is the one to roll back to.
    return json.loads((REPO / ".work" / "deployed.json").read_text())["image"]


@pytest.fixture
def broken_image():
    """An image tag that exists but cannot run the stack: the base image has no lmcache and no vLLM."""
    client = docker.from_env()
    base = sorted(client.images.list(name="aic-base"), key=lambda i: i.attrs["Created"])[-1]
    base.tag(BROKEN)
    yield BROKEN
    client.images.remove(BROKEN, force=True)


def test_broken_tag_fails_and_the_previous_stack_keeps_serving(healthy, broken_image, session_tmp):
    runner = run_playbook(
        "playbooks/stack.yml",
        session_tmp,
        extravars={"aic_stack_image": broken_image, "lmcache_start_timeout": 20, "health_vllm_timeout": 300},
    )
    assert runner.status == "failed"
    messages = failures(runner)
    final = [m for m in messages if m.startswith("Fail with the report")]
    assert final, messages
    assert f"Rollout of {broken_image} failed" in final[0]
    assert f"Rolled back to {healthy}, which passed health." in final[0]

    client = docker.from_env()
    for name in ("aic-lmcache", "aic-vllm"):
        container = client.containers.get(name)
        assert container.attrs["Config"]["Image"] == healthy
        assert container.status == "running"
    response = requests.post(
        f"{VLLM}/v1/completions", json={"model": MODEL, "prompt": "Hello", "max_tokens": 4}, timeout=60
    )
    assert response.status_code == 200 and response.json()["choices"][0]["text"]
    # The record still names the healthy image.
    assert json.loads((REPO / ".work" / "deployed.json").read_text())["image"] == healthy


def test_a_second_rollout_waits_then_fails_naming_the_holder(healthy, session_tmp):
    lock = REPO / ".work" / "rollout.lock"
    lock.mkdir()
    (lock / "owner").write_text("alice@controller-2 since 2026-11-29T10:00:00 run 42\n")
    try:
        runner = run_playbook("playbooks/stack.yml", session_tmp, extravars={"rollout_lock_wait": 4})
        assert runner.status == "failed"
        messages = failures(runner)
        assert any("another rollout holds" in m and "alice@controller-2" in m for m in messages), messages
        # Nothing of the stack was touched while waiting.
        ran = {e["event_data"].get("task") for e in runner.events if e.get("event") == "runner_on_ok"}
        assert "Run vLLM with the LMCache multi-process connector" not in ran
        assert (lock / "owner").read_text().startswith("alice@")
    finally:
        for child in lock.iterdir():
            child.unlink()
        lock.rmdir()
