#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: l2_dirs
short_description: Create the L2 / slab directories as the deploy user, naming the ones that need root and why
version_added: 0.1.0
description:
  - Creates every directory of O(paths), with its missing parents, owned by O(owner) and O(group) with O(mode)
    (intermediate directories it creates included), and fixes the owner, group and mode of an existing one.
  - >-
    With O(run_as=user) (the task runs as the deploy user, without C(become)) it creates what the user can and
    creates nothing for the rest, which it returns in RV(blocked): the path that cannot be created and why, as the
    user sees it, for example C(parent /mnt/nvme0 owned by root, mode 0755) (its first missing component lies in a
    directory the user cannot write or search), or C(aicdeploy may not hand it to nobody:nogroup ...) (a chown to
    another user needs root). The module does not fail for them; a second task with O(run_as=sudo) creates exactly
    RV(blocked_dirs). When only that hand-over is denied, the user still creates the missing parents, owned by
    itself (with O(mode), and O(group) if it is a member), so that it can reach the directory on later runs.
  - With O(run_as=sudo) the task runs as root through privilege escalation (C(become), in the
    C(aic.stack.l2_dirs) role C(sudo)) and creates or fixes every directory of O(paths); nothing is blocked.
  - >-
    With O(clean_stale_slots), removes stale NIXL POSIX slot files (C(*.bin): regular, not hidden, top level only)
    from O(stale_slot_dirs) that existed before. Slots left over from an earlier LMCache run make NIXL fail with
    C(NIXL_ERR_NOT_FOUND); only safe while LMCache is stopped. With O(run_as=user), a directory whose slots the
    user may not remove is blocked too.
  - Reports C(changed) only when a directory was created, an owner, group or mode fixed, or a slot file removed.
author:
  - aic.stack developers (!UNKNOWN)
extends_documentation_fragment:
  - aic.stack.attributes
attributes:
  check_mode:
    details:
      - In check mode nothing is created, changed or removed; the return values say what a real run would do,
        RV(blocked) included.
  diff_mode:
    support: full
    details:
      - Before and after state (C(absent), or C(directory) with owner, group and mode, and the stale slot files) of
        every directory of O(paths) and every parent the module creates.
options:
  paths:
    description:
      - The directories, as normalized absolute paths (starting with C(/), no trailing C(/), no empty, C(.) or C(..)
        component). Duplicates are ignored.
    type: list
    elements: str
    required: true
  owner:
    description:
      - Owner (user name or uid) of the directories. An empty string means the user the module runs as.
      - With O(run_as=sudo) that is root, so give the deploy user's choice (RV(owner) of the O(run_as=user) task).
    type: str
    default: ""
  group:
    description:
      - Group (name or gid) of the directories. An empty string means the primary group of the user the module
        runs as.
    type: str
    default: ""
  mode:
    description: Mode of the directories, an octal string such as C("0750").
    type: raw
    default: "0750"
  run_as:
    description:
      - V(user), the task runs as the deploy user (no C(become)); what the user cannot do is returned in RV(blocked).
      - V(sudo), the task runs as root through C(become) (the module fails otherwise); nothing is blocked.
      - Directories created are reported as RV(result) C(created_by) equal to this value.
    type: str
    choices: [user, sudo]
    default: user
  clean_stale_slots:
    description: Remove the stale NIXL POSIX slot files (C(*.bin)) from O(stale_slot_dirs).
    type: bool
    default: false
  stale_slot_dirs:
    description:
      - Directories, among O(paths), cleaned by O(clean_stale_slots); defaults to the first of O(paths).
    type: list
    elements: str
notes:
  - Uses only the Python standard library. A directory behind one the user cannot search reads as missing, and the
    one it cannot search is named in RV(blocked).
  - The role C(aic.stack.l2_dirs) runs it without C(become), then with C(become) for RV(blocked_dirs) when
    passwordless sudo works, and fails naming RV(blocked) and the C(sudo install -d) fix otherwise.
"""

EXAMPLES = r"""
- name: Create the L2 and slab directories as the deploy user
  aic.stack.l2_dirs:
    paths: [/mnt/nvme0/aic/nvme/lmcache, /mnt/nvme0/aic/slab]
    mode: "0750"
    clean_stale_slots: true
  register: l2

