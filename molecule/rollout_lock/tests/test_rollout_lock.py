"""Two operators' rollouts at once, each its own ansible-playbook process running rollout.yml (the role as
playbooks/stack.yml runs it) against the node: the second waits rollout_lock_wait, then fails naming the holder, or
takes the lock once the first released it; a lock older than rollout_lock_stale_after is taken over, and the first
holder's release (its token no longer the lock's) leaves the new holder's lock in place. A dry run (--check) neither
waits for the lock nor takes it."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import docker
import pytest

PROJECT = pathlib.Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(PROJECT / "molecule" / "shared"))
from playbook_report import task_results  # noqa: E402 - the scenarios' shared helper, found through the path above

ROLLOUT = pathlib.Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "rollout.yml")
ANSIBLE_PLAYBOOK = str(pathlib.Path(sys.executable).with_name("ansible-playbook"))
NODE = "aic-molecule-rollout-lock"
LOCK = "/var/lib/aicmollock/rollout.lock"
SIGNALS = "/tmp/rollout-test"  # noqa: S108 - on the node, a directory of its own


def on_node(*argv):
    code, out = docker.from_env().containers.get(NODE).exec_run(list(argv))
    return code, out.decode()


def lock_record():
    """The lock's owner file on the node (JSON), or None when there is no lock."""
    code, out = on_node("cat", f"{LOCK}/owner")
    return json.loads(out) if code == 0 else None


