"""What an operator's ansible-playbook run reported, for the testinfra tests that run one as a separate process.

The run uses the JSON stdout callback (``ANSIBLE_STDOUT_CALLBACK=ansible.posix.json``); ``task_results`` turns its
report into one result per task name, the role prefix cut ("aic.stack.slurm_job : Submit the job" -> "Submit the
job"), and checks that every result is the expected node's. Import it from a scenario's tests with
``sys.path.insert(0, str(PROJECT / "molecule" / "shared"))``. ``run_playbook`` runs one to its end that way.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys


class NoReport(AssertionError):
    """The run printed no JSON report (it failed before the callback wrote one)."""


def task_results(stdout, node, what="ansible-playbook", rc=None, stderr=""):
    """{task name: result} of a JSON callback report on ``stdout``; every result must be ``node``'s (a host name, or
    a tuple of them for a playbook whose plays run on several, e.g. a play on localhost first)."""
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        raise NoReport(f"{what}: no JSON report (rc {rc}): {stdout[-2000:]} {stderr[-2000:]}") from None
    results = {}
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                assert host in (node if isinstance(node, tuple) else (node,)), host
                # The callback sets a result's "action" to the task's module, so results are keyed by task name.
                results[task["task"]["name"].split(" : ")[-1]] = result
    return results


def run_playbook(playbook, node, variables, *args, what=None, timeout=300):
    """One operator's ``ansible-playbook -i <the scenario's inventory> playbook -e variables *args``, from the project
    directory, to its end: (exit code, {task name: result})."""
    argv = [
        str(pathlib.Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        os.environ["MOLECULE_INVENTORY_FILE"],
    ]
    proc = subprocess.run(
        [*argv, str(playbook), "-e", json.dumps(variables), *args],
        cwd=os.environ["MOLECULE_PROJECT_DIRECTORY"],
        env=dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    name = what or pathlib.Path(playbook).name
    return proc.returncode, task_results(proc.stdout, node, name, proc.returncode, proc.stderr)
