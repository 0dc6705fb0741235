#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_wait
short_description: Wait for a Slurm or SPUR batch job to finish and report its exit code
version_added: 0.1.0
description:
  - Polls C(squeue) every O(poll_interval) seconds until job O(job_id) is no longer pending or running (it left the
    queue or reached a final state), for at most O(timeout) seconds.
  - The exit code comes from the job's own exit-status file O(exit_file) (written by the script that
    C(aic.stack.slurm_job_script) renders), waiting up to O(exit_file_timeout) seconds for it to appear on a shared
    file system; without that file it comes from C(scontrol show job) (dialect V(slurm)) and then C(sacct).
  - Fails when the job exits non-zero (unless O(fail_on_error=false)), naming the job and its exit code, with the last
    lines of O(err_file) when given; on timeout it cancels the job (O(cancel_on_timeout)) and fails.
  - In the V(spur) dialect every command gets C(--controller) O(controller) (when set) and the job is looked up in
    the whole C(squeue) table, since SPUR ignores C(-j). SPUR's sacct reports 141 for jobs that exited 0, hence the
    exit-status file first.
  - The Slurm client commands read the environment of the task (C(SLURM_CONF), C(SPUR_CONTROLLER_ADDR)).
author:
  - aic.stack developers (!UNKNOWN)
extends_documentation_fragment:
  - aic.stack.attributes
attributes:
  check_mode:
    details:
      - The module only reads the queue and files; it waits in check mode too. It never reports a change, except
        that it cancels a job that ran past O(timeout) when O(cancel_on_timeout) is true (not in check mode).
options:
  job_id:
    description: The Slurm job id (as printed by sbatch).
    type: str
    required: true
  dialect:
    description: V(slurm) for standard Slurm, V(spur) for SPUR's Slurm-compatible commands.
    type: str
    choices: [slurm, spur]
    default: slurm
  controller:
    description: SPUR controller address passed as C(--controller) (dialect V(spur) only); empty means none.
    type: str
    default: ""
  exit_file:
    description: The file in which the job script writes its exit status (an integer). Empty means none.
    type: path
  exit_file_timeout:
    description: Seconds to wait for O(exit_file) after the job left the queue (shared file systems lag).
    type: int
    default: 10
  err_file:
    description: The job's stderr file; its last lines are added to the failure message.
    type: path
  timeout:
    description: Seconds to wait for the job to finish.
    type: int
    default: 3600
  poll_interval:
    description: Seconds between two C(squeue) calls.
    type: float
    default: 5
  cancel_on_timeout:
    description: Cancel the job (C(scancel)) when it is still queued or running after O(timeout).
    type: bool
    default: true
  fail_on_error:
    description: Fail when the job's exit code is not 0 or cannot be found.
    type: bool
    default: true
notes:
  - The job may be pending for part of O(timeout); pick it for queue time plus run time.
"""

EXAMPLES = r"""
- name: Wait for the job and fail with its exit code
  aic.stack.slurm_wait:
    job_id: "{{ submitted.stdout | aic.stack.slurm_job_id }}"
    exit_file: /work/logs/{{ submitted.stdout | aic.stack.slurm_job_id }}/smoke.exit
    timeout: 1800
  environment:
    SLURM_CONF: /var/lib/aic-slurm/etc/slurm.conf

- name: Wait for a SPUR job without failing the play
  aic.stack.slurm_wait:
    job_id: "4711"
    dialect: spur
    controller: spur-ctl:6817
    poll_interval: 10
    fail_on_error: false
  register: job
"""

RETURN = r"""
job_id:
  description: The job id.
  returned: always
  type: str
  sample: "42"
state:
  description: The job's last known state (C(COMPLETED), C(FAILED), C(TIMEOUT), ...; C(UNKNOWN) once it left the
    queue and nothing else knows it).
  returned: always
  type: str
  sample: COMPLETED
exit_code:
  description: The job's exit code; null when it could not be found (or on timeout).
  returned: always
  type: int
  sample: 0
exit_source:
  description: Where the exit code came from (V(exit_file), V(scontrol), V(sacct)), null when unknown.
  returned: always
  type: str
  sample: exit_file
elapsed:
  description: Seconds spent waiting.
  returned: always
  type: float
  sample: 2.5
polls:
  description: Number of squeue calls.
  returned: always
  type: int
  sample: 3
cancelled:
  description: Whether the job was cancelled after O(timeout).
  returned: always
  type: bool
  sample: false
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aic.stack.plugins.module_utils import slurm


def _controller_args(params):
    if params["dialect"] == "spur" and params["controller"]:
        return ["--controller", params["controller"]]
    return []


