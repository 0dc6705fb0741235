# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The release: which stack image a run deploys, resolved once, in one record shape for every flavour.

Order (first that applies wins):

1. ``pinned``: the operator's ``aic_stack_image``. No build record and no tarball are needed; when the artifact
   directory holds a manifest of that image, the release carries it so the image can be distributed.
2. ``build``: the manifest this run's build saved (``image_build`` publishes it).
3. ``manifest``: the ``<image>.current.json`` pointer of the last build on the controller.
4. ``last_healthy``: the record this node wrote when it last passed health (only for rollback, or when nothing else
   exists on a node that runs without a controller-side artifact directory).

Every record has the same shape: the artifact manifest's keys (``image``, ``image_id``, ``tarball``, ``sha256``,
``tarball_bytes``, ``flavour``, ``base_image``, ``deps_image``, ...), plus ``source`` (where it came from) and
``manifest`` (the controller path of its manifest, empty when there is none). ``deployed.json`` on a node is a
release record with ``deployed_at``.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.aic.stack.plugins.module_utils.artifact import artifact_base

SOURCES = ("pinned", "build", "manifest", "last_healthy")
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*(:[0-9]+/[A-Za-z0-9._/-]+)?:[A-Za-z0-9._-]+$")
# Keys a record needs before it can be distributed (a tarball to send and a digest to check it against).
ARTIFACT_KEYS = ("image_id", "tarball", "sha256", "tarball_bytes")


class ReleaseError(ValueError):
    """No release can be resolved, or a record is malformed; the message says which input to fix."""


def image_name(image):
    """``registry:5000/ns/name:tag`` -> ``registry:5000/ns/name``."""
    head, _dummy, last = image.rpartition("/")
    name = last.rsplit(":", 1)[0] if ":" in last else last
    return f"{head}/{name}" if head else name


def read_json(path):
    """The JSON document at ``path``; None when it does not exist; ReleaseError when it is not JSON."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ReleaseError(f"{path}: not a readable JSON record ({exc})") from exc


def record(data, source, manifest_path=""):
    """A release record of ``data`` (a manifest, a build record, a deployed.json, or just an image name)."""
    if isinstance(data, str):
        data = {"image": data}
    if not isinstance(data, dict) or not isinstance(data.get("image"), str) or not IMAGE_RE.match(data["image"]):
        raise ReleaseError(f"{source}: {data!r} is not a release record with an image name:tag")
    if source not in SOURCES:
        raise ReleaseError(f"unknown release source {source!r}")
    out = {k: v for k, v in data.items() if k not in ("source", "manifest", "deployed_at")}
    # The build record of older versions called the base image "base" and the dependency image "deps".
    if "base" in out and "base_image" not in out:
        out["base_image"] = out.pop("base")
    if "deps" in out and "deps_image" not in out:
        out["deps_image"] = out.pop("deps")
    out.setdefault("image_id", "")
    out.setdefault("base_image", "")
    out["source"] = source
    out["manifest"] = manifest_path or ""
    return out


def last_healthy_record(data):
    """This node's deployed.json as a release record, keeping when it was deployed (None when there is none)."""
    if not data:
        return None
    out = record(data, "last_healthy")
    if isinstance(data, dict) and data.get("deployed_at"):
        out["deployed_at"] = data["deployed_at"]
    return out


def distributable(rec):
    """True when the record carries an artifact (tarball + digest) that can be sent to the nodes."""
    return bool(rec and rec.get("manifest") and all(rec.get(k) for k in ARTIFACT_KEYS))


def pointer_path(artifact_dir, name):
    return os.path.join(artifact_dir, artifact_base(name) + ".current.json")


def manifest_path(artifact_dir, image):
    return os.path.join(artifact_dir, artifact_base(image) + ".manifest.json")


def find_artifact(artifact_dir, image):
    """The manifest (and its path) of ``image`` in ``artifact_dir``, or (None, "")."""
    if not artifact_dir:
        return None, ""
    path = manifest_path(artifact_dir, image)
    data = read_json(path)
    if data is None or data.get("image") != image:
        return None, ""
    return data, path


def resolve(name, pinned="", build=None, artifact_dir="", last_healthy=None):
    """The release for image ``name`` (e.g. ``aic-stack-cpu``): pinned -> this run's build -> pointer -> last healthy.

    ``build`` is this run's build manifest (or None); ``last_healthy`` this node's deployed.json content (or None).
    Raises ReleaseError naming what to do when there is nothing to deploy.
    """
    if pinned:
        data, path = find_artifact(artifact_dir, pinned)
        return record(data or pinned, "pinned", path)
    if build:
        image = build.get("image", "") if isinstance(build, dict) else str(build)
        data, path = find_artifact(artifact_dir, image) if image else (None, "")
        build_id = build.get("image_id") if isinstance(build, dict) else ""
        if data is not None and (not build_id or data.get("image_id") == build_id):
            return record(data, "build", path)
        return record(build, "build")
    if artifact_dir:
        pointer = pointer_path(artifact_dir, name)
        data = read_json(pointer)
        if data is not None:
            _dummy, path = find_artifact(artifact_dir, data.get("image", ""))
            return record(data, "manifest", path or pointer)
    if last_healthy:
        return record(last_healthy, "last_healthy")
    raise ReleaseError(
        f"no release of {name}: aic_stack_image is not set, this run built nothing, "
        f"{pointer_path(artifact_dir, name) if artifact_dir else 'the artifact directory'} does not exist and this "
        "node has no last healthy image; build first (make build / playbooks/build.yml) or pin aic_stack_image"
    )


def rollback_target(release, last_healthy):
    """The record to restore when ``release`` fails on a node: its last healthy one, unless that is the same image."""
    if not last_healthy:
        return None
    rec = record(last_healthy, "last_healthy")
    return None if same_image(rec, release) else rec


def same_image(a, b):
    """Whether two records name the same image (and, where both know it, the same image id)."""
    if not a or not b or a.get("image") != b.get("image"):
        return False
    return not a.get("image_id") or not b.get("image_id") or a["image_id"] == b["image_id"]


def deployed_record(release, when, last_healthy=None):
    """What a node writes to deployed.json once ``release`` passed health there.

    The release record without the run-specific ``source`` and ``manifest`` (reading it back gives source
    ``last_healthy``), plus ``deployed_at``: kept from ``last_healthy`` when that was the same image, so a rerun that
    changes nothing rewrites nothing.
    """
    out = {k: v for k, v in release.items() if k not in ("source", "manifest", "deployed_at")}
    if same_image(release, last_healthy) and last_healthy.get("deployed_at"):
        when = last_healthy["deployed_at"]
        # An earlier record may know the image id this run's pinned release does not.
        if not out.get("image_id") and last_healthy.get("image_id"):
            out["image_id"] = last_healthy["image_id"]
    out["deployed_at"] = when
    return out
