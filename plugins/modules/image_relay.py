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
    C(aic.stack.image_broadcast) prints it.
  - O(state=started) forks the relay as a daemon detached from the connection and returns as soon as it serves (one
    pipelined module call, much cheaper than C(async) on many nodes); O(state=finished) waits for its result, which
    the daemon writes next to O(dest), and fails when the relay failed, died without a result (its pid is gone), or
    ran past O(wait_timeout).
author:
  - aic.stack developers (!UNKNOWN)
extends_documentation_fragment:
  - aic.stack.attributes
attributes:
  check_mode:
    details:
      - In check mode nothing is received; the module reports whether O(dest) would change.
options:
  state:
    description: V(started) starts the relay daemon; V(finished) waits for its result.
    type: str
    choices: [started, finished]
    default: started
  dest:
    description: Final path of the tarball on this node.
    type: path
    required: true
  sha256:
    description: Expected sha256 of the tarball (from the build manifest). Required with O(state=started).
    type: str
  size:
    description: Size of the tarball in bytes (from the build manifest). Required with O(state=started).
    type: int
  upstreams:
    description:
      - Where to fetch from, in order of preference (each C(host), C(port), optional C(name)).
      - Required with O(state=started).
    type: list
    elements: dict
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
  image_id:
    description:
      - The image id (C(sha256:...)) the tarball holds. When set, the relay first asks the node's engine; a node that
        has it receives nothing (result C(image_present)) and sends the nodes after it on to the ones before it.
    type: str
  docker_host:
    description: Docker daemon URL for O(image_id) (default from the environment).
    type: str
  pid:
    description: With O(state=finished), the daemon's pid from O(state=started) (default read from its pid file).
    type: int
    default: 0
  wait_timeout:
    description: With O(state=finished), seconds to wait for the result.
    type: float
    default: 3700
"""

EXAMPLES = r"""
- name: Start the relay on every node (a daemon; returns once it serves)
  aic.stack.image_relay:
    dest: /var/tmp/aic/images/aic-stack-cpu-d7c0f63149ad.tar.zst
    sha256: 0d8b24c5772c6324a827a864b507b2a70eafa86210a2f0965b641d091ae2627b
    size: 1634374603
    name: "{{ inventory_hostname }}"
    upstreams:
      - {name: node1, host: 10.0.0.11, port: 29870}
      - {name: controller, host: 10.0.0.1, port: 29870}
    report_to: {host: 10.0.0.1, port: 29870}
  register: relay_daemon

- name: Wait for its verified tarball
  aic.stack.image_relay:
    state: finished
    dest: /var/tmp/aic/images/aic-stack-cpu-d7c0f63149ad.tar.zst
    name: "{{ inventory_hostname }}"
    pid: "{{ relay_daemon.pid }}"
    wait_timeout: 60
"""

RETURN = r"""
pid:
  description: The relay daemon's pid.
  type: int
  returned: O(state=started)
image_present:
  description: The node's engine already had O(image_id); nothing was received.
  type: bool
  returned: O(state=finished)
present:
  description: The verified tarball was already there; nothing was received.
  type: bool
  returned: O(state=finished)
bytes_received:
  description: Bytes received over the network.
  type: int
  returned: O(state=finished)
seconds:
  description: Seconds from start until the tarball was complete.
  type: float
  returned: O(state=finished)
started_at:
  description: Start time (epoch seconds).
  type: float
  returned: O(state=finished)
verified_at:
  description: Time (epoch seconds) at which the tarball was complete and its sha256 verified.
  type: float
  returned: success
served_bytes:
  description: Bytes this node forwarded to other nodes.
  type: int
  returned: O(state=finished)
events:
  description: Upstream failures and switches (offset, upstream, message), empty on a clean run.
  type: list
  elements: dict
  returned: O(state=finished)
"""

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.aic.stack.plugins.module_utils import relay  # noqa: E402
from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI  # noqa: E402
from ansible_collections.aic.stack.plugins.module_utils.docker_api import path as docker_path  # noqa: E402
from ansible_collections.aic.stack.plugins.module_utils.process import pid_alive  # noqa: E402


def state_files(dest):
    """Where the detached relay of ``dest`` keeps its pid and its result (next to the tarball)."""
    directory, name = os.path.split(dest)
    return os.path.join(directory, f".{name}.relay.pid"), os.path.join(directory, f".{name}.relay.json")


def _write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def engine_has_image(image_id, docker_host=None, timeout=30):
    """Ask the Docker engine's API (GET /images/<id>/json) whether it has ``image_id``.

    One HTTP request on the engine's socket (module_utils/docker_api): the relays of every node ask at the same
    moment; the load, later, is image_load's streamed request on the same client.
    """
    return DockerAPI(docker_host, timeout=timeout).exists(docker_path("/images/{}/json", image_id))


def image_check(p):
    """A callable telling whether the node's engine has image_id (None when no image_id is given)."""
    if not p["image_id"]:
        return None
    return lambda: engine_has_image(p["image_id"], p["docker_host"])


