# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The no-op fast path of deploy.yml: what a deploy was asked to do, what a node runs, and the difference.

A successful rollout records, per node, the *fingerprint* of what it was asked (the plan, the collection's own
variables, the collection's files, the stack image's release pointer in the artifact directory) and a *snapshot* of
what the node runs afterwards (every container of the stack: id, image, state, start time, restarts; the stack's network and
volumes; the files the roles rendered on the node; the log streamers alive; the L2 directories' owner and mode).
A later deploy with the same fingerprint on nodes whose snapshot is unchanged has nothing to do: any difference
(an input, a container restarted or removed by hand, an edited config, a dead streamer) names itself as a reason and
the deploy takes its full path.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat

from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPIError
from ansible_collections.aic.stack.plugins.module_utils.process import pid_alive

SCHEMA = 1
# The collection's files whose content decides what a deploy does (its roles, plugins, playbooks and patches).
COLLECTION_PARTS = ("roles", "plugins", "playbooks", "patches", "deploy.yml", "galaxy.yml")
# Not the collection's content: interpreter caches.
SKIPPED_NAMES = ("__pycache__",)
SKIPPED_SUFFIXES = (".pyc", ".pyo")
# Files in a watched directory that change while the stack runs (streamer logs): never compared.
VOLATILE_SUFFIXES = (".log",)


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def collection_digest(root):
    """sha256 over the relative path and content of every file of COLLECTION_PARTS under ``root``."""
    digest = hashlib.sha256()
    for part in COLLECTION_PARTS:
        top = os.path.join(root, part)
        if os.path.isfile(top):
            files = [top]
        else:
            files = []
            for here, dirs, names in os.walk(top):
                dirs[:] = sorted(d for d in dirs if d not in SKIPPED_NAMES)
                files.extend(os.path.join(here, n) for n in sorted(names) if not n.endswith(SKIPPED_SUFFIXES))
        for name in files:
            with open(name, "rb") as fh:
                content = fh.read()
            digest.update(os.path.relpath(name, root).encode() + b"\0" + sha256_bytes(content).encode() + b"\n")
    return digest.hexdigest()


def _canonical(value):
    """JSON of ``value`` that does not depend on dictionary order (anything JSON cannot hold as its repr)."""
    return json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))


# What only decides the order and pace of a rollout, not what a node runs: left out of the fingerprint (a no-op deploy
# in other batches is still a no-op).
ROLLOUT_PLAN_KEYS = ("rollout",)
ROLLOUT_PREFIXES = ("aic_rollout_", "aic_deploy_")


def fingerprint_parts(plan, variables, collection, pointers):
    """The parts of one deploy's request, each by its sha256: ``plan.<key>`` per key of the plan, ``var.<name>`` per
    variable the collection reads, ``collection`` (the collection's digest) and ``pointer.<file>`` per release pointer
    (file name -> content digest); the rollout's order and pace are left out."""
    parts = {f"plan.{k}": sha256_bytes(_canonical(v).encode()) for k, v in plan.items() if k not in ROLLOUT_PLAN_KEYS}
    parts.update(
        {
            f"var.{k}": sha256_bytes(_canonical(v).encode())
            for k, v in variables.items()
            if not k.startswith(ROLLOUT_PREFIXES)
        }
    )
    parts["collection"] = collection
    parts.update({f"pointer.{k}": v for k, v in pointers.items()})
    return parts


def fingerprint(parts):
    """The fingerprint of one deploy's request: the digest of its parts (fingerprint_parts)."""
    return sha256_bytes(_canonical({"schema": SCHEMA, "parts": parts}).encode())


def changed_parts(before, now):
    """The names of the parts that differ (added, removed or changed), sorted."""
    return sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))


def collection_variables(task_vars, prefixes, excluded_prefixes=()):
    """The variables a deploy was given that the collection reads: names with one of ``prefixes`` (``aic_`` and every
    role's ``<role>_``), except ``excluded_prefixes`` (facts of the run itself)."""
    return {
        name: task_vars[name]
        for name in sorted(task_vars)
        if name.startswith(tuple(prefixes)) and not name.startswith(tuple(excluded_prefixes))
    }


