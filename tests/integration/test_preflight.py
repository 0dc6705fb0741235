"""Drive the real preflight (and deploy) playbooks with ansible-runner: bad input fails before any host is touched.

No Docker needed: preflight runs on the controller only, and a failed preflight must end the whole run.
"""

from __future__ import annotations

import os
import sys

import ansible_runner
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFLIGHT_PLAYBOOK = os.path.join(REPO, "playbooks", "preflight.yml")
DEPLOY_PLAYBOOK = os.path.join(REPO, "deploy.yml")
INVENTORY = os.path.join(REPO, "inventories", "local")

PLAN_ACTIONS = {"aic.stack.plan"}
ARGSPEC_ACTIONS = {"ansible.builtin.validate_argument_spec", "validate_argument_spec"}
TASK_EVENTS = {
    "runner_on_ok",
    "runner_on_failed",
    "runner_on_skipped",
    "runner_on_unreachable",
    "runner_on_start",
    "runner_item_on_ok",
    "runner_item_on_failed",
    "runner_on_async_ok",
    "runner_on_async_failed",
    "playbook_on_task_start",
}


def run_playbook(private_data_dir, playbook, extravars):
    # ansible-playbook lives next to the interpreter running the tests (the venv); the run must find it
    # and the repository's roles and collection even though it runs from a private data dir.
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    runner = ansible_runner.run(
        private_data_dir=str(private_data_dir),
        playbook=playbook,
        inventory=INVENTORY,
        extravars=extravars,
        project_dir=REPO,
        quiet=True,
        envvars={
            "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, ".collections"),
            "ANSIBLE_ROLES_PATH": os.path.join(REPO, "roles"),
            "ANSIBLE_NOCOLOR": "1",
            "PATH": path,
        },
    )
    events = list(runner.events)
    return runner, events


def task_events(events):
    return [e for e in events if e["event"] in TASK_EVENTS]


def describe(events):
    return "\n".join(
        "{} role={} task={} action={}".format(
            e["event"], e["event_data"].get("role"), e["event_data"].get("task"), e["event_data"].get("task_action")
        )
        for e in task_events(events)
    )


def assert_only_preflight_ran(runner, events, extra_actions=()):
    tasks = task_events(events)
    assert tasks, f"no task ran at all; stdout:\n{runner.stdout.read()}"
    outside = [e for e in tasks if e["event_data"].get("role") != "preflight"]
    assert not outside, "tasks outside role 'preflight' ran:\n" + describe(events)
    actions = {e["event_data"].get("task_action") for e in tasks}
    assert actions <= PLAN_ACTIONS | ARGSPEC_ACTIONS | set(extra_actions), "unexpected task actions:\n" + describe(
        events
    )
    plays = [e["event_data"].get("play") for e in events if e["event"] == "playbook_on_play_start"]
    assert plays == ["Validate every input before any host is touched"], plays


def the_failure(runner, events):
    assert runner.status == "failed", f"status {runner.status!r}, rc {runner.rc}\n{describe(events)}"
    assert runner.rc != 0
    failed = [e for e in events if e["event"] == "runner_on_failed"]
    assert len(failed) == 1, describe(events)
    assert runner.stats["failures"] == {"localhost": 1}
    return failed[0]["event_data"]


BAD_INPUTS = [
    pytest.param({"aic_flavour": "gpu"}, "aic_flavour", ARGSPEC_ACTIONS | PLAN_ACTIONS, id="unknown-flavour"),
    pytest.param({"aic_vllm_port": "80x"}, "aic_vllm_port", PLAN_ACTIONS, id="non-integer-port"),
    pytest.param(
        {"aic_lmcache_http_port": 9191, "aic_prometheus_port": 9191},
        ("aic_lmcache_http_port", "aic_prometheus_port"),
        PLAN_ACTIONS,
        id="duplicate-port",
    ),
    pytest.param({"aic_flavour": "rocm", "aic_vllm_model": ""}, "aic_vllm_model", PLAN_ACTIONS, id="rocm-no-model"),
    pytest.param({"aic_router_policy": "fastest"}, "aic_router_policy", PLAN_ACTIONS, id="unknown-router-policy"),
    pytest.param(
        {"aic_router_port": 8000}, ("aic_router_port", "aic_vllm_port"), PLAN_ACTIONS, id="router-port-collides"
    ),
]


