#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deploy_state
short_description: Decide whether a deploy has anything to do on a node (the no-op fast path), and record what it left
version_added: 0.2.0
description:
  - With O(state=checked), compares the node's record of its last successful rollout (O(path)) with this deploy's
    fingerprint and with what the node runs now, and returns RV(unchanged) (nothing to do) or the RV(reasons) why not.
    It only reads; it never fails because of the node - an engine that does not answer, a missing or unreadable record
    are reasons.
  - With O(state=recorded), writes the fingerprint and a snapshot of what the node runs now to O(path) (atomically).
  - The I(fingerprint) is what the deploy was asked to do. The action plugin computes it on the controller, unless
    O(fingerprint) is given - the plan (C(aic_plan)), every variable the collection reads (C(aic_*) and each role's
    C(<role>_*) - inventory, group and extra variables), the digest of the collection's roles, plugins, playbooks and
    patches, and the stack image's release pointer (C(<image>.current.json)) in O(artifact_dir) - and returns it as the fact
    C(_aic_deploy_fingerprint).
  - The I(snapshot) is what the node runs - every container labelled C(ai.aic.stack=<stack>) (its id, the image it
    runs and the image its reference names now, its state, start time and restart count), the stack's network and
    volumes, every file under O(watch) (content and mode; for a C(*.pid) file, whether its process is alive; C(*.log)
    files are left out) and the owner, group and mode of each directory of O(dirs).
author:
  - aic.stack developers (!UNKNOWN)
extends_documentation_fragment:
  - aic.stack.attributes
  - aic.stack.attributes.ACTION
  - aic.stack.docker
  - aic.stack.docker.TIMEOUT
attributes:
  check_mode:
    details:
      - O(state=checked) only reads. With O(state=recorded) nothing is written in check mode.
options:
  state:
    description:
      - V(checked) compares; V(recorded) writes the record.
    type: str
    choices: [checked, recorded]
    default: checked
  path:
    description: The record on the node (JSON).
    type: path
    required: true
  stack:
    description: The stack name (C(aic_plan.stack_name)) - the containers labelled C(ai.aic.stack=<stack>), the network
      of that name and the volumes named C(<stack>-*) are the stack's.
    type: str
    required: true
  watch:
    description: Files and directories whose files the roles render on the node (compared by content and mode).
    type: list
    elements: path
    default: []
  dirs:
    description: Directories whose existence, owner, group and mode are compared (not their content), e.g. the L2
      tier's.
    type: list
    elements: path
    default: []
  fingerprint:
    description:
      - The deploy's fingerprint (C(_aic_deploy_fingerprint) of an earlier task of the run). Empty - the action
        plugin computes it.
    type: str
    default: ""
  parts:
    description:
      - The fingerprint's parts (C(_aic_deploy_fingerprint_parts)), each by its digest - C(plan.<key>), C(var.<name>),
        C(collection), C(pointer.<file>). Recorded with the fingerprint; when both differ, the reason names the parts
        that changed. The action plugin sets it when it computes the fingerprint.
    type: dict
    default: {}
  artifact_dir:
    description:
      - The controller's artifact directory whose stack image pointer is part of the fingerprint (when the action
        plugin computes it).
      - With O(state=recorded) and O(parts), the pointer is read again when recording (this run's build may have
        written it after the fingerprint was taken), and the fingerprint is recomputed with it.
    type: path
    default: ""
"""

EXAMPLES = r"""
- name: Decide whether anything would change on this node
  aic.stack.deploy_state:
    path: "{{ aic_plan.paths.work_dir }}/deploy-state.json"
    stack: "{{ aic_plan.stack_name }}"
    watch: ["{{ aic_plan.paths.prometheus_dir }}"]
    dirs: "{{ aic_plan.paths.l2_dirs }}"
    artifact_dir: "{{ aic_plan.paths.artifact_dir }}"
  register: _state

- name: Record what this node runs after its rollout passed health
  aic.stack.deploy_state:
    state: recorded
    path: "{{ aic_plan.paths.work_dir }}/deploy-state.json"
    stack: "{{ aic_plan.stack_name }}"
    watch: ["{{ aic_plan.paths.prometheus_dir }}"]
    fingerprint: "{{ _aic_deploy_fingerprint }}"
    parts: "{{ _aic_deploy_fingerprint_parts }}"
  changed_when: false
"""

RETURN = r"""
unchanged:
  description: V(true) when the record's fingerprint is this deploy's and the node runs exactly what was recorded
    (O(state=checked)); V(true) after O(state=recorded).
  returned: always
  type: bool
reasons:
  description: Why the node would not be left as it is (empty when RV(unchanged)).
  returned: always
  type: list
  elements: str
  sample: ["container aic-vllm is running (started 2026-12-04T07:16:21Z) since the last deploy"]
fingerprint:
  description: The deploy's fingerprint.
  returned: always
  type: str
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aic.stack.plugins.module_utils import deploy_state as ds
from ansible_collections.aic.stack.plugins.module_utils.atomic import replace_file
from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI, DockerAPIError


def read_record(path):
    """The record (None when there is none); a reason string when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh), None
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"the record {path} cannot be read ({exc})"


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["checked", "recorded"], "default": "checked"},
            "path": {"type": "path", "required": True},
            "stack": {"type": "str", "required": True},
            "watch": {"type": "list", "elements": "path", "default": []},
            "dirs": {"type": "list", "elements": "path", "default": []},
            "fingerprint": {"type": "str", "default": ""},
            "parts": {"type": "dict", "default": {}},
            "artifact_dir": {"type": "path", "default": ""},
            "docker_host": {"type": "str"},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    p = module.params
    fp = p["fingerprint"]
    if not fp:
        module.fail_json(
            msg="fingerprint: empty (the action plugin computes it; is aic.stack.deploy_state run as an action?)"
        )
    try:
        api = DockerAPI(p["docker_host"], timeout=p["timeout"])
        now = ds.snapshot(api, p["stack"], watch=p["watch"], dirs=p["dirs"])
    except (ValueError, DockerAPIError) as exc:
        if p["state"] == "recorded":
            module.fail_json(msg=f"deploy_state: cannot take the node's snapshot: {ds.engine_error_reason(exc)}")
        module.exit_json(changed=False, unchanged=False, reasons=[ds.engine_error_reason(exc)], fingerprint=fp)
    if p["state"] == "recorded":
        if not module.check_mode:
            replace_file(
                p["path"],
                text=json.dumps(ds.record(fp, now, p["parts"]), indent=1, sort_keys=True) + "\n",
                make_dirs=True,
            )
        module.exit_json(changed=False, unchanged=True, reasons=[], fingerprint=fp)
    record, problem = read_record(p["path"])
    reasons = [problem] if problem else ds.differences(record, fp, now, p["parts"])
    module.exit_json(changed=False, unchanged=not reasons, reasons=reasons, fingerprint=fp)


if __name__ == "__main__":
    main()
