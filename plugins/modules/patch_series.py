#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: patch_series
short_description: Check or apply a patch series to a pinned upstream source tree
version_added: 0.1.0
description:
  - Checks a series of patches (every C(*.patch) file of O(patches), in lexical order of the file names,
    for example C(patches/vllm/v0.26.0/01-....patch)) against the unpacked source in O(source) with
    C(git apply), and with O(state=applied) applies them to it in place.
  - The check is cumulative, patch N is checked on top of patches 1 to N-1, in a temporary copy of
    only the files the patches touch, so checking a whole vLLM tree takes well under a second.
  - Each patch gets a status. C(applies) - it applies on top of the previous ones. C(merged) - it does
    not apply but applies in reverse, that is the change is already in the source (merged upstream).
    C(applied) - like C(merged), but this module applied this very patch (same sha256) with
    O(state=applied) earlier. C(fails) - it does not apply at all.
  - The task fails, in seconds, on the first patch that C(fails), naming it, the source, the series
    (C(<project> <ref>) from the last two components of O(patches)) and git's message.
  - Merged patches are reported as warnings, or fail the task with O(fail_on_merged=true).
  - Patches are C(git diff) or C(git format-patch) output with C(a/) and C(b/) prefixes and paths
    relative to the root of the source (for example C(a/vllm/platforms/__init__.py)), so the same
    patch applies to an upstream git checkout at the pinned tag and to the unpacked wheel. Text before
    the first C(diff --git) line (the C(From)/C(Subject) header and the explanation) is ignored.
author:
  - aic.stack developers (!UNKNOWN)
requirements:
  - git (the C(git) executable, used as C(git apply); the source does not need to be a git repository)
extends_documentation_fragment:
  - aic.stack.attributes
attributes:
  check_mode:
    details:
      - With O(state=applied), reports which patches would be applied and changes nothing.
options:
  source:
    description:
      - Root of the unpacked pinned source, the directory the C(a/) and C(b/) paths of the patches are
        relative to (for a wheel, the directory it was unzipped into).
    type: path
    required: true
  patches:
    description:
      - Directory holding the series, C(patches/<project>/<ref>/).
      - Every C(*.patch) file in it is part of the series; other files are ignored.
    type: path
    required: true
  state:
    description:
      - V(checked) only checks the series; O(source) is never written.
      - V(applied) applies the patches whose status is C(applies) to O(source) in place, after the whole
        series was checked; nothing is written when a patch fails. It records the applied patches in
        C(.aic-patch-series.json) at the root of O(source). When every patch is already applied (or
        merged) it changes nothing, so running it again reports RV(ignore:changed=false).
    type: str
    choices: [checked, applied]
    default: checked
  fail_on_merged:
    description:
      - Fail when a patch is already merged in the source (status C(merged)), so that it gets removed from
        the series when a pin moves forward. By default merged patches only produce a warning.
      - Patches this module applied itself (status C(applied)) never fail the task.
    type: bool
    default: false
notes:
  - The module runs where the source is; for a source on the controller, delegate the task to C(localhost).
seealso:
  - module: ansible.posix.patch
"""

EXAMPLES = r"""
- name: Check that the vLLM patches still apply to the pinned wheel
  aic.stack.patch_series:
    source: "{{ aic_plan.paths.work_dir }}/sources/vllm-0.26.0/unpacked-vllm"
    patches: "{{ role_path }}/../../patches/vllm/v0.26.0"
  delegate_to: localhost
  run_once: true

- name: Apply the LMCache series in place, failing on patches already merged upstream
  aic.stack.patch_series:
    source: /build/lmcache
    patches: /build/patches/lmcache/v0.5.2
    state: applied
    fail_on_merged: true
  register: lmcache_patches

- name: Show what was applied
  ansible.builtin.debug:
    msg: "applied {{ lmcache_patches.applied }}, merged upstream {{ lmcache_patches.merged }}"
"""

RETURN = r"""
series:
  description: The series, C(<project> <ref>) from the last two components of O(patches).
  returned: always
  type: str
  sample: vllm v0.26.0
patches:
  description: One entry per patch, in the order they are applied.
  returned: when the series could be checked
  type: list
  elements: dict
  contains:
    name:
      description: File name of the patch.
      type: str
      sample: 01-rocm-trust-torch-hip-when-amdsmi-sees-no-devices.patch
    status:
      description:
        - C(applies), C(merged), C(applied) or C(fails) (see the description).
        - The statuses describe O(source) as it was before this task ran.
      type: str
      sample: applies
    sha256:
      description: SHA-256 of the patch file.
      type: str
      sample: 54d8de742271962df60af83d694cad3a60cdd5e0b457c10dbe9393b3d4d11e41
    files:
      description: Paths, relative to O(source), that the patch touches.
      type: list
      elements: str
      sample: [vllm/platforms/__init__.py]
    message:
      description: git's error for a patch that C(fails), otherwise empty.
      type: str
      sample: "error: patch failed: vllm/platforms/rocm.py:193; error: vllm/platforms/rocm.py: patch does not apply"
applied:
  description:
    - Names of the patches this task applied to O(source) (with O(state=applied); in check mode, the
      ones it would apply). Always empty with O(state=checked).
  returned: always
  type: list
  elements: str
  sample: [01-rocm-trust-torch-hip-when-amdsmi-sees-no-devices.patch]
merged:
  description: Names of the patches already merged in O(source) (status C(merged)).
  returned: always
  type: list
  elements: str
  sample: []
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aic.stack.plugins.module_utils.patching import (
    APPLIES,
    MERGED,
    PatchSeriesError,
    apply_series,
    check_series,
    first_failure,
    series_label,
)


def _public(results):
    keys = ("name", "status", "sha256", "files", "message")
    return [{k: r[k] for k in keys} for r in results]


def main():
    module = AnsibleModule(
        argument_spec={
            "source": {"type": "path", "required": True},
            "patches": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["checked", "applied"], "default": "checked"},
            "fail_on_merged": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    source = os.path.abspath(module.params["source"])
    patch_dir = os.path.abspath(module.params["patches"])
    label = series_label(patch_dir)
    result = {"changed": False, "series": label, "applied": [], "merged": []}

    git = module.get_bin_path("git", required=True)
    try:
        results = check_series(source, patch_dir, git=git)
    except (PatchSeriesError, OSError) as exc:
        module.fail_json(msg=f"cannot check the {label} patch series against {source}: {exc}", **result)

    result["patches"] = _public(results)
    result["merged"] = [r["name"] for r in results if r["status"] == MERGED]

    failed = first_failure(results)
    if failed is not None:
        module.fail_json(
            msg=f"patch {failed['name']} does not apply to {source} ({label}): {failed['message']}",
            **result,
        )
    for name in result["merged"]:
        what = f"patch {name} is already merged in {source} ({label})"
        if module.params["fail_on_merged"]:
            module.fail_json(msg=f"{what}: remove it from the series", **result)
        module.warn(f"{what}; it was skipped and can be removed from the series")

    applied = []
    if module.params["state"] == "applied":
        applied = [r["name"] for r in results if r["status"] == APPLIES]
        if applied and not module.check_mode:
            try:
                results, applied = apply_series(source, patch_dir, git=git)
            except (PatchSeriesError, OSError) as exc:
                module.fail_json(msg=f"cannot apply the {label} patch series to {source}: {exc}", **result)
            failed = first_failure(results)
            if failed is not None:  # the source changed between the check and the apply
                module.fail_json(
                    msg=f"patch {failed['name']} does not apply to {source} ({label}): {failed['message']}",
                    **result,
                )
    result["applied"] = applied
    result["changed"] = bool(applied)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
