# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Documentation stub: the work is done by the action plugin of the same name."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: release
short_description: Resolve the stack release of a run once, for any flavour
version_added: "0.2.0"
description:
  - Decides which stack image this run deploys, in this order - the pinned O(pinned) (C(aic_stack_image)), this
    run's build (O(build)), the C(<image>.current.json) pointer of the last build in O(artifact_dir), and the node's
    last healthy release (O(deployed_path)).
  - A pinned image needs no build record and no tarball; when O(artifact_dir) has a manifest of it, the release
    carries it so that C(image_distribute) can send it to nodes that lack it.
  - Every record has one shape - the artifact manifest's keys plus C(source) and C(manifest) (the controller path
    of the manifest, empty when there is none); C(deployed.json) on a node is the same record plus C(deployed_at).
  - Sets the facts C(aic_release) and C(aic_release_rollback) (the record to restore when this release fails on
    the node, or null). The controller's files are read on the controller; O(deployed_path) on the node.
options:
  name:
    description: The stack image name without tag (C(aic_plan.images.stack.name)).
    type: str
    required: true
  pinned:
    description: The image the operator pinned (C(aic_plan.images.stack.pinned)); empty when none.
    type: str
    default: ""
  build:
    description: This run's build manifest (what C(aic.stack.image_artifact) returned) or image name; empty when
      this run built nothing.
    type: raw
  artifact_dir:
    description: Controller directory of the build artifacts (C(aic_plan.paths.artifact_dir)).
    type: path
    default: ""
  deployed_path:
    description: Path on the node of its last healthy release record (C(<work_dir>/deployed.json)); empty skips it.
    type: path
    default: ""
  last_healthy:
    description: The node's last healthy record when the caller already read it (takes precedence over
      O(deployed_path)).
    type: dict
extends_documentation_fragment:
  - aic.stack.attributes
  - aic.stack.attributes.action
author:
  - aic.stack developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Resolve the release (pinned -> this run's build -> manifest pointer -> last healthy)
  aic.stack.release:
    name: "{{ aic_plan.images.stack.name }}"
    pinned: "{{ aic_plan.images.stack.pinned or '' }}"
    build: "{{ image_build_release | default(omit) }}"
    artifact_dir: "{{ aic_plan.paths.artifact_dir }}"
    deployed_path: "{{ aic_plan.paths.work_dir }}/deployed.json"

- name: Deploy it
  ansible.builtin.debug:
    msg: "{{ aic_release.image }} ({{ aic_release.source }})"
"""

RETURN = r"""
release:
  description: The release record (also the fact C(aic_release)).
  returned: success
  type: dict
  sample:
    image: aic-stack-cpu:0a1b2c3d4e5f
    image_id: sha256:5d0e...
    source: manifest
    manifest: /var/lib/aic/artifacts/aic-stack-cpu-0a1b2c3d4e5f.manifest.json
    tarball: aic-stack-cpu-0a1b2c3d4e5f.tar.zst
    sha256: 3f1c...
    tarball_bytes: 1034567890
    flavour: cpu
    base_image: aic-base:bookworm-1a2b3c
last_healthy:
  description: The node's last healthy release record, or null.
  returned: success
  type: dict
rollback:
  description: The record to restore if the release fails on this node (null when it is the same image or none).
  returned: success
  type: dict
distributable:
  description: Whether the release carries an artifact (tarball and digest) that can be sent to nodes.
  returned: success
  type: bool
"""