def release_pointers(artifact_dir, name):
    """``{file: content digest}`` of the stack image's release pointer (``<name>.current.json``) in the artifact
    directory, empty without one. The pointers of other artifacts (the monitoring images a distribution saves) are
    written by the deploy itself and decide nothing a node runs that the plan does not name."""
    pointer = f"{name}.current.json"
    try:
        with open(os.path.join(artifact_dir, pointer), "rb") as fh:
            return {pointer: sha256_bytes(fh.read())}
    except OSError:
        return {}


def _file_entry(name):
    if name.endswith(".pid"):
        try:
            with open(name, encoding="utf-8") as fh:
                pid = int(fh.read().strip() or 0)
        except (OSError, ValueError):
            return {"pid": None}
        return {"pid": pid, "alive": bool(pid) and pid_alive(pid)}
    st = os.stat(name)
    with open(name, "rb") as fh:
        return {"sha256": sha256_bytes(fh.read()), "mode": stat.S_IMODE(st.st_mode)}


def files_snapshot(watch):
    """path -> entry of every file under the ``watch`` paths (files or directories): its sha256 and mode, or for a
    ``*.pid`` file its pid and whether it is alive; a watched path that does not exist is recorded as None."""
    files = {}
    for top in watch:
        if os.path.isfile(top):
            files[top] = _file_entry(top)
            continue
        if not os.path.isdir(top):
            files[top] = None
            continue
        for here, dirs, names in os.walk(top):
            dirs.sort()
            for n in sorted(names):
                if n.endswith(VOLATILE_SUFFIXES):
                    continue
                name = os.path.join(here, n)
                try:
                    files[name] = _file_entry(name)
                except OSError:
                    files[name] = None
    return files


def dirs_snapshot(dirs):
    """path -> owner, group and mode of each directory (None when it is missing)."""
    out = {}
    for d in dirs:
        try:
            st = os.stat(d)
        except OSError:
            out[d] = None
            continue
        out[d] = {"uid": st.st_uid, "gid": st.st_gid, "mode": stat.S_IMODE(st.st_mode), "dir": stat.S_ISDIR(st.st_mode)}
    return out


def containers_snapshot(api, stack):
    """name -> what runs, for every container labelled ``ai.aic.stack=<stack>``: its id, the image it runs and the
    image its reference names now (a moved tag differs), its state, start time and restart count."""
    listed = api.call(
        "GET", "/containers/json", params={"all": "1", "filters": json.dumps({"label": [f"ai.aic.stack={stack}"]})}
    )
    containers = {}
    for item in listed or []:
        info = api.inspect("containers", item["Id"])
        if info is None:  # removed meanwhile
            continue
        ref = info["Config"].get("Image") or ""
        image = api.inspect("images", ref) if ref else None
        state = info.get("State") or {}
        containers[info["Name"].lstrip("/")] = {
            "id": info["Id"],
            "image": info.get("Image"),
            "ref": ref,
            "ref_image": image["Id"] if image else None,
            "status": state.get("Status"),
            "started": state.get("StartedAt"),
            "restarts": info.get("RestartCount", 0),
        }
    return containers


def engine_snapshot(api, stack):
    """The stack's containers, network and volumes on the node's engine."""
    networks = api.call("GET", "/networks", params={"filters": json.dumps({"name": [stack]})}) or []
    volumes = (api.call("GET", "/volumes", params={"filters": json.dumps({"name": [stack + "-"]})}) or {}).get(
        "Volumes"
    ) or []
    return {
        "containers": containers_snapshot(api, stack),
        "networks": sorted(n["Id"] for n in networks if n.get("Name") == stack),
        "volumes": sorted(v["Name"] for v in volumes if v.get("Name", "").startswith(stack + "-")),
    }


