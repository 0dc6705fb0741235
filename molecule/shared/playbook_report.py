"""What an operator's ansible-playbook run reported, for the testinfra tests that run one as a separate process.

The run uses the JSON stdout callback (``ANSIBLE_STDOUT_CALLBACK=ansible.posix.json``); ``task_results`` turns its
report into one result per task name, the role prefix cut ("aic.stack.slurm_job : Submit the job" -> "Submit the
job"), and checks that every result is the expected node's. Import it from a scenario's tests with
``sys.path.insert(0, str(PROJECT / "molecule" / "shared"))``.
"""

from __future__ import annotations

import json


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
