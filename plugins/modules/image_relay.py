#!/usr/bin/python
# ruff: noqa: EXE001 - Ansible module convention: shebang, not executable
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_relay
short_description: Receive an image tarball from a relay chain, verify its sha256 and serve it to the next nodes
version_added: 0.1.0
description:
  - One node's part of C(image_distribute)'s V(broadcast) (and V(push)) strategies. Fetches O(dest) from the first of
    O(upstreams) over plain TCP, writing it as C(<dest>.part) and hashing every byte, while serving what it already
    has to the nodes after it on O(port) (pipelined; every link carries the file once, at the same time).
  - When an upstream dies, stalls for O(stall_timeout) seconds or reports an error, resumes at the same byte from the
    next upstream of the list (the node before it, ..., the source last). A relay that is alive but waiting for its
    own upstream sends heartbeats and is not abandoned.
  - The file gets its final name only when its sha256 equals O(sha256); on a mismatch the partial file is removed
    and the module fails, and the nodes reading from it switch to another upstream.
  - A complete O(dest) with the right sha256 is reused (no bytes move) and still served.
  - Reports its progress (bytes, rate, upstream) every O(report_interval) seconds to O(report_to), where
    C(aic.stack.image_broadcast) prints it. Run it with C(async) on every node, then start C(aic.stack.image_broadcast).
author:
  - aic.stack developers
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
    support: full
    details:
      - In check mode nothing is received; the module reports whether O(dest) would change.
  diff_mode:
    description: Will return details on what has changed, when in diff mode.
    support: none
options:
  dest:
    description: Final path of the tarball on this node.
    type: path
    required: true
  sha256:
    description: Expected sha256 of the tarball (from the build manifest).
    type: str
    required: true
  size:
    description: Size of the tarball in bytes (from the build manifest).
    type: int
    required: true
  upstreams:
    description: Where to fetch from, in order of preference (each C(host), C(port), optional C(name)).
    type: list
    elements: dict
    required: true
  name:
    description: This node's name in progress reports and in its upstreams' logs.
    type: str
    required: true
  listen_address:
    description: Address to serve the tarball on, for the nodes after this one.
    type: str
    default: 0.0.0.0
  port:
    description: TCP port to serve on.
    type: int
    default: 29870
  serve:
    description: Serve the tarball to other nodes (V(false) for a star-shaped V(push)).
    type: bool
    default: true
  report_to:
    description: C(host) and C(port) of the source that collects progress reports; omit for none.
    type: dict
  report_interval:
    description: Seconds between two progress reports.
    type: float
    default: 1.0
  stall_timeout:
    description: Seconds without any frame from an upstream before it is abandoned for the next one.
    type: float
    default: 10
  connect_timeout:
    description: Seconds to keep retrying a refused connection (the upstream may not listen yet).
    type: float
    default: 30
  linger:
    description: Seconds to keep serving after the last reader left (late readers routed around a dead relay).
    type: float
    default: 3
  timeout:
    description: Seconds for the whole transfer, serving included.
    type: int
    default: 3600
"""

EXAMPLES = r"""
- name: Receive the image tarball through the relay chain (background job on every node)
  aic.stack.image_relay:
    dest: /var/tmp/aic/images/aic-stack-cpu-d7c0f63149ad.tar.zst
    sha256: 0d8b24c5772c6324a827a864b507b2a70eafa86210a2f0965b641d091ae2627b
    size: 1634374603
    name: "{{ inventory_hostname }}"
    upstreams:
      - {name: node1, host: 10.0.0.11, port: 29870}
      - {name: source, host: 10.0.0.1, port: 29870}
    report_to: {host: 10.0.0.1, port: 29870}
  async: 3600
  poll: 0
  register: relay_job
"""

RETURN = r"""
present:
  description: The verified tarball was already there; nothing was received.
  type: bool
  returned: always
bytes_received:
  description: Bytes received over the network.
  type: int
  returned: always
seconds:
  description: Seconds from start until the tarball was complete.
  type: float
  returned: always
started_at:
  description: Start time (epoch seconds).
  type: float
  returned: always
verified_at:
  description: Time (epoch seconds) at which the tarball was complete and its sha256 verified.
  type: float
  returned: success
served_bytes:
  description: Bytes this node forwarded to other nodes.
  type: int
  returned: always
events:
  description: Upstream failures and switches (offset, upstream, message), empty on a clean run.
  type: list
  elements: dict
  returned: always
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.aic.stack.plugins.module_utils import relay  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "sha256": {"type": "str", "required": True},
            "size": {"type": "int", "required": True},
            "upstreams": {"type": "list", "elements": "dict", "required": True},
            "name": {"type": "str", "required": True},
            "listen_address": {"type": "str", "default": "0.0.0.0"},
            "port": {"type": "int", "default": 29870},
            "serve": {"type": "bool", "default": True},
            "report_to": {"type": "dict"},
            "report_interval": {"type": "float", "default": 1.0},
            "stall_timeout": {"type": "float", "default": 10},
            "connect_timeout": {"type": "float", "default": 30},
            "linger": {"type": "float", "default": 3},
            "timeout": {"type": "int", "default": 3600},
        },
        supports_check_mode=True,
    )
    p = module.params
    for upstream in p["upstreams"]:
        if not upstream.get("host") or not upstream.get("port"):
            module.fail_json(msg=f"every upstream needs host and port, got {upstream!r}")
    if module.check_mode:
        present = os.path.isfile(p["dest"]) and os.path.getsize(p["dest"]) == p["size"]
        module.exit_json(changed=not present, present=present, bytes_received=0, seconds=0.0, served_bytes=0, events=[])
    os.makedirs(os.path.dirname(p["dest"]) or ".", exist_ok=True)
    try:
        result = relay.relay(
            p["dest"],
            p["sha256"],
            p["size"],
            p["upstreams"],
            p["name"],
            listen=(p["listen_address"], p["port"]),
            serve=p["serve"],
            report_to=p["report_to"],
            stall_timeout=p["stall_timeout"],
            connect_timeout=p["connect_timeout"],
            timeout=p["timeout"],
            linger=p["linger"],
            report_interval=p["report_interval"],
        )
    except relay.RelayError as exc:
        details = exc.args[1] if len(exc.args) > 1 else {}
        module.fail_json(msg="{}: {}".format(p["name"], exc.args[0]), **details)
    module.exit_json(changed=not result["present"], **result)


if __name__ == "__main__":
    main()