def snapshot(api, stack, watch=(), dirs=()):
    """What the node runs now (raises DockerAPIError when the engine cannot answer)."""
    return {"engine": engine_snapshot(api, stack), "files": files_snapshot(watch), "dirs": dirs_snapshot(dirs)}


def _container_reasons(before, now):
    reasons = []
    for name in sorted(set(before) | set(now)):
        b, n = before.get(name), now.get(name)
        if b is None:
            reasons.append(f"container {name} was not there at the last deploy")
        elif n is None:
            reasons.append(f"container {name} is gone since the last deploy")
        elif b["id"] != n["id"]:
            reasons.append(f"container {name} was recreated since the last deploy")
        elif n["ref_image"] != n["image"] and b["ref_image"] == b["image"]:
            reasons.append(f"container {name}: its image {n['ref']} now names another image")
        elif (b["status"], b["started"], b["restarts"]) != (n["status"], n["started"], n["restarts"]):
            reasons.append(
                f"container {name} was stopped or restarted since the last deploy (now {n['status']}, "
                f"started {n['started']}, {n['restarts']} restarts by its policy)"
            )
        elif b != n:
            reasons.append(f"container {name} changed since the last deploy")
    return reasons


def _entry_reasons(kind, before, now):
    reasons = []
    for name in sorted(set(before) | set(now)):
        b, n = before.get(name), now.get(name)
        if b == n:
            continue
        if b is None and name not in before:
            reasons.append(f"{kind} {name} is new since the last deploy")
        elif n is None:
            reasons.append(f"{kind} {name} is missing")
        elif "pid" in n and not n.get("alive"):
            reasons.append(f"{kind} {name}: process {n['pid']} is not running")
        else:
            reasons.append(f"{kind} {name} changed since the last deploy")
    return reasons


MAX_NAMED_PARTS = 8


def differences(record, fp, now, parts=None):
    """Why the node would not be left as it is: reasons (empty when the record's fingerprint is ``fp`` and the
    node runs exactly what was recorded, every recorded streamer alive). With this deploy's ``parts`` and a record
    that has its own, the reason names the parts that differ."""
    if not record:
        return ["no record of an earlier deploy on this node"]
    if record.get("schema") != SCHEMA:
        return [f"the record has schema {record.get('schema')!r}, not {SCHEMA}"]
    reasons = []
    if record.get("fingerprint") != fp:
        names = changed_parts(record.get("parts") or {}, parts) if parts and record.get("parts") else []
        shown = ", ".join(names[:MAX_NAMED_PARTS]) + (
            f" and {len(names) - MAX_NAMED_PARTS} more" if len(names) > MAX_NAMED_PARTS else ""
        )
        reasons.append(
            "the inputs, the collection or the release changed since the last deploy" + (f" ({shown})" if names else "")
        )
    before = record.get("state") or {}
    b_engine, n_engine = before.get("engine") or {}, now["engine"]
    reasons += _container_reasons(b_engine.get("containers") or {}, n_engine["containers"])
    if b_engine.get("networks") != n_engine["networks"]:
        reasons.append("the stack's network changed since the last deploy")
    if b_engine.get("volumes") != n_engine["volumes"]:
        reasons.append("the stack's volumes changed since the last deploy")
    reasons += _entry_reasons("file", before.get("files") or {}, now["files"])
    reasons += _entry_reasons("directory", before.get("dirs") or {}, now["dirs"])
    # A streamer that died after the record was taken (its pid file unchanged) is a reason too.
    for name, entry in sorted(now["files"].items()):
        if entry and "pid" in entry and not entry.get("alive") and (before.get("files") or {}).get(name) == entry:
            reasons.append(f"file {name}: process {entry['pid']} is not running")
    return reasons


def record(fp, now, parts=None):
    """The record a successful rollout leaves: the fingerprint (and its parts) and the snapshot."""
    return {"schema": SCHEMA, "fingerprint": fp, "parts": parts or {}, "state": now}


def engine_error_reason(exc):
    return f"the Docker engine did not answer ({exc.message if isinstance(exc, DockerAPIError) else exc})"