def wait_for_holder(owner, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = lock_record()
        if record and record["owner"] == owner:
            return record
        time.sleep(0.2)
    pytest.fail(f"{owner} never took the lock; it is {lock_record()}")


def wait_for_file(path, timeout=60):
    deadline = time.monotonic() + timeout
    while on_node("test", "-e", path)[0] != 0:
        assert time.monotonic() < deadline, f"{path} never appeared on the node"
        time.sleep(0.2)


class Rollout:
    """One operator's rollout: ansible-playbook rollout.yml in the background, reported by the JSON callback."""

    def __init__(self, owner, *args, hold=False, ready=False, **variables):
        self.name = owner.split("@")[0]
        self.hold = f"{SIGNALS}/go-{self.name}" if hold else ""
        self.ready = f"{SIGNALS}/ready-{self.name}" if ready else ""
        extra = dict(variables, rollout_lock_owner=owner, rollout_test_hold=self.hold, rollout_test_ready=self.ready)
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
        self.process = subprocess.Popen(
            [
                ANSIBLE_PLAYBOOK,
                "-i",
                os.environ["MOLECULE_INVENTORY_FILE"],
                str(ROLLOUT),
                "-e",
                json.dumps(extra),
                *args,
            ],
            cwd=PROJECT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: ended with its workers if a test fails
        )
        RUNNING.append(self)

    def go_on(self):
        """End the rollout's work: it releases the lock now."""
        on_node("touch", self.hold)

    def finish(self, timeout=90):
        out, err = self.process.communicate(timeout=timeout)
        self.results = task_results(out, NODE, self.name, self.process.returncode, err)
        return self.process.returncode

    def result(self, task):
        assert task in self.results, (task, sorted(self.results))
        return self.results[task]


RUNNING: list[Rollout] = []


def end_modules_on_node():
    """End the modules that rollouts left running on the node (their ansible-playbook was ended): a lock module that
    still waits would take the lock later. Every Python process of the instance is a module of these tests."""
    for line in on_node("ps", "-eo", "pid=,args=")[1].splitlines():
        pid, args = line.split(None, 1)
        if args.startswith("/usr/bin/python3"):
            on_node("kill", "-KILL", pid)


@pytest.fixture(autouse=True)
def clean_node():
    """No lock and no signal files before a test; no rollout left running after it."""
    on_node("rm", "-rf", LOCK, SIGNALS)
    on_node("mkdir", "-p", SIGNALS)
    yield
    killed = False
    while RUNNING:
        rollout = RUNNING.pop()
        if rollout.process.poll() is None:
            os.killpg(rollout.process.pid, signal.SIGKILL)
            rollout.process.communicate()
            killed = True
    if killed:
        end_modules_on_node()


def test_a_second_rollout_waits_then_fails_naming_the_holder():
    alice = Rollout("alice@controller-a", hold=True, rollout_lock_wait=0)
    held = wait_for_holder("alice@controller-a")

    bob = Rollout("bob@controller-b", rollout_lock_wait=3)
    assert bob.finish() == 2
    take = bob.result("Take the rollout lock")
    assert not take["held"] and take["msg"].startswith(f"another rollout holds {LOCK}: alice@controller-a"), take
    assert take["waited"] >= 3, take
    assert bob.result("Fail when another rollout holds the lock")["msg"] == (
        f"rollout_lock: another rollout holds {LOCK}: alice@controller-a since {held['since']} run {held['token']}"
        " - waited 3 s"
    )
    # Bob never held it, so he released nothing: the lock is alice's as she took it.
    assert bob.result("Release the rollout lock").get("skipped"), bob.results
    assert lock_record() == held

    # A careless caller releases in `always` although its take failed: the role releases only a lock this run holds
    # (a failed take carries the holder's token), so alice's lock stays.
    carol = Rollout("carol@controller-c", rollout_lock_wait=0, rollout_test_release_always=True)
    assert carol.finish() == 2
    assert carol.result("Release the rollout lock").get("skipped"), carol.results
    assert lock_record() == held

    # A dry run of a rollout meanwhile neither waits for the lock nor takes it.
    dry = Rollout("dave@controller-d", "--check", rollout_lock_wait=60)
    started = time.monotonic()
    assert dry.finish() == 0
    assert time.monotonic() - started < 30
    assert dry.result("Take the rollout lock").get("skipped"), dry.results
    assert lock_record() == held

    alice.go_on()
    assert alice.finish() == 0
    assert alice.result("Take the rollout lock")["token"] == held["token"]
    assert alice.result("Release the rollout lock")["msg"] == f"released {LOCK}"
    assert lock_record() is None


def test_a_waiting_rollout_takes_the_lock_once_it_is_released():
    alice = Rollout("alice@controller-a", hold=True, rollout_lock_wait=0)
    held = wait_for_holder("alice@controller-a")
    bob = Rollout("bob@controller-b", ready=True, rollout_lock_wait=60)
    wait_for_file(bob.ready)
    time.sleep(3)  # bob is in the lock's module now, waiting
    alice.go_on()
    assert alice.finish() == 0
    assert alice.result("Release the rollout lock")["msg"] == f"released {LOCK}"

    assert bob.finish() == 0
    take = bob.result("Take the rollout lock")
    assert take["held"] and take["owner"] == "bob@controller-b" and take["taken_over"] is None, take
    assert take["msg"] == f"took {LOCK} for bob@controller-b run {take['token']}"
    assert take["token"] != held["token"]
    assert take["waited"] >= 1.5, take
    assert bob.result("Release the rollout lock")["msg"] == f"released {LOCK}"
    assert lock_record() is None


def test_a_stale_lock_is_taken_over_and_its_first_holders_release_leaves_it():
    alice = Rollout("alice@controller-a", hold=True, rollout_lock_wait=0)
    stale = wait_for_holder("alice@controller-a")
    time.sleep(2.2)  # the lock's age (whole seconds) is now 2 at least: stale for rollout_lock_stale_after=1

    carol = Rollout("carol@controller-c", hold=True, rollout_lock_wait=0, rollout_lock_stale_after=1)
    new = wait_for_holder("carol@controller-c")
    assert new["token"] != stale["token"]

    # Alice's rollout ends: her token is no longer the lock's, so her release leaves carol's lock, naming carol.
    alice.go_on()
    assert alice.finish() == 0
    release = alice.result("Release the rollout lock")
    assert not release["released"], release
    assert release["msg"] == (
        f"left {LOCK}: it is held by carol@controller-c since {new['since']} run {new['token']}, not by run {stale['token']}"
    )
    assert any("carol@controller-c" in warning for warning in release.get("warnings", [])), release
    assert lock_record() == new

    carol.go_on()
    assert carol.finish() == 0
    take = carol.result("Take the rollout lock")
    assert take["held"], take
    assert take["taken_over"]["owner"] == "alice@controller-a"
    assert take["taken_over"]["token"] == stale["token"]
    assert take["taken_over"]["age"] >= 2
    assert "took over a stale lock" in take["msg"] and "alice@controller-a" in take["msg"], take["msg"]
    assert carol.result("Release the rollout lock")["msg"] == f"released {LOCK}"
    assert lock_record() is None
