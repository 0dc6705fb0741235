#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: docker_capability
short_description: Ask a Docker engine whether it lets a container share the host's PID namespace
version_added: 0.1.0
description:
  - Asks the Docker engine whether a container with C(--pid=host) may be created, the way a real exporter
    would ask. It creates a throwaway container with C(HostConfig.PidMode=host) from an image that already
    exists on the engine, never starts it, and removes it at once.
  - An authorization plugin (for example the SPUR cluster's) answers such a request with HTTP 403
    C(authorization denied by plugin ...); the module reports that as RV(pid_host=denied) with the daemon's
    message, instead of failing. Any other refusal (missing image, daemon error) is RV(pid_host=error).
  - The probe container is labelled C(ai.aic.probe=pid-host) and named O(name_prefix) plus a random suffix,
    so it can never collide with, or remove, a container it did not create.
  - Talks to the engine's API through the collection's own client (module_utils/docker_api, urllib);
    no Docker CLI, no Docker SDK for Python, no internals of community.docker.
author:
  - aic.stack developers (!UNKNOWN)
extends_documentation_fragment:
  - aic.stack.attributes
  - aic.stack.docker
  - aic.stack.docker.timeout
attributes:
  check_mode:
    details:
      - The probe runs in check mode too. It leaves the engine as it found it (the throwaway container is
        created and removed, never started), so it always returns RV(ignore:changed=false).
options:
  image:
    description:
      - An image that already exists on the engine (for example the Prometheus image just built); it is never
        pulled. The container is created from it but never started, so its entrypoint does not matter.
    type: str
    required: true
  name_prefix:
    description:
      - Prefix of the throwaway container's name; a random suffix is added.
    type: str
    default: aic-pid-host-probe
notes:
  - Creating and removing the container is all the probe does; an authorization plugin sees the same
    C(POST /containers/create) request that a real C(--pid=host) container would send, so the answer is the
    one the exporter would get.
seealso:
  - module: community.docker.docker_container
  - name: Docker authorization plugins
    description: How an authorization plugin answers C(AuthZReq).
    link: https://docs.docker.com/engine/extend/plugins_authorization/
"""

EXAMPLES = r"""
- name: Ask the engine whether host-PID exporters may run
  aic.stack.docker_capability:
    image: aic-prometheus:f443544eb0d1
  register: capability

- name: Say so when they may not
  ansible.builtin.debug:
    msg: "node-exporter skipped: {{ capability.message }}"
  when: capability.pid_host == 'denied'

- name: Probe a second engine
  aic.stack.docker_capability:
    docker_host: unix:///run/other/docker.sock
    image: aic-prometheus:f443544eb0d1
"""

RETURN = r"""
pid_host:
  description:
    - C(allowed) when the engine created the C(--pid=host) container, C(denied) when it refused with HTTP 403
      (an authorization plugin), C(error) when it refused for another reason (for example a missing image).
  returned: always
  type: str
  choices: [allowed, denied, error]
  sample: denied
message:
  description: The daemon's message when the container was refused (empty when allowed).
  returned: always
  type: str
  sample: 'authorization denied by plugin aic-authz: host PID namespace is not allowed here'
status_code:
  description: HTTP status of the create request when it was refused, else V(null).
  returned: always
  type: int
  sample: 403
"""

import secrets

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI, DockerAPIError, path

PROBE_LABEL = "ai.aic.probe"


def classify(status_code, message):
    """``denied`` for an authorization refusal (HTTP 403, or a plugin's message), else ``error``."""
    if status_code == 403 or "authorization denied" in message.lower():
        return "denied"
    return "error"


def probe_pid_host(client, image, name_prefix):
    """Create (never start) and remove a ``--pid=host`` container with ``client`` (a DockerAPI); the result.

    DockerAPIError with no status (the engine cannot be reached) propagates: that is no answer to the question."""
    name = f"{name_prefix}-{secrets.token_hex(4)}"
    body = {
        "Image": image,
        "Cmd": ["--version"],
        "Labels": {PROBE_LABEL: "pid-host"},
        "NetworkDisabled": True,
        "HostConfig": {"PidMode": "host", "AutoRemove": False},
    }
    warnings = []
    try:
        created = client.call("POST", "/containers/create", params={"name": name}, body=body, expect=(201,))
    except DockerAPIError as exc:
        if exc.status is None:
            raise
        return {"pid_host": classify(exc.status, exc.message), "message": exc.message, "status_code": exc.status}
    try:
        client.call("DELETE", path("/containers/{}", created["Id"]), params={"force": "1", "v": "1"})
    except DockerAPIError as exc:
        warnings.append(f"could not remove the probe container {name}: {exc.message}")
    result = {"pid_host": "allowed", "message": "", "status_code": None}
    if warnings:
        result["warnings"] = warnings
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "image": {"type": "str", "required": True},
            "name_prefix": {"type": "str", "default": "aic-pid-host-probe"},
            "docker_host": {"type": "str"},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        client = DockerAPI(params["docker_host"], timeout=params["timeout"])
        result = probe_pid_host(client, params["image"], params["name_prefix"])
    except (ValueError, DockerAPIError) as exc:
        module.fail_json(
            msg=f"Docker engine error while probing --pid=host: {exc}",
            pid_host="error",
            message=str(exc),
            status_code=None,
        )
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