def run_detached(p, tell, pid_file, result_file):  # pragma: no cover - runs in the forked daemon
    """The relay itself, in a daemon: its result (or failure) goes to ``result_file``."""
    with open(pid_file, "w", encoding="utf-8") as handle:
        handle.write(str(os.getpid()))
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
            on_ready=lambda: tell("ready"),
            has_image=image_check(p),
        )
        payload = {"failed": False, **result}
    except relay.RelayError as exc:
        details = exc.args[1] if len(exc.args) > 1 else {}
        payload = {"failed": True, "msg": f"{p['name']}: {exc.args[0]}", **details}
    except Exception as exc:  # noqa: BLE001 - whatever happens must reach the result file
        payload = {"failed": True, "msg": f"{p['name']}: relay crashed: {exc!r}"}
    tell(f"error {payload.get('msg', 'relay ended before serving')}")
    _write_json(result_file, payload)


def start(module, p):
    """Fork the relay as a daemon (detached from the ssh session) and return once it serves."""
    pid_file, result_file = state_files(p["dest"])
    os.makedirs(os.path.dirname(p["dest"]) or ".", exist_ok=True)
    for stale in (pid_file, result_file):
        if os.path.exists(stale):
            os.unlink(stale)
    pid, error = relay.spawn_daemon(lambda tell: run_detached(p, tell, pid_file, result_file))
    if pid is None:
        module.fail_json(msg=error if error.startswith(p["name"]) else f"{p['name']}: the relay did not start: {error}")
    module.exit_json(changed=False, pid=pid, result_file=result_file)


def finish(module, p):
    """Wait for the detached relay's result; fail when it failed, died without one, or ran past wait_timeout."""
    pid_file, result_file = state_files(p["dest"])
    pid = p["pid"]
    if not pid and os.path.exists(pid_file):
        with open(pid_file, encoding="utf-8") as handle:
            pid = int(handle.read().strip() or 0)
    deadline = time.monotonic() + p["wait_timeout"]
    while True:
        if os.path.exists(result_file):
            with open(result_file, encoding="utf-8") as handle:
                payload = json.load(handle)
            if payload.pop("failed"):
                module.fail_json(**payload)
            module.exit_json(changed=not (payload["present"] or payload.get("image_present")), **payload)
        if pid and not pid_alive(pid) and not os.path.exists(result_file):
            module.fail_json(
                msg=f"{p['name']}: the relay (pid {pid}) died without a result (killed, or the node rebooted)"
            )
        if time.monotonic() > deadline:
            module.fail_json(msg=f"{p['name']}: the relay (pid {pid}) is still running after {p['wait_timeout']} s")
        time.sleep(0.2)


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "default": "started", "choices": ["started", "finished"]},
            "dest": {"type": "path", "required": True},
            "sha256": {"type": "str"},
            "size": {"type": "int"},
            "upstreams": {"type": "list", "elements": "dict"},
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
            "image_id": {"type": "str"},
            "docker_host": {"type": "str"},
            "pid": {"type": "int", "default": 0},
            "wait_timeout": {"type": "float", "default": 3700},
        },
        required_if=[("state", "started", ("sha256", "size", "upstreams"))],
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "finished":
        if module.check_mode:
            module.exit_json(changed=False, skipped=True, msg="nothing runs in check mode")
        finish(module, p)
    for upstream in p["upstreams"]:
        if not upstream.get("host") or not upstream.get("port"):
            module.fail_json(msg=f"every upstream needs host and port, got {upstream!r}")
    if module.check_mode:
        present = os.path.isfile(p["dest"]) and os.path.getsize(p["dest"]) == p["size"]
        module.exit_json(changed=not present, present=present, bytes_received=0, seconds=0.0, served_bytes=0, events=[])
    start(module, p)


if __name__ == "__main__":
    main()