@pytest.mark.parametrize("extravars, variables, failing_actions", BAD_INPUTS)
def test_preflight_rejects_bad_input(tmp_path, extravars, variables, failing_actions):
    runner, events = run_playbook(tmp_path, PREFLIGHT_PLAYBOOK, extravars)
    failure = the_failure(runner, events)
    msg = failure["res"]["msg"]
    for name in (variables,) if isinstance(variables, str) else variables:
        assert name in msg, f"{name!r} not named in {msg!r}"
    assert failure["role"] == "preflight"
    assert failure["task_action"] in failing_actions, describe(events)
    assert_only_preflight_ran(runner, events)
    # The plan was never published.
    assert not any(
        "aic_plan" in (e["event_data"].get("res") or {}).get("ansible_facts", {})
        for e in events
        if e["event"] == "runner_on_ok"
    )


@pytest.mark.parametrize(
    "extravars, variable",
    [
        pytest.param({"aic_vllm_port": "80x"}, "aic_vllm_port", id="non-integer-port"),
        pytest.param({"aic_flavour": "gpu"}, "aic_flavour", id="unknown-flavour"),
    ],
)
def test_deploy_stops_after_preflight_on_bad_input(tmp_path, extravars, variable):
    """deploy.yml imports host/build/stack/health plays after preflight; none of them may start."""
    runner, events = run_playbook(tmp_path, DEPLOY_PLAYBOOK, extravars)
    failure = the_failure(runner, events)
    assert variable in failure["res"]["msg"]
    assert_only_preflight_ran(runner, events)
    assert runner.stats["processed"] == {"localhost": 1}
    assert not runner.stats["changed"]


def test_a_router_host_outside_the_job_fails_in_preflight_naming_it(tmp_path):
    """The job-level check of the router (after the plan, before any host is touched): its host must be a node."""
    runner, events = run_playbook(tmp_path, DEPLOY_PLAYBOOK, {"aic_router_host": "node9"})
    failure = the_failure(runner, events)
    msg = failure["res"]["msg"]
    assert "aic_router_host" in msg and "node9" in msg, msg
    assert failure["role"] == "preflight" and failure["task_action"] == "ansible.builtin.assert", describe(events)
    assert_only_preflight_ran(runner, events, extra_actions={"ansible.builtin.debug", "ansible.builtin.assert"})
    assert not runner.stats["changed"]


def test_preflight_accepts_valid_input_with_empty_port(tmp_path):
    runner, events = run_playbook(tmp_path, PREFLIGHT_PLAYBOOK, {"aic_vllm_port": ""})
    assert runner.status == "successful", f"rc {runner.rc}\n{describe(events)}\n{runner.stdout.read()}"
    assert runner.rc == 0
    assert runner.stats["failures"] == {}
    assert runner.stats["changed"].get("localhost", 0) == 0
    assert runner.stats["ok"].get("localhost", 0) >= 2  # argument spec + plan
    # The summary debug task of the role follows the plan (skipped below verbosity 1).
    assert_only_preflight_ran(runner, events, extra_actions={"ansible.builtin.debug", "ansible.builtin.assert"})

    plan_ok = [e for e in events if e["event"] == "runner_on_ok" and e["event_data"].get("task_action") in PLAN_ACTIONS]
    assert len(plan_ok) == 1, describe(events)
    res = plan_ok[0]["event_data"]["res"]
    assert res["changed"] is False
    plan = res["ansible_facts"]["aic_plan"]
    assert plan["ports"]["vllm"] == 8000
    assert plan["endpoints"]["vllm"] == "http://127.0.0.1:8000"
    assert plan["flavour"] == "cpu"
    # The inventory's templated work dir (the checkout's .work) reached the plan.
    assert plan["paths"]["work_dir"] == os.path.join(REPO, ".work")
    assert res["plan"] == plan
    # Every aic_* variable of the local inventory is a plan input: no "unknown aic_ variable" warning.
    stdout = runner.stdout.read()
    assert "unknown aic_ variable" not in stdout, stdout