- name: Create the ones the deploy user cannot, as root
  aic.stack.l2_dirs:
    paths: "{{ l2.blocked_dirs }}"
    owner: "{{ l2.owner }}"
    group: "{{ l2.group }}"
    mode: "0750"
    run_as: sudo
  become: true
  become_user: root
  become_method: ansible.builtin.sudo
  when: l2.blocked | length > 0
"""

RETURN = r"""
user:
  description: The user the module ran as.
  returned: always
  type: str
  sample: aicdeploy
owner:
  description: The owner applied (O(owner), or the user the module ran as), a name where the node knows one.
  returned: always
  type: str
  sample: aicdeploy
group:
  description: The group applied (O(group), or that user's primary group), a name where the node knows one.
  returned: always
  type: str
  sample: aicdeploy
mode:
  description: The mode applied, four octal digits.
  returned: always
  type: str
  sample: "0750"
created:
  description: Directories created (would be, in check mode), parents first, intermediate ones included.
  returned: always
  type: list
  elements: str
  sample: [/home/aicdeploy/slab, /home/aicdeploy/slab/nvme, /home/aicdeploy/slab/nvme/lmcache]
fixed:
  description: Existing directories of O(paths) whose owner, group or mode was (would be) changed.
  returned: always
  type: list
  elements: str
  sample: []
blocked:
  description:
    - O(run_as=user), what the user cannot do, one entry per path and reason; C(path) is what cannot be created
      (the first missing component, or the directory itself), C(why) what the user saw, C(dirs) the directories of
      O(paths) it blocks. Always empty with O(run_as=sudo).
  returned: always
  type: list
  elements: dict
  sample:
    - path: /mnt/nvme0/aic
      why: parent /mnt/nvme0 owned by root, mode 0755
      dirs: [/mnt/nvme0/aic/nvme/lmcache, /mnt/nvme0/aic/slab]
blocked_dirs:
  description: The directories of O(paths) left to O(run_as=sudo), in the order of O(paths).
  returned: always
  type: list
  elements: str
  sample: [/mnt/nvme0/aic/nvme/lmcache, /mnt/nvme0/aic/slab]
result:
  description:
    - Per directory of O(paths), C(created_by), one of V(user) or V(sudo) (created by this task, the value of
      O(run_as)), V(existing), or V(blocked); plus C(stale_slots_removed) (a count) for the directories of
      O(stale_slot_dirs) that were cleaned or created when O(clean_stale_slots) is set.
  returned: always
  type: dict
  sample:
    /mnt/nvme0/aic/nvme/lmcache: {created_by: existing, stale_slots_removed: 1}
    /mnt/nvme0/aic/slab: {created_by: existing}
stale_slots:
  description: The stale slot files removed (would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [/mnt/nvme0/aic/nvme/lmcache/x.bin]
stale_slots_removed:
  description: How many stale slot files were removed (would be, in check mode).
  returned: always
  type: int
  sample: 1
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aic.stack.plugins.module_utils import l2_dirs


def main():
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "str", "required": True},
            "owner": {"type": "str", "default": ""},
            "group": {"type": "str", "default": ""},
            "mode": {"type": "raw", "default": "0750"},
            "run_as": {"type": "str", "choices": list(l2_dirs.RUN_AS), "default": "user"},
            "clean_stale_slots": {"type": "bool", "default": False},
            "stale_slot_dirs": {"type": "list", "elements": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        outcome = l2_dirs.ensure(
            p["paths"],
            owner=p["owner"],
            group=p["group"],
            mode=p["mode"],
            run_as=p["run_as"],
            clean_stale_slots=p["clean_stale_slots"],
            stale_slot_dirs=p["stale_slot_dirs"],
            check_mode=module.check_mode,
        )
    except l2_dirs.InputError as exc:
        module.fail_json(msg=str(exc), changed=False, option=exc.option)
    except l2_dirs.StateError as exc:
        module.fail_json(msg=str(exc), changed=False)
    diff = outcome.pop("diff")
    outcome["msg"] = l2_dirs.summary(outcome, check_mode=module.check_mode)
    if module._diff:
        outcome["diff"] = diff
    module.exit_json(**outcome)


if __name__ == "__main__":
    main()
