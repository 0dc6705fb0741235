"""The preflight role run the way an operator runs it: ``ansible-playbook deploy.yml -i <inventory>`` with a bad
input stops in preflight with a message that names the variable, on the controller, before any host is touched;
``playbooks/preflight.yml --check`` publishes the plan.

The inventory is the scenario's, plus a node whose connection cannot work (its container does not exist): whatever
connects to a host reports it unreachable, so a run that names the bad input for that node never went near it.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

PROJECT = pathlib.Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
NODE = "aic-molecule-preflight"
GHOST = "aic-molecule-preflight-ghost"
WORK_DIR = "/srv/aicmolpre"
# The venv's, beside the Python that runs these tests.
ANSIBLE_PLAYBOOK = str(pathlib.Path(sys.executable).with_name("ansible-playbook"))


@pytest.fixture(scope="module")
def inventories(tmp_path_factory):
    """The scenario's inventory and a second one that adds the ghost node to aic_nodes."""
    ghost = tmp_path_factory.mktemp("inventory") / "ghost.yml"
    ghost.write_text(
        json.dumps(
            {"aic_nodes": {"hosts": {GHOST: {"ansible_connection": "community.docker.docker", "ansible_host": GHOST}}}}
        )
    )
    return ["-i", os.environ["MOLECULE_INVENTORY_FILE"], "-i", str(ghost)]


def play(inventories, playbook, *args):
    """Run a playbook of the checkout with the JSON callback: (exit status, the callback's report)."""
    # Without pipelining a connection to the ghost fails as unreachable (with it, as a module that did not run).
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_PIPELINING="false")
    done = subprocess.run(
        [ANSIBLE_PLAYBOOK, *inventories, playbook, *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON report (rc {done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return done.returncode, report


PLAN_TASK = "preflight : Validate inputs and publish the plan"
SPEC_TASK = "preflight : Validating arguments against arg spec 'main'"


def task_results(report):
    """{host: [(task name, result), ...]} of every task that ran, in order."""
    ran = {}
    for p in report["plays"]:
        for t in p["tasks"]:
            for host, result in t["hosts"].items():
                ran.setdefault(host, []).append((t["task"]["name"], result))
    return ran


BAD_INPUTS = [
    # (extra variable, what the message must say)
    ("aic_flavour=gpu", "value of aic_flavour must be one of: cpu, rocm, got: gpu"),
    ("aic_vllm_port=70000", "aic_vllm_port: 70000 is outside 1..65535"),
    ("aic_vllm_port=eighty", "argument 'aic_vllm_port' is of type str and we were unable to convert to int"),
    ("aic_prometheus_port=18101", "aic_vllm_instances: vLLM instance 1 would listen on port 18101, already used by"),
    ("aic_lmcache_http_port=19391", "aic_prometheus_port: port 19391 is already used by aic_lmcache_http_port"),
    ("aic_lmcache_l1_size_gb=4", "aic_lmcache_shm_size_gb: must be at least aic_lmcache_l1_size_gb (2 < 4"),
]


@pytest.mark.parametrize(("extra", "message"), BAD_INPUTS, ids=[extra for extra, _message in BAD_INPUTS])
def test_a_bad_input_stops_the_deploy_in_preflight_naming_the_variable(host, inventories, extra, message):
    rc, report = play(inventories, "deploy.yml", "-e", extra)
    assert rc == 2, report["stats"]
    ran = task_results(report)
    assert set(ran) == {NODE, GHOST}, ran
    for node, tasks in ran.items():
        # On each node: the role's argument spec (no connection), then the plan failed; nothing else ran, in any play.
        assert [name.split(" - ")[0] for name, _result in tasks] == [SPEC_TASK, PLAN_TASK], (node, tasks)
        result = tasks[-1][1]
        assert result.get("failed") and not result.get("unreachable"), (node, result)
        assert result["msg"].startswith("Invalid input: "), result["msg"]
        assert message in result["msg"], result["msg"]
        stats = report["stats"][node]
        assert (stats["failures"], stats["changed"], stats["unreachable"]) == (1, 0, 0), stats
    # The node is as molecule created it: no work directory.
    assert not host.file(WORK_DIR).exists


def test_check_mode_publishes_the_plan_without_touching_a_node(inventories):
    rc, report = play(inventories, "playbooks/preflight.yml", "--check")
    assert rc == 0, report["stats"]
    plans = {
        node: result["ansible_facts"]["aic_plan"]
        for node, tasks in task_results(report).items()
        for name, result in tasks
        if name == PLAN_TASK
    }
    assert set(plans) == {NODE, GHOST}
    for plan in plans.values():
        assert plan["containers"]["vllm"] == "aicmolpre-vllm"
        assert [i["port"] for i in plan["vllm_instances"]] == [18100, 18101]
    for node in (NODE, GHOST):
        assert report["stats"][node]["changed"] == report["stats"][node]["unreachable"] == 0
        assert report["stats"][node]["failures"] == 0
