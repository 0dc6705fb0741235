# Copyright: aic.stack contributors
# Apache-2.0
"""Action plugin for aic.stack.plan: validates inputs on the controller and publishes the aic_plan fact."""

from __future__ import annotations

import functools

import yaml
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.aic.stack.plugins.module_utils.plan import DEFAULTS, PlanError, build_plan
from ansible_collections.aic.stack.plugins.module_utils.plan_inputs import check_inputs, input_options, spec_path

# Variables that do not feed the plan and are not reported as unknown: the plan itself, the facts of the release
# and of the rollout, deploy.yml's fast-path decision, and the rehearsal cluster's own bookkeeping (scripts/rehearsal.sh, scripts/testbed.sh).
NON_PLAN_PREFIXES = (
    "aic_plan",
    "aic_release",
    "aic_rollout_outcome",
    "aic_deploy_unchanged",
    "aic_rehearsal_",
    "aic_bed_",
)


@functools.lru_cache(maxsize=1)
def _input_options(path):
    """The ``inputs`` entry point of the preflight role's argument spec (read once per controller process)."""
    with open(path, encoding="utf-8") as fh:
        return input_options(yaml.safe_load(fh))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("overrides",))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        overrides = self._task.args.get("overrides") or {}
        if not isinstance(overrides, dict):
            raise AnsibleActionFail("overrides: expected a dictionary of aic_* variables")
        inputs = {}
        for name in task_vars:
            if name.startswith("aic_") and not name.startswith(NON_PLAN_PREFIXES):
                inputs[name] = task_vars[name]
        # Templated values: resolve the ones we know through the templar.
        for name in list(inputs):
            if name in DEFAULTS:
                inputs[name] = self._templar.template(inputs[name])
        inputs.update(overrides)
        try:
            # Types and choices by Ansible's own validator against the argument spec (after the defaults), then the
            # plan's conversion, ranges and cross-field rules.
            check_inputs(inputs, _input_options(spec_path()))
            plan, warnings = build_plan(inputs)
        except PlanError as exc:
            raise AnsibleActionFail(f"Invalid input: {exc}") from exc
        for warning in warnings:
            self._display.warning(warning)
        result.update(changed=False, ansible_facts={"aic_plan": plan}, plan=plan)
        return result
