# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for aic.stack.deploy_state: the deploy's fingerprint on the controller, the snapshot on the node."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.aic.stack.plugins.module_utils import deploy_state as ds

# The collection's root (plugins/action/<this file> -> the root): its roles name the variable prefixes it reads.
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
# Facts a run sets itself (the plan is taken as it is; the others are results, not requests).
RUN_FACT_PREFIXES = ("aic_plan", "aic_release", "aic_rollout_outcome", "aic_deploy_", "_")


def variable_prefixes(root=COLLECTION_ROOT):
    """``aic_`` and ``<role>_`` of every role of the collection."""
    try:
        roles = sorted(d for d in os.listdir(os.path.join(root, "roles")) if not d.startswith((".", "_")))
    except OSError:
        roles = []
    return ("aic_",) + tuple(f"{r}_" for r in roles)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        ("state", "path", "stack", "watch", "dirs", "fingerprint", "parts", "artifact_dir", "docker_host", "timeout")
    )

    def _fingerprint(self, task_vars):
        plan = task_vars.get("aic_plan")
        if not isinstance(plan, dict):
            raise AnsibleActionFail("deploy_state: aic_plan is not set (run the preflight role first)")
        variables = ds.collection_variables(task_vars, variable_prefixes(), RUN_FACT_PREFIXES)
        # Templated values as the run resolves them where it can; a value that cannot be resolved yet (it names a fact
        # of a later task) counts as written.
        resolved = {}
        for name, value in variables.items():
            try:
                resolved[name] = self._templar.template(value)
            except Exception:  # noqa: BLE001 - any templating error: keep the value as written
                resolved[name] = value
        artifact_dir = self._task.args.get("artifact_dir") or ""
        return ds.fingerprint_parts(
            plan,
            resolved,
            ds.collection_digest(COLLECTION_ROOT),
            ds.release_pointers(artifact_dir, plan["images"]["stack"]["name"]) if artifact_dir else {},
        )

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        if not args.get("fingerprint"):
            args["parts"] = self._fingerprint(task_vars)
            args["fingerprint"] = ds.fingerprint(args["parts"])
        elif args.get("state") == "recorded" and args.get("parts") and args.get("artifact_dir"):
            # The release pointer as it is now: this run's build may have written it after the fingerprint was taken
            # (a clean checkout's first deploy, a new image), and the next deploy reads it as it is now.
            plan = task_vars.get("aic_plan") or {}
            parts = {k: v for k, v in args["parts"].items() if not k.startswith("pointer.")}
            parts.update(
                {
                    f"pointer.{k}": v
                    for k, v in ds.release_pointers(args["artifact_dir"], plan["images"]["stack"]["name"]).items()
                }
            )
            args["parts"], args["fingerprint"] = parts, ds.fingerprint(parts)
        args.pop("artifact_dir", None)
        result.update(self._execute_module(module_name="aic.stack.deploy_state", module_args=args, task_vars=task_vars))
        if not result.get("failed"):
            result["ansible_facts"] = {
                "_aic_deploy_fingerprint": args["fingerprint"],
                "_aic_deploy_fingerprint_parts": args.get("parts") or {},
            }
        return result
