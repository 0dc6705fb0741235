"""The slurm_job role as operators meet it, each run its own ansible-playbook process (job.yml, the role as
playbooks/slurm_job.yml runs it) against the instance's real Slurm 22.05: a job that exits 3 fails the play naming
code 3 and its last stderr lines, its files kept under logs/<job id>/; a job still running after slurm_job_timeout
is cancelled (it leaves squeue, its processes end) and fails the play saying so; --check shows the sbatch command
line and submits nothing (no job, no file). Also: the converged job is in Slurm's record as completed."""

from __future__ import annotations

import os
import pathlib
import re
import sys
import time
import uuid

import docker

PROJECT = pathlib.Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(PROJECT / "molecule" / "shared"))
from playbook_report import run_playbook  # noqa: E402 - the scenarios' shared helper, found through the path above

JOB = pathlib.Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "job.yml")
NODE = "aic-molecule-slurm-job"
CONF = "/var/lib/aicmolslurm/slurm/etc/slurm.conf"
LOGS = "/var/lib/aicmolslurm/logs"
WAIT_TASK = "Wait for the job and read its exit status (fails with the job's exit code)"


def on_node(*argv):
    """Run argv on the instance with the cluster's SLURM_CONF; (exit code, output)."""
    code, out = docker.from_env().containers.get(NODE).exec_run(list(argv), environment={"SLURM_CONF": CONF})
    return code, out.decode()


def read_on_node(path):
    code, out = on_node("cat", path)
    assert code == 0, f"{path}: {out}"
    return out


def queued():
    """Ids of the jobs squeue lists as the role's wait does (pending, running, completing)."""
    code, out = on_node("squeue", "--noheader", "--format=%i")
    assert code == 0, out
    return out.split()


def known_jobs(name=None):
    """Ids of every job the controller still knows (finished ones too: MinJobAge is 600 s), of one name if given."""
    argv = ["squeue", "--noheader", "--states=all", "--format=%i"]
    code, out = on_node(*argv, *([f"--name={name}"] if name else []))
    assert code == 0, out
    return out.split()


def scontrol_job(job_id):
    code, out = on_node("scontrol", "show", "job", "-o", job_id)
    assert code == 0, out
    return out


def logs_tree():
    """Every path under the logs root, with the size of each file."""
    code, out = on_node("find", LOGS, "-printf", "%p %s\n")
    assert code == 0, out
    return sorted(out.splitlines())


def unique(prefix):
    return f"aicmol-{prefix}-{uuid.uuid4().hex[:6]}"


class Run:
    """One operator's `ansible-playbook job.yml`, to its end, reported by the JSON callback."""

    def __init__(self, name, command, *args, **variables):
        extra = dict(variables, slurm_job_name=name, slurm_job_command=command)
        self.rc, self.results = run_playbook(JOB, NODE, extra, *args, what=name)

    def result(self, task):
        assert task in self.results, (task, sorted(self.results))
        return self.results[task]

    def job_id(self):
        published = self.result("Publish the job id and files (slurm_job_id, slurm_job_files)")["ansible_facts"]
        job_id = published["slurm_job_id"]
        assert re.fullmatch(r"\d+", job_id), job_id
        return job_id


def test_the_converged_job_completed_in_slurms_record():
    (job_id,) = known_jobs("aicmol-hello")
    fields = scontrol_job(job_id)
    assert "JobState=COMPLETED" in fields and "ExitCode=0:0" in fields, fields
    assert read_on_node(f"{LOGS}/{job_id}/aicmol-hello.exit") == "0\n"


def test_a_job_that_exits_3_fails_the_play_naming_code_3():
    name = unique("fail")
    run = Run(name, "echo before the failure\necho boom >&2\nexit 3")
    assert run.rc == 2, run.results
    job_id = run.job_id()
    wait = run.result(WAIT_TASK)
    assert wait.get("failed"), wait
    named = f"Slurm job {job_id} exited with code 3 (state FAILED); stderr {LOGS}/{job_id}/{name}.err"
    assert wait["msg"].startswith(named), wait["msg"]
    assert wait["msg"].endswith("| boom"), wait["msg"]  # the last stderr lines are in the message
    assert (wait["exit_code"], wait["exit_source"], wait["cancelled"]) == (3, "exit_file", False), wait
    # The play stopped at the failure: the job is not reported as done.
    assert "Report the job" not in run.results, sorted(run.results)

    assert read_on_node(f"{LOGS}/{job_id}/{name}.exit") == "3\n"
    assert read_on_node(f"{LOGS}/{job_id}/{name}.out") == "before the failure\n"
    assert read_on_node(f"{LOGS}/{job_id}/{name}.err").splitlines()[-1] == "boom"
    fields = scontrol_job(job_id)
    assert "JobState=FAILED" in fields and "ExitCode=3:0" in fields, fields


def test_a_job_past_its_timeout_is_cancelled():
    name = unique("slow")
    # A sleep of its own length: its process is this job's and no other's.
    run = Run(name, "echo started\nsleep 2711", slurm_job_timeout=5)
    assert run.rc == 2, run.results
    job_id = run.job_id()
    wait = run.result(WAIT_TASK)
    assert wait.get("failed") and wait["cancelled"] and wait["changed"], wait
    said = rf"Slurm job {job_id} still (RUNNING|PENDING) after 5 s; cancelled it"
    assert re.fullmatch(said, wait["msg"]), wait["msg"]
    assert wait["exit_code"] is None, wait

    deadline = time.monotonic() + 30
    while job_id in queued():
        assert time.monotonic() < deadline, f"the cancelled job {job_id} is still in squeue: {scontrol_job(job_id)}"
        time.sleep(0.5)
    assert "JobState=CANCELLED" in scontrol_job(job_id)
    if "RUNNING" in wait["msg"]:  # it had started (on a loaded machine it may still have been pending)
        assert read_on_node(f"{LOGS}/{job_id}/{name}.out") == "started\n"
    while on_node("pgrep", "-f", "sleep 2711")[0] == 0:
        assert time.monotonic() < deadline, f"the cancelled job's sleep still runs: {on_node('ps', '-ef')[1]}"
        time.sleep(0.5)


def test_check_mode_submits_nothing():
    name = unique("check")
    jobs, tree = known_jobs(), logs_tree()
    run = Run(name, "echo never", "--check")
    assert run.rc == 0, run.results
    shown = run.result("Show what is submitted")["msg"]
    assert shown.startswith(f"Would submit: sbatch --parsable --job-name={name} --nodes=1 "), shown
    assert run.result("Submit the job (not in check mode)").get("skipped"), run.results
    assert run.result("Wait for the job and read its exit status (fails with the job's exit code)").get("skipped")
    # Nothing reached Slurm, nothing was written under the logs root (no staged script either).
    assert known_jobs(name) == []
    assert known_jobs() == jobs
    assert logs_tree() == tree
