#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_lock
short_description: Take or release a run lock that names its holder (a directory, taken under flock)
version_added: 0.1.0
description:
  - The lock is the directory O(path) on the managed node, so it outlives the module's process and lasts across
    tasks until it is released. Its C(owner) file, written atomically (a temporary file renamed into place), holds
    JSON C({owner, token, since, pid, host}).
  - Taking, taking over and releasing run under C(flock) on the sibling guard file C(<path>.guard), so two runs that
    wait for the same lock never both take it, and one never removes a lock the other has just taken.
  - >-
    O(state=present) takes the lock. While another run holds it, the module tries again every O(poll) seconds for
    up to O(wait) seconds, then fails with C(another rollout holds <path>: <owner> since <since> run <token> - waited
    <wait> s). A lock already carrying O(token) is this run's and is kept as it is.
  - A lock older than O(stale_after) seconds (by the C(since) of its owner file; by the directory's modification
    time when the owner file is missing, unreadable, or the plain-text line C(<owner> since <since> run <token>) of
    the shell version of the rollout_lock role) is considered abandoned; it is taken over with a warning, and
    RV(taken_over) names its holder.
  - O(state=absent) releases the lock only when it carries O(token); another run's lock is left in place, with a
    warning naming its holder, and RV(released) is false.
  - Taking and releasing the lock is bookkeeping, not a change of the managed node, so the module never reports
    C(changed).
author:
  - aic.stack developers (!UNKNOWN)
extends_documentation_fragment:
  - aic.stack.attributes
attributes:
  check_mode:
    details:
      - In check mode nothing is created, written or removed, the guard file included. The lock is only read (and
        waited for, as in a real run); RV(msg) says what a real run would do, and RV(held) is false.
options:
  path:
    description:
      - The lock directory. Its parent must exist and be writable (the guard file C(<path>.guard) is created next
        to it and never removed).
    type: path
    required: true
  state:
    description: V(present) takes the lock, V(absent) releases it.
    type: str
    choices: [present, absent]
    default: present
  owner:
    description:
      - Who takes the lock, as shown to an operator who waits for it (for example C(alice@controller)).
      - Defaults to C(<user>@<host>) of the module's process on the managed node.
      - Only used with O(state=present).
    type: str
  token:
    description:
      - Identifies this run. With O(state=present) a new random token is made when none is given (RV(token) returns
        it); keep it to release the lock.
      - Required with O(state=absent), which releases only a lock carrying this token.
    type: str
  wait:
    description: Seconds to wait for a lock held by another run before failing (V(0) tries once).
    type: int
    default: 0
  stale_after:
    description: Seconds after which a lock is considered abandoned (a killed run) and taken over.
    type: int
    default: 7200
  poll:
    description: Seconds between two tries while waiting.
    type: float
    default: 2
notes:
  - Uses only the Python standard library (C(fcntl.flock)); the lock is local to the managed node's file system
    (C(flock) on NFS depends on the client and server).
  - The role C(aic.stack.rollout_lock) takes this lock in the first batch of a rollout and releases it when the
    rollout ends.
"""

EXAMPLES = r"""
- name: Take the rollout lock on the first node (wait up to 5 minutes for another rollout)
  aic.stack.run_lock:
    path: /var/lib/aic/rollout.lock
    owner: "{{ lookup('ansible.builtin.env', 'USER') }}@controller"
    wait: 300
    stale_after: 7200
  register: lock
  run_once: true
  delegate_to: "{{ ansible_play_hosts_all | first }}"

