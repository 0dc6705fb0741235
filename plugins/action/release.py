# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for aic.stack.release: resolve the release on the controller, read the node's last healthy one."""

from __future__ import annotations

import base64
import json

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.aic.stack.plugins.module_utils import release as rel


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("name", "pinned", "build", "artifact_dir", "deployed_path", "last_healthy"))

    def _read_deployed(self, path, task_vars):
        """The node's deployed.json (None when it has none); read on the node itself."""
        res = self._execute_module(
            module_name="ansible.builtin.slurp", module_args={"src": path}, task_vars=task_vars, wrap_async=False
        )
        if res.get("failed") or "content" not in res:
            return None
        try:
            return json.loads(base64.b64decode(res["content"]))
        except ValueError as exc:
            raise AnsibleActionFail(f"{path} on this node is not a JSON release record ({exc}); remove it") from exc

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        name = args.get("name") or ""
        if not name:
            raise AnsibleActionFail("name: the stack image name is required (aic_plan.images.stack.name)")
        build = args.get("build") or None
        if build is not None and not isinstance(build, (dict, str)):
            raise AnsibleActionFail("build: expected this run's build manifest (a dictionary) or an image name")
        last = args.get("last_healthy") or None
        if last is None and args.get("deployed_path"):
            last = self._read_deployed(args["deployed_path"], task_vars)
        try:
            release = rel.resolve(
                name,
                pinned=args.get("pinned") or "",
                build=build,
                artifact_dir=args.get("artifact_dir") or "",
                last_healthy=last,
            )
            last_rec = rel.last_healthy_record(last)
            rollback = rel.rollback_target(release, last)
        except rel.ReleaseError as exc:
            raise AnsibleActionFail(f"Release: {exc}") from exc
        result.update(
            changed=False,
            release=release,
            last_healthy=last_rec,
            rollback=rollback,
            distributable=rel.distributable(release),
            ansible_facts={"aic_release": release, "aic_release_rollback": rollback},
        )
        return result
