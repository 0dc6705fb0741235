#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_load
short_description: Load a zstd image tarball into Docker only if its sha256 matches, streaming, without a local copy
version_added: 0.1.0
description:
  - Does nothing when the node's engine already has O(image_id).
  - Otherwise streams O(path) (a local file, or a file on a shared file system) through C(zstd -dc) into the Docker
    engine's image load API, hashing it on the way, and holds back the last block until the whole file's sha256
    equals O(sha256). On a mismatch the upload is aborted before the end of the archive, so the engine never
    registers the image (it unpacks the whole archive before loading anything); the node's current images and
    containers are untouched and the module fails naming both digests.
  - After loading, checks that O(image_id) exists and optionally removes O(path) (O(remove)).
author:
  - aic.stack developers (!UNKNOWN)
requirements:
  - The C(zstd) command on the node
extends_documentation_fragment:
  - aic.stack.attributes
  - aic.stack.docker
options:
  path:
    description: The C(.tar.zst) tarball to load.
    type: path
    required: true
  sha256:
    description: Expected sha256 of the tarball (from the build manifest).
    type: str
    required: true
  image_id:
    description: Image id (C(sha256:...)) the tarball holds (from the build manifest).
    type: str
    required: true
  remove:
    description: Remove O(path) after a successful load (not for a shared file).
    type: bool
    default: false
  timeout:
    description: Seconds each request to the engine may wait (the load of a large image is one request).
    type: int
    default: 3600
"""

EXAMPLES = r"""
- name: Load the image straight from the shared file system (verified before it can be registered)
  aic.stack.image_load:
    path: /shared/aic/artifacts/aic-stack-rocm-1a2b3c4d5e6f.tar.zst
    sha256: "{{ manifest.sha256 }}"
    image_id: "{{ manifest.image_id }}"
"""

RETURN = r"""
loaded:
  description: The image was loaded by this call.
  type: bool
  returned: always
seconds:
  description: Seconds spent reading, verifying and loading.
  type: float
  returned: always
bytes_read:
  description: Bytes of O(path) read.
  type: int
  returned: always
"""

import hashlib  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI, DockerAPIError, path  # noqa: E402

CHUNK = 4 * 1024 * 1024


class Mismatch(Exception):
    pass


def feed_verified(path, sha256, sink, state):
    """Copy ``path`` into ``sink`` hashing it, writing the last block only when the digest matches."""
    digest = hashlib.sha256()
    held = b""
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
            state["bytes"] += len(block)
            if held:
                sink.write(held)
            held = block
    state["digest"] = digest.hexdigest()
    if state["digest"] != sha256:
        raise Mismatch(state["digest"])
    sink.write(held)


def has_image(api, image_id):
    return api.exists(path("/images/{}/json", image_id))


def load(module, api, p):
    state = {"bytes": 0, "digest": None, "error": None}
    zstd = subprocess.Popen(["zstd", "-dcq"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def writer():
        try:
            feed_verified(p["path"], p["sha256"], zstd.stdin, state)
            zstd.stdin.close()
        except Mismatch:
            state["error"] = "mismatch"
            zstd.kill()
        except (OSError, ValueError) as exc:
            # An error already recorded (the upload broke off, zstd was killed for it) is the cause, not this one.
            state["error"] = state["error"] or str(exc)
            zstd.kill()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()

    def body():
        while True:
            block = zstd.stdout.read(CHUNK)
            if not block:
                break
            yield block
        thread.join()
        zstd.wait()
        # Raising here aborts the chunked upload: the engine sees a broken archive and registers nothing.
        if state["error"] or zstd.returncode != 0:
            raise Mismatch(state["error"] or f"zstd exited {zstd.returncode}")

    try:
        api.load_image(body())
    except Mismatch:
        pass
    except DockerAPIError as exc:
        if not state["error"]:
            state["error"] = f"docker load failed: {exc}"
    if thread.is_alive():
        # The upload broke off before the end of the file (the engine went away): nobody reads zstd's output any
        # more, so the writer would wait on a full pipe for ever.
        zstd.kill()
    thread.join()
    zstd.wait()
    if state["error"] == "mismatch":
        module.fail_json(
            msg="sha256 mismatch for {}: read {}, the manifest says {}; the image was not loaded, nothing on this "
            "node changed".format(p["path"], state["digest"], p["sha256"]),
            bytes_read=state["bytes"],
            loaded=False,
        )
    if state["error"] or zstd.returncode != 0:
        err = zstd.stderr.read().decode("utf-8", "replace").strip()
        module.fail_json(msg="loading {} failed: {} {}".format(p["path"], state["error"] or "", err), loaded=False)
    return state


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "sha256": {"type": "str", "required": True},
            "image_id": {"type": "str", "required": True},
            "remove": {"type": "bool", "default": False},
            "docker_host": {"type": "str"},
            "timeout": {"type": "int", "default": 3600},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        api = DockerAPI(p["docker_host"], timeout=p["timeout"])
        present = has_image(api, p["image_id"])
    except (DockerAPIError, ValueError) as exc:
        module.fail_json(msg=f"cannot reach the Docker engine: {exc}")
    if present:
        module.exit_json(changed=False, loaded=False, seconds=0.0, bytes_read=0)
    if module.check_mode:
        module.exit_json(changed=True, loaded=False, seconds=0.0, bytes_read=0)
    if not os.path.isfile(p["path"]):
        module.fail_json(msg="{} does not exist on this node".format(p["path"]), loaded=False)
    start = time.time()
    state = load(module, api, p)
    if not has_image(api, p["image_id"]):
        module.fail_json(msg="{} loaded, but the engine has no image {}".format(p["path"], p["image_id"]), loaded=False)
    if p["remove"]:
        os.unlink(p["path"])
    module.exit_json(changed=True, loaded=True, seconds=round(time.time() - start, 3), bytes_read=state["bytes"])


if __name__ == "__main__":
    main()
