"""Shared fixtures for integration tests: run real playbooks through ansible-runner.

The modules that need the local stack run last, in STACK_MODULES order (pytest_collection_modifyitems below): first
the ones that only need the default stack up and healthy (they share one deploy, ``default_stack``), then the ones
that change it; the last of those deploys the default stack again, so the session ends with it deployed.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys

import ansible_runner
import docker
import pytest
import requests

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
LOCAL_INVENTORY = REPO / "inventories" / "local"

# The integration modules that use the local stack, in the order they run, after every other module (those keep their
# alphabetical order). The first three only need the default stack up and healthy and share it (``default_stack``).
# test_l2_zero_causes starts from whatever stack answers (test_l2_full's, the default one but for LMCache's L2
# directory: giving LMCache another one is what it tests) and test_drift from whatever that left. The last three change
# the stack whatever it was (test_router deploys two vLLM instances behind the router, which test_vllm_instances keeps
# without the router and ends with a teardown; test_cliff_bench leaves its last arm). AIC_TEST_LEAVE_DEFAULT_STACK=1
# ends the session by deploying the default stack again (scripts/run-tests.sh does not need it: molecule's scenarios
# deploy stacks of their own).
STACK_MODULES = (
    "test_local_stack",
    "test_l2_tier",
    "test_rollback",
    "test_faults",
    "test_l2_full",
    "test_l2_zero_causes",
    "test_drift",
    "test_router",
    "test_vllm_instances",
    "test_cliff_bench",
)
# The default stack of inventories/local: its containers' label and the endpoints that answer when it is healthy.
STACK_LABEL = "ai.aic.stack=aic"
STACK_HEALTH_URLS = (
    "http://127.0.0.1:8000/health",
    "http://127.0.0.1:8080/healthcheck",
    "http://127.0.0.1:9090/-/ready",
)
PROMETHEUS_DIR = REPO / ".work" / "prometheus"


# The rehearsal cluster's modules: their own engines, sshd's, Slurm and ports, so scripts/run-tests.sh runs them beside
# the light modules (--part=beds next to --part=light), never beside the local stack's, whose vLLMs would starve
# theirs on two cores.
BED_MODULES = ("test_rehearsal_bed", "test_rehearsal")


def pytest_addoption(parser):
    parser.addoption(
        "--part",
        choices=("all", "beds", "light", "stack", "alone"),
        default="all",
        help="run one part of the integration suite: the rehearsal cluster's modules (beds), the local stack's "
        "tests that must run alone (alone, marked alone: they restart the Docker engine or bound recoveries in "
        "seconds), the local stack's other "
        "tests (stack, STACK_MODULES) or every other one (light); default all",
    )


def part_of(item):
    name = pathlib.Path(str(item.fspath)).stem
    if name in BED_MODULES:
        return "beds"
    if item.get_closest_marker("alone"):
        return "alone"
    return "stack" if name in STACK_MODULES else "light"


def pytest_collection_modifyitems(config, items):
    """Run the local-stack modules after every other integration module, in STACK_MODULES order; nothing else moves.
    With --part, keep only that part's tests."""
    rank = {name: i + 1 for i, name in enumerate(STACK_MODULES)}

    def here(item):
        return pathlib.Path(str(item.fspath)).parent == HERE

    def key(item):
        return rank.get(pathlib.Path(str(item.fspath)).stem, 0) if here(item) else 0

    stack = sorted((item for item in items if key(item)), key=key)  # stable: each module keeps its test order
    rest = [item for item in items if not key(item)]
    last = max((n for n, item in enumerate(rest) if here(item)), default=len(rest) - 1)
    items[:] = rest[: last + 1] + stack + rest[last + 1 :]
    part = config.getoption("--part", default="all")
    if part != "all":
        here_items = [item for item in items if here(item)]
        dropped = [item for item in here_items if part_of(item) != part]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if item not in dropped]


def runner_env():
    """ansible-runner's environment: this checkout's config and collection, this interpreter's venv."""
    return {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        # ansible-runner execs ansible-playbook: use the one of this interpreter's venv.
        "PATH": os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }


def run_playbook(playbook, tmp_path, inventory=LOCAL_INVENTORY, extravars=None, cmdline=None):
    """Run ``playbook`` (relative to the repo) with ansible-runner; return the Runner (status, stats, events)."""
    private = tmp_path / f"runner-{pathlib.Path(playbook).stem}"
    if private.exists():
        shutil.rmtree(private)
    private.mkdir(parents=True)
    return ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(REPO),
        playbook=str(REPO / playbook),
        inventory=str(inventory),
        extravars=extravars or {},
        envvars=runner_env(),
        cmdline=cmdline,
        quiet=True,
    )


def run_module(module, module_args, private, inventory=LOCAL_INVENTORY, host_pattern="localhost"):
    """Run one module of the collection ad hoc on ``host_pattern`` with ansible-runner (``private``: its data dir)."""
    private.mkdir(parents=True, exist_ok=True)
    return ansible_runner.run(
        private_data_dir=str(private),
        host_pattern=host_pattern,
        inventory=str(inventory),
        module=module,
        module_args=module_args,
        envvars=runner_env(),
        quiet=True,
    )


def failures(runner):
    """Human-readable failure messages from a runner's events."""
    out = []
    for event in runner.events:
        if event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            data = event["event_data"]
            res = data.get("res", {})
            out.append(f"{data.get('task')}: {res.get('msg')}")
            # Loops: every failed item's own message.
            out.extend(f"{data.get('task')}: {r.get('msg')}" for r in res.get("results", []) if r.get("failed"))
    return out