def _read_exit_file(path, wait):
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(path) as handle:
                text = handle.read().strip()
            return int(text)
        except FileNotFoundError:
            pass
        except ValueError:
            return None
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def _tail(path, lines=10):
    try:
        with open(path, errors="replace") as handle:
            return handle.read().splitlines()[-lines:]
    except OSError:
        return []


def main():
    module = AnsibleModule(
        argument_spec={
            "job_id": {"type": "str", "required": True},
            "dialect": {"type": "str", "choices": list(slurm.DIALECTS), "default": "slurm"},
            "controller": {"type": "str", "default": ""},
            "exit_file": {"type": "path"},
            "exit_file_timeout": {"type": "int", "default": 10},
            "err_file": {"type": "path"},
            "timeout": {"type": "int", "default": 3600},
            "poll_interval": {"type": "float", "default": 5},
            "cancel_on_timeout": {"type": "bool", "default": True},
            "fail_on_error": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    job_id = p["job_id"].strip()
    if not slurm.JOB_ID_RE.match(job_id):
        module.fail_json(msg=f"job_id must be a Slurm job id (digits), got {p['job_id']!r}")
    dialect = p["dialect"]
    result = {
        "changed": False,
        "job_id": job_id,
        "state": "UNKNOWN",
        "exit_code": None,
        "exit_source": None,
        "elapsed": 0.0,
        "polls": 0,
        "cancelled": False,
    }
    start = time.monotonic()
    deadline = start + max(p["timeout"], 0)
    squeue = slurm.squeue_argv(dialect, p["controller"])
    errors = 0
    while True:
        rc, out, err = module.run_command(squeue)
        result["polls"] += 1
        if rc != 0:
            errors += 1
            if errors >= 5:
                module.fail_json(
                    msg=f"squeue failed {errors} times in a row (rc {rc}): {err.strip() or out.strip()}", **result
                )
            state = "UNKNOWN"
        else:
            errors = 0
            state = slurm.parse_squeue_state(out, job_id, dialect)
            if state is None or state in slurm.TERMINAL_STATES:
                if state:
                    result["state"] = state
                break
            result["state"] = state
        if time.monotonic() >= deadline:
            result["elapsed"] = round(time.monotonic() - start, 2)
            action = "left it queued"
            if p["cancel_on_timeout"] and not module.check_mode:
                crc, _dummy, cerr = module.run_command(["scancel", *_controller_args(p), job_id])
                result["cancelled"] = crc == 0
                result["changed"] = crc == 0
                action = "cancelled it" if crc == 0 else f"could not cancel it: {cerr.strip()}"
            module.fail_json(
                msg=f"Slurm job {job_id} still {result['state']} after {p['timeout']} s; {action}",
                **result,
            )
        time.sleep(max(p["poll_interval"], 0.1))

    fields = {}
    if dialect == "slurm":
        rc, out, _dummy = module.run_command(["scontrol", "show", "job", "-o", job_id])
        if rc == 0:
            fields = slurm.parse_scontrol_job(out)
    if p["exit_file"]:
        code = _read_exit_file(p["exit_file"], max(p["exit_file_timeout"], 0))
        if code is not None:
            result["exit_code"], result["exit_source"] = code, "exit_file"
    if fields:
        state, code = slurm.exit_code_from_scontrol(fields)
        result["state"] = state
        if result["exit_code"] is None and code is not None:
            result["exit_code"], result["exit_source"] = code, "scontrol"
    if result["exit_code"] is None:
        rc, out, _dummy = module.run_command(
            ["sacct", *_controller_args(p), "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,ExitCode"]
        )
        if rc == 0:
            state, code = slurm.parse_sacct(out, job_id)
            if state:
                result["state"] = state
            if code is not None:
                result["exit_code"], result["exit_source"] = code, "sacct"
    result["elapsed"] = round(time.monotonic() - start, 2)

    if p["fail_on_error"] and result["exit_code"] != 0:
        tail = _tail(p["err_file"]) if p["err_file"] else []
        where = f"; stderr {p['err_file']}" if p["err_file"] else ""
        last = ("; last stderr lines: " + " | ".join(tail)) if tail else ""
        if result["exit_code"] is None:
            exit_file = p["exit_file"] or "(none given)"
            msg = (
                f"Slurm job {job_id} finished (state {result['state']}) but its exit code is unknown: no exit file "
                f"{exit_file}{' after ' + str(p['exit_file_timeout']) + ' s' if p['exit_file'] else ''}, "
                f"and neither scontrol nor sacct reported it{where}{last}"
            )
        else:
            msg = f"Slurm job {job_id} exited with code {result['exit_code']} (state {result['state']}){where}{last}"
        module.fail_json(msg=msg, **result)
    if p["exit_file"] and not os.path.exists(p["exit_file"]):
        result["warnings"] = [f"no exit file {p['exit_file']}: exit code from {result['exit_source']}"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
