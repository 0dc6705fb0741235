# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Documentation stub: the work is done on the controller by the action plugin of the same name."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_broadcast
short_description: Serve an image tarball to a relay chain from the controller and show every node's progress
version_added: "0.1.0"
description:
  - The controller end of C(image_distribute)'s V(broadcast) and V(push) strategies, in two steps.
  - O(state=started) forks a source daemon on the controller that serves O(src) over plain TCP on O(port) to the
    nodes whose C(aic.stack.image_relay) jobs read from it (in a chain only the first node, and any node that routes
    around a dead relay) and collects the progress every node reports. Start it before the relays, so that the
    first node receives from the moment its relay runs; it returns the daemon's O(pid).
  - O(state=finished) prints one line per node every O(progress_interval) seconds (state, bytes, rate, upstream,
    bytes served onward), appends the same data as JSON lines to O(progress_log), returns when every node of O(nodes)
    is verified, already had the tarball, failed, or stayed silent for O(silent_timeout) seconds (a dead node does not
    hold the others back), or after O(timeout) seconds, and stops the daemon.
  - It does not fail for a failed node; the node's own job result fails that node.
  - A daemon whose play died ends by itself when nobody talked to it for two minutes.
options:
  state:
    description: V(started) starts the source daemon, V(finished) follows the nodes and stops it.
    type: str
    choices: [started, finished]
    default: started
  src:
    description: The tarball on the controller (O(state=started)).
    type: path
  sha256:
    description: Its sha256 (from the manifest); nodes asking for another file get an error (O(state=started)).
    type: str
  size:
    description: Its size in bytes, checked before serving (O(state=started)).
    type: int
  nodes:
    description: Names of the nodes expected to report (O(state=finished)).
    type: list
    elements: str
  pid:
    description: The daemon's pid returned by O(state=started), stopped at the end (O(state=finished)).
    type: int
  address:
    description: Address to listen on.
    type: str
    default: 0.0.0.0
  port:
    description: TCP port to listen on.
    type: int
    default: 29870
  timeout:
    description: Seconds for the whole transfer.
    type: int
    default: 3600
  silent_timeout:
    description: Seconds without a report after which a node is considered lost.
    type: float
    default: 30
  progress_interval:
    description: Seconds between two progress displays.
    type: float
    default: 10
  progress_log:
    description: File to append progress snapshots to (JSON lines); omit for none.
    type: path
extends_documentation_fragment:
  - aic.stack.attributes
attributes:
  action:
    support: full
    description: Runs on the controller.
author:
  - aic.stack developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Start the source
  aic.stack.image_broadcast:
    state: started
    src: /srv/aic/artifacts/aic-stack-rocm-1a2b3c4d5e6f.tar.zst
    sha256: "{{ manifest.sha256 }}"
    size: "{{ manifest.tarball_bytes }}"
  run_once: true
  delegate_to: localhost
  register: source

# ... start aic.stack.image_relay on the nodes (async) ...

- name: Follow the nodes, then stop the source
  aic.stack.image_broadcast:
    state: finished
    pid: "{{ source.pid }}"
    nodes: "{{ nodes_without_the_image }}"
    progress_log: logs/distribute/progress.jsonl
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
pid:
  description: The source daemon's pid.
  type: int
  returned: O(state=started)
nodes:
  description: The last report of every node (state, bytes, total, rate, upstream, served, switches, error).
  type: dict
  returned: O(state=finished)
served_bytes:
  description: Bytes the controller sent (one tarball for a healthy chain, N for a push).
  type: int
  returned: O(state=finished)
seconds:
  description: Seconds the source was up.
  type: float
  returned: success
failed_nodes:
  description: Nodes that reported a failure.
  type: list
  elements: str
  returned: success
silent_nodes:
  description: Nodes that stopped reporting (dead, stalled or cut off).
  type: list
  elements: str
  returned: success
timed_out_nodes:
  description: Nodes still running at O(timeout).
  type: list
  elements: str
  returned: success
"""