def changed_tasks(runner):
    """(role, task) of every task that reported changed."""
    out = []
    for event in runner.events:
        if event.get("event") == "runner_on_ok" and event["event_data"].get("res", {}).get("changed"):
            data = event["event_data"]
            out.append((data.get("role"), data.get("task")))
    return out


@pytest.fixture(scope="session")
def session_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("integration")


@pytest.fixture(scope="session")
def slurm_conf():
    """Start (or keep) the single-node Slurm of scripts/slurm-up.sh; the path of its slurm.conf."""
    state = os.environ.get("AIC_SLURM_DIR") or "/var/lib/aic-slurm"
    proc = subprocess.run(
        [str(REPO / "scripts" / "slurm-up.sh"), state],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/slurm-up.sh failed (rc {proc.returncode}; scripts/host-deps.sh installs slurm-wlm and munge):\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
    conf = f"{state}/etc/slurm.conf"
    assert f"SLURM_CONF={conf}" in proc.stdout
    return conf


def stack_fingerprint():
    """Every container of the default stack as a default deploy decides it (image, command, environment, labels,
    ports, mounts, namespaces, limits) and whether it runs, plus the generated Prometheus configuration. Container
    ids are left out: a container recreated with the same configuration (a rollback) is the same stack; a namespace
    shared with another container is named by that container's name."""
    containers = docker.from_env().containers.list(all=True, filters={"label": STACK_LABEL})
    names = {c.id: c.name for c in containers}

    def by_name(mode):
        kind, _dummy, ref = (mode or "").partition(":")
        return f"container:{names.get(ref, ref)}" if kind == "container" else mode

    out = {}
    for c in containers:
        config, host = c.attrs["Config"], c.attrs["HostConfig"]
        out[c.name] = [
            c.attrs["State"]["Running"],
            config.get("Image"),
            config.get("Entrypoint"),
            config.get("Cmd"),
            sorted(config.get("Env") or []),
            config.get("Labels"),
            host.get("PortBindings"),
            host.get("Mounts"),
            host.get("Binds"),
            host.get("ShmSize"),
            by_name(host.get("IpcMode")),
            by_name(host.get("PidMode")),
            host.get("NetworkMode"),
            host.get("Ulimits"),
            host.get("Devices"),
            host.get("RestartPolicy"),
        ]
    for path in sorted(PROMETHEUS_DIR.rglob("*")) if PROMETHEUS_DIR.is_dir() else []:
        if path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def stack_started_at():
    """StartedAt of every container of the default stack, by name."""
    containers = docker.from_env().containers.list(all=True, filters={"label": STACK_LABEL})
    return {c.name: c.attrs["State"]["StartedAt"] for c in containers}


def stack_answers():
    try:
        return all(requests.get(url, timeout=10).status_code == 200 for url in STACK_HEALTH_URLS)
    except requests.RequestException:
        return False


class DefaultStack:
    """The default local stack (deploy.yml, inventories/local, no extra vars) of this session.

    ``ensure()`` deploys it unless the stack that the last default deploy of this session left is still there: the
    same containers configured the same way (stack_fingerprint), every one running, every service answering. A
    module that changed it (other extra vars, an out-of-band container, a teardown) makes the next ensure() deploy.
    """

    def __init__(self, tmp_path_factory):
        self._tmp = tmp_path_factory
        self._fingerprint = None
        self.runner = None  # the successful default deploy that made the running stack
        # Of that deploy: the start times of the stack's containers before and after it, when the stack was up and
        # answering before it (a deploy over a running stack; in CI the session's first one, as scripts/run-tests.sh
        # deployed the default stack just before), else None.
        self.started_around = None

    def deploy(self):
        """Run the default deploy (each in its own private data dir: its events stay readable)."""
        before = stack_started_at() if stack_answers() else None
        runner = run_playbook("deploy.yml", self._tmp.mktemp("default-stack"))
        assert runner.status == "successful", failures(runner)
        self.runner, self._fingerprint = runner, stack_fingerprint()
        self.started_around = (before, stack_started_at()) if before else None
        return runner

    @property
    def fingerprint(self):
        """stack_fingerprint() of the stack the last default deploy of this session left (None before one)."""
        return self._fingerprint

    def is_up(self):
        return self._fingerprint is not None and stack_fingerprint() == self._fingerprint and stack_answers()

    def ensure(self):
        if not self.is_up():
            self.deploy()
        return self.runner


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory):
    """The session's DefaultStack (deploys nothing by itself)."""
    return DefaultStack(tmp_path_factory)


@pytest.fixture(scope="module")
def default_stack(local_stack):
    """The default local stack, up and healthy, for a module that needs nothing else: deployed for the first module
    that asks and again only when something changed it since. The runner of the deploy that made it."""
    return local_stack.ensure()


@pytest.fixture(scope="session", autouse=True)
def leave_the_default_stack(request, local_stack):
    """AIC_TEST_LEAVE_DEFAULT_STACK=1: a session that passed ends with the default stack up, deployed only when the
    last stack module did not leave it (for what runs against it next)."""
    yield
    if os.environ.get("AIC_TEST_LEAVE_DEFAULT_STACK") == "1" and not request.session.testsfailed:
        local_stack.ensure()