- name: Release it (only if it is still this run's lock)
  aic.stack.run_lock:
    path: /var/lib/aic/rollout.lock
    state: absent
    token: "{{ lock.token }}"
  run_once: true
  delegate_to: "{{ ansible_play_hosts_all | first }}"
"""

RETURN = r"""
owner:
  description:
    - O(state=present), the holder of the lock afterwards (this run, or in check mode the run that would take it).
    - O(state=absent), the holder of the lock found (released or left in place); null when there was none.
  returned: always
  type: str
  sample: alice@controller
token:
  description: The token of that holder (with O(state=present), this run's token, generated when not given).
  returned: always
  type: str
  sample: 9f1c2d3e4b5a6978
since:
  description: When that holder took the lock (UTC, ISO 8601; the directory's modification time when unknown).
  returned: always
  type: str
  sample: "2026-12-02T15:00:00+00:00"
waited:
  description: Seconds spent waiting for the lock.
  returned: always
  type: float
  sample: 4.01
taken_over:
  description: The holder of the stale lock that was taken over (would be, in check mode); null when none was.
  returned: always
  type: dict
  sample:
    owner: bob@controller-2
    token: "42"
    since: "2026-11-29T10:00:00+00:00"
    pid: 4711
    host: node-1
    age: 268000
released:
  description: O(state=absent), whether the lock was removed (would be, in check mode); always false for O(state=present).
  returned: always
  type: bool
  sample: true
held:
  description:
    - Whether this run holds the lock when the module returns; true after a take, false after a failure to take it,
      after a release, and in check mode.
  returned: always
  type: bool
  sample: true
action:
  description:
    - What was done, one of V(taken), V(taken_over), V(kept) (the lock already carried O(token)), V(released),
      V(absent) (there was no lock), V(not_ours) (another run's lock, left in place), V(held) (still held by another
      run after O(wait)); in check mode V(would_take), V(would_take_over), V(would_keep), with V(released) and
      V(absent) and V(not_ours) as for a real run.
  returned: always
  type: str
  sample: taken
msg:
  description:
    - What was done (would be done, in check mode), in words; with a taken-over stale lock, that lock's age and holder.
  returned: always
  type: str
  sample: took /var/lib/aic/rollout.lock for alice@controller run 9f1c2d3e4b5a6978
"""

import getpass
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aic.stack.plugins.module_utils import run_lock


def _default_owner():
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "owner": {"type": "str"},
            "token": {"type": "str", "no_log": False},
            "wait": {"type": "int", "default": 0},
            "stale_after": {"type": "int", "default": 7200},
            "poll": {"type": "float", "default": 2},
        },
        required_if=[("state", "absent", ["token"])],
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    check = module.check_mode
    try:
        if p["state"] == "absent":
            if not p["token"]:
                module.fail_json(msg="state=absent needs the token of the run that took the lock", changed=False)
            result = run_lock.release(path, p["token"], check_mode=check)
            if result["action"] == "absent":
                result["msg"] = f"no lock at {path}"
            elif result["action"] == "not_ours":
                result["msg"] = "left {}: it is held by {}, not by run {}".format(
                    path, run_lock.holder_text(result), p["token"]
                )
                module.warn(result["msg"])
            else:
                result["msg"] = "{} {}".format("would release" if check else "released", path)
        else:
            result = run_lock.take(
                path,
                p["owner"] or _default_owner(),
                token=p["token"],
                wait=p["wait"],
                stale_after=p["stale_after"],
                poll=p["poll"],
                check_mode=check,
            )
            verb = {
                "taken": "took",
                "taken_over": "took over",
                "kept": "already holds",
                "would_take": "would take",
                "would_take_over": "would take over",
                "would_keep": "already holds",
            }[result["action"]]
            result["msg"] = "{} {} for {} run {}".format(verb, path, result["owner"], result["token"])
            if result["taken_over"]:
                stale = result["taken_over"]
                note = "{} a stale lock ({} s old) of {}".format(
                    "would take over" if check else "took over", stale["age"], run_lock.holder_text(stale)
                )
                result["msg"] += "; " + note
                module.warn(f"{path}: {note}")
    except run_lock.LockHeld as exc:
        holder = exc.holder or {}
        module.fail_json(
            msg=str(exc),
            changed=False,
            owner=holder.get("owner"),
            token=holder.get("token"),
            since=holder.get("since"),
            waited=round(exc.waited, 2),
            taken_over=None,
            released=False,
            held=False,
            action="held",
        )
    except OSError as exc:
        module.fail_json(
            msg="cannot {} the lock {}: {}".format("release" if p["state"] == "absent" else "take", path, exc),
            changed=False,
            held=False,
        )
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
