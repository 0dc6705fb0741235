"""aic.stack.deploy_state and module_utils/deploy_state: the no-op fast path's fingerprint, snapshot and comparison.

The fingerprint and the comparison with data; the snapshot and the module against the real Docker engine of this
machine (a container of the local base image labelled as a stack of its own), a real work directory with rendered
files, a live and a dead process behind pid files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.aic.stack.plugins.action.deploy_state import RUN_FACT_PREFIXES, variable_prefixes
from ansible_collections.aic.stack.plugins.filter.rollout import deploy_every_node
from ansible_collections.aic.stack.plugins.module_utils import deploy_state as ds
from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI
from ansible_collections.aic.stack.plugins.modules import deploy_state as module

PREFIX = os.environ.get("AIC_UNIT_PREFIX", "aic-unit")
PLAN = {"stack_name": "aic", "vllm": {"max_model_len": 256}, "rollout": {"canary": 1, "batch_size": "25%"}}


# --- the fingerprint --------------------------------------------------------------------------------------------


def _fp(plan, variables, collection, pointers):
    return ds.fingerprint(ds.fingerprint_parts(plan, variables, collection, pointers))


def test_the_fingerprint_changes_with_the_plan_a_variable_the_collection_or_a_pointer():
    pointer = {"aic-stack-cpu.current.json": "p1"}
    base = _fp(PLAN, {"vllm_image": "x"}, "c1", pointer)
    assert base == _fp(dict(reversed(list(PLAN.items()))), {"vllm_image": "x"}, "c1", pointer)
    assert _fp({**PLAN, "vllm": {"max_model_len": 512}}, {"vllm_image": "x"}, "c1", pointer) != base
    assert _fp(PLAN, {"vllm_image": "y"}, "c1", pointer) != base
    assert _fp(PLAN, {"vllm_image": "x"}, "c2", pointer) != base
    assert _fp(PLAN, {"vllm_image": "x"}, "c1", {"aic-stack-cpu.current.json": "p2"}) != base


def test_the_rollouts_order_and_pace_are_not_part_of_the_fingerprint():
    base = _fp(PLAN, {"aic_vllm_max_model_len": 256}, "c", {})
    paced = {**PLAN, "rollout": {"canary": 0, "batch_size": "100%"}}
    extra = {"aic_vllm_max_model_len": 256, "aic_rollout_batch_size": "100%", "aic_deploy_fast_path": False}
    assert _fp(paced, extra, "c", {}) == base


def test_a_changed_fingerprint_names_the_parts_that_changed():
    parts = ds.fingerprint_parts(PLAN, {"aic_vllm_max_model_len": 256, "vllm_image": "x"}, "c", {})
    rec = ds.record(ds.fingerprint(parts), _state(), parts)
    now = ds.fingerprint_parts({**PLAN, "vllm": {"max_model_len": 512}}, {"aic_vllm_max_model_len": 512}, "c", {})
    assert ds.differences(rec, ds.fingerprint(now), _state(), now) == [
        "the inputs, the collection or the release changed since the last deploy "
        "(plan.vllm, var.aic_vllm_max_model_len, var.vllm_image)"
    ]
    many = ds.fingerprint_parts(PLAN, {f"aic_x{i}": i for i in range(10)}, "c", {})
    (reason,) = ds.differences(rec, ds.fingerprint(many), _state(), many)
    assert reason.endswith("and 4 more)"), reason


def test_collection_variables_take_the_collections_prefixes_and_leave_the_runs_facts():
    task_vars = {
        "aic_vllm_max_model_len": 512,
        "aic_plan": {"x": 1},
        "aic_release": {"image": "i"},
        "aic_rollout_outcome": {"state": "healthy"},
        "aic_deploy_unchanged": True,
        "vllm_image": "aic-stack-cpu:1",
        "health_vllm_timeout": 60,
        "ansible_host": "10.0.0.1",
        "playbook_dir": "/somewhere",
        "_aic_deploy_state_path": "/w/deploy-state.json",
    }
    prefixes = variable_prefixes()
    assert "aic_" in prefixes and "vllm_" in prefixes and "health_" in prefixes and "l2_dirs_" in prefixes
    assert ds.collection_variables(task_vars, prefixes, RUN_FACT_PREFIXES) == {
        "aic_vllm_max_model_len": 512,
        "health_vllm_timeout": 60,
        "vllm_image": "aic-stack-cpu:1",
    }


def test_the_collection_digest_follows_content_and_names_not_caches(tmp_path):
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text("- debug: msg=1\n")
    (tmp_path / "plugins" / "__pycache__").mkdir(parents=True)
    (tmp_path / "deploy.yml").write_text("---\n")
    first = ds.collection_digest(str(tmp_path))
    (tmp_path / "plugins" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"cache")
    (tmp_path / ".work").mkdir()
    (tmp_path / ".work" / "deploy-state.json").write_text("{}")
    assert ds.collection_digest(str(tmp_path)) == first
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text("- debug: msg=2\n")
    assert ds.collection_digest(str(tmp_path)) != first


def test_the_release_pointer_is_the_stack_images_by_content(tmp_path):
    assert ds.release_pointers(str(tmp_path / "missing"), "aic-stack-cpu") == {}
    (tmp_path / "aic-stack-cpu.current.json").write_text('{"image": "a"}')
    (tmp_path / "aic-prometheus.current.json").write_text('{"image": "p"}')
    (tmp_path / "aic-stack-cpu-1.tar.zst").write_bytes(b"tar")
    first = ds.release_pointers(str(tmp_path), "aic-stack-cpu")
    assert list(first) == ["aic-stack-cpu.current.json"]
    (tmp_path / "aic-prometheus.current.json").write_text('{"image": "q"}')
    assert ds.release_pointers(str(tmp_path), "aic-stack-cpu") == first
    (tmp_path / "aic-stack-cpu.current.json").write_text('{"image": "b"}')
    assert ds.release_pointers(str(tmp_path), "aic-stack-cpu") != first


# --- the comparison ---------------------------------------------------------------------------------------------

C = {
    "id": "c1",
    "image": "sha256:a",
    "ref": "img:1",
    "ref_image": "sha256:a",
    "status": "running",
    "started": "t1",
    "restarts": 0,
}


def _state(**containers):
    return {
        "engine": {"containers": containers, "networks": ["n1"], "volumes": ["aic-prometheus-data"]},
        "files": {},
        "dirs": {},
    }


def test_the_same_fingerprint_and_state_is_unchanged():
    now = _state(**{"aic-vllm": C})
    assert ds.differences(ds.record("f", now), "f", json.loads(json.dumps(now))) == []


def test_each_difference_names_itself():
    rec = ds.record("f", _state(**{"aic-vllm": C, "aic-lmcache": {**C, "id": "c2"}}))
    assert ds.differences(None, "f", _state()) == ["no record of an earlier deploy on this node"]
    assert ds.differences({"schema": 0}, "f", _state()) == ["the record has schema 0, not 1"]
    assert ds.differences(rec, "g", rec["state"]) == [
        "the inputs, the collection or the release changed since the last deploy"
    ]
    now = _state(**{"aic-vllm": {**C, "started": "t2", "restarts": 1}, "aic-grafana": C})
    reasons = ds.differences(rec, "f", now)
    assert reasons == [
        "container aic-grafana was not there at the last deploy",
        "container aic-lmcache is gone since the last deploy",
        "container aic-vllm was stopped or restarted since the last deploy (now running, started t2, 1 restarts by its policy)",
    ]
    recreated = _state(**{"aic-vllm": {**C, "id": "c9"}, "aic-lmcache": {**C, "id": "c2"}})
    assert ds.differences(rec, "f", recreated) == ["container aic-vllm was recreated since the last deploy"]
    moved = _state(**{"aic-vllm": {**C, "ref_image": None}, "aic-lmcache": {**C, "id": "c2"}})
    assert ds.differences(rec, "f", moved) == ["container aic-vllm: its image img:1 now names another image"]


def test_files_dirs_and_streamers_name_themselves():
    before = _state()
    before["files"] = {
        "/w/p.yml": {"sha256": "a", "mode": 0o644},
        "/w/s.pid": {"pid": 7, "alive": True},
        "/w/gone": {"sha256": "b", "mode": 0o644},
    }
    before["dirs"] = {"/w/l2": {"uid": 0, "gid": 0, "mode": 0o750, "dir": True}}
    now = _state()
    now["files"] = {
        "/w/p.yml": {"sha256": "c", "mode": 0o644},
        "/w/s.pid": {"pid": 7, "alive": False},
        "/w/new": {"sha256": "d", "mode": 0o600},
    }
    now["dirs"] = {"/w/l2": {"uid": 0, "gid": 0, "mode": 0o777, "dir": True}}
    assert ds.differences(ds.record("f", before), "f", now) == [
        "file /w/gone is missing",
        "file /w/new is new since the last deploy",
        "file /w/p.yml changed since the last deploy",
        "file /w/s.pid: process 7 is not running",
        "directory /w/l2 changed since the last deploy",
    ]


def test_every_node_must_say_true():
    hostvars = {
        "n1": {"s": {"unchanged": True}, "ok": True},
        "n2": {"s": {"unchanged": True}},
        "n3": {"s": {"unchanged": False}},
    }
    assert deploy_every_node(hostvars, ["n1", "n2"], "s", "unchanged") is True
    assert deploy_every_node(hostvars, ["n1", "n3"], "s", "unchanged") is False
    assert deploy_every_node(hostvars, ["n1", "n4"], "s", "unchanged") is False
    assert deploy_every_node(hostvars, ["n1"], "ok") is True
    assert deploy_every_node(hostvars, ["n1", "n2"], "ok") is False
    assert deploy_every_node(hostvars, [], "ok") is False


# --- the snapshot and the module on the real engine ---------------------------------------------------------------


@pytest.fixture
def stack(docker_client, base_image):
    """A stack of its own on the real engine: one labelled container, its network and a volume."""
    name = f"{PREFIX}-ds-{time.time_ns()}"
    network = docker_client.networks.create(name)
    volume = docker_client.volumes.create(f"{name}-data")
    container = docker_client.containers.run(
        base_image, ["sleep", "600"], detach=True, name=f"{name}-svc", labels={"ai.aic.stack": name}, network=name
    )
    try:
        yield name, container
    finally:
        for c in docker_client.containers.list(all=True, filters={"label": f"ai.aic.stack={name}"}):
            c.remove(force=True)
        network.remove()
        volume.remove(force=True)


@pytest.fixture
def work(tmp_path):
    """A node's work directory: a rendered config, a live streamer's pid file, its log, an L2 directory."""
    (tmp_path / "prometheus").mkdir()
    (tmp_path / "prometheus" / "prometheus.yml").write_text("global: {}\n")
    (tmp_path / "log_stream").mkdir()
    streamer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (tmp_path / "log_stream" / "svc.pid").write_text(f"{streamer.pid}\n")
    (tmp_path / "log_stream" / "svc.streamer.log").write_text("started\n")
    (tmp_path / "l2").mkdir(mode=0o750)
    try:
        yield tmp_path, streamer
    finally:
        streamer.kill()
        streamer.wait()


def _args(stack_name, work_dir, **extra):
    return {
        "path": str(work_dir / "deploy-state.json"),
        "stack": stack_name,
        "watch": [str(work_dir / "prometheus"), str(work_dir / "log_stream"), str(work_dir / "grafana")],
        "dirs": [str(work_dir / "l2")],
        "fingerprint": "f1",
        **extra,
    }


def test_the_snapshot_sees_the_stacks_containers_network_volumes_files_and_dirs(stack, work):
    name, container = stack
    work_dir, streamer = work
    snap = ds.snapshot(
        DockerAPI(),
        name,
        watch=[str(work_dir / "prometheus"), str(work_dir / "log_stream"), str(work_dir / "none")],
        dirs=[str(work_dir / "l2")],
    )
    containers = snap["engine"]["containers"]
    assert len(containers) == 1
    svc = next(iter(containers.items()))
    assert svc[0] == f"{name}-svc" and svc[1]["id"] == container.id and svc[1]["status"] == "running"
    assert svc[1]["image"] == svc[1]["ref_image"] and svc[1]["restarts"] == 0
    assert len(snap["engine"]["networks"]) == 1 and snap["engine"]["volumes"] == [f"{name}-data"]
    files = snap["files"]
    assert files[str(work_dir / "log_stream" / "svc.pid")] == {"pid": streamer.pid, "alive": True}
    assert str(work_dir / "log_stream" / "svc.streamer.log") not in files
    assert files[str(work_dir / "prometheus" / "prometheus.yml")]["mode"] == 0o644
    assert files[str(work_dir / "none")] is None
    assert snap["dirs"][str(work_dir / "l2")]["mode"] == 0o750


def test_recorded_then_checked_is_unchanged_until_something_changes(stack, work, run_module):
    name, container = stack
    work_dir, streamer = work
    args = _args(name, work_dir)
    nothing = run_module(module, {**args, "state": "recorded"}, check_mode=True)
    assert nothing["unchanged"] and not (work_dir / "deploy-state.json").exists()
    first = run_module(module, args)
    assert first["unchanged"] is False and first["reasons"] == ["no record of an earlier deploy on this node"]
    recorded = run_module(module, {**args, "state": "recorded", "parts": {"plan.vllm": "v1"}})
    assert recorded["changed"] is False and (work_dir / "deploy-state.json").exists()
    assert json.loads((work_dir / "deploy-state.json").read_text())["parts"] == {"plan.vllm": "v1"}
    checked = run_module(module, args)
    assert (checked["unchanged"], checked["reasons"], checked["fingerprint"]) == (True, [], "f1")
    # Log lines keep coming while the stack runs: not a change.
    (work_dir / "log_stream" / "svc.streamer.log").write_text("started\nmore\n")
    assert run_module(module, args)["unchanged"] is True
    assert run_module(module, {**args, "fingerprint": "f2"})["reasons"] == [
        "the inputs, the collection or the release changed since the last deploy"
    ]

    (work_dir / "prometheus" / "prometheus.yml").write_text("global: {scrape_interval: 1s}\n")
    assert run_module(module, args)["reasons"] == [
        f"file {work_dir}/prometheus/prometheus.yml changed since the last deploy"
    ]
    run_module(module, {**args, "state": "recorded"})

    streamer.kill()
    streamer.wait()
    assert run_module(module, args)["reasons"] == [
        f"file {work_dir}/log_stream/svc.pid: process {streamer.pid} is not running"
    ]
    # Recorded dead, still dead: still a reason (what the full path restarts).
    run_module(module, {**args, "state": "recorded"})
    assert run_module(module, args)["reasons"] == [
        f"file {work_dir}/log_stream/svc.pid: process {streamer.pid} is not running"
    ]
    (work_dir / "log_stream" / "svc.pid").unlink()
    run_module(module, {**args, "state": "recorded"})

    os.chmod(work_dir / "l2", 0o777)
    assert run_module(module, args)["reasons"] == [f"directory {work_dir}/l2 changed since the last deploy"]
    os.chmod(work_dir / "l2", 0o750)

    container.restart(timeout=0)
    (reason,) = run_module(module, args)["reasons"]
    assert reason.startswith(f"container {name}-svc was stopped or restarted since the last deploy (now running"), (
        reason
    )
    run_module(module, {**args, "state": "recorded"})
    container.remove(force=True)
    assert run_module(module, args)["reasons"] == [f"container {name}-svc is gone since the last deploy"]


def test_an_engine_that_does_not_answer_is_a_reason_when_checking_and_a_failure_when_recording(tmp_path, run_module):
    args = _args("aic", tmp_path, docker_host=f"unix://{tmp_path}/no.sock", timeout=2)
    checked = run_module(module, args)
    assert checked.rc == 0 and checked["unchanged"] is False
    assert checked["reasons"][0].startswith("the Docker engine did not answer (cannot reach the Docker engine")
    recorded = run_module(module, {**args, "state": "recorded"})
    assert recorded.failed and "cannot take the node's snapshot" in recorded["msg"]


def test_an_unreadable_record_is_a_reason(tmp_path, docker_client, run_module):
    (tmp_path / "deploy-state.json").write_text("{not json")
    checked = run_module(module, _args(f"{PREFIX}-none", tmp_path))
    assert checked["unchanged"] is False and checked["reasons"][0].startswith(
        f"the record {tmp_path}/deploy-state.json cannot be read"
    )


def test_without_a_fingerprint_the_module_fails_naming_the_action(tmp_path, run_module):
    result = run_module(module, {**_args("aic", tmp_path), "fingerprint": ""})
    assert result.failed and result["msg"].startswith("fingerprint: empty")
