# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the image_distribute role: who needs the image, which strategy, and each node's upstream list."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

STRATEGIES = ("auto", "broadcast", "push", "copy", "shared_fs")
MANIFEST_KEYS = ("image", "image_id", "tarball", "tarball_bytes", "sha256")


def distribute_needed(hosts, image_counts):
    """The hosts (in order) whose engine reported no image with the manifest's id."""
    if len(hosts) != len(image_counts):
        raise AnsibleFilterError(f"distribute_needed: {len(hosts)} hosts but {len(image_counts)} answers")
    return [host for host, count in zip(hosts, image_counts, strict=False) if int(count) == 0]


def distribute_strategy(strategy, needed_count, shared_dir=""):
    """Resolve ``auto``: a chain for two or more nodes; one node reads the shared file when there is one, else a push."""
    if strategy not in STRATEGIES:
        raise AnsibleFilterError(
            "image_distribute_strategy: {!r} is not one of {}".format(strategy, ", ".join(STRATEGIES))
        )
    if strategy != "auto":
        return strategy
    if int(needed_count) > 1:
        return "broadcast"
    return "shared_fs" if shared_dir else "push"


def distribute_manifest_errors(manifest):
    """Problems of a build manifest (empty list when it is usable)."""
    if not isinstance(manifest, dict):
        return ["the manifest is not a JSON object"]
    errors = [f"missing {key}" for key in MANIFEST_KEYS if not manifest.get(key)]
    sha = str(manifest.get("sha256", ""))
    if sha and (len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha)):
        errors.append(f"sha256 {sha!r} is not 64 hex digits")
    if manifest.get("image_id") and not str(manifest["image_id"]).startswith("sha256:"):
        errors.append("image_id {!r} is not sha256:...".format(manifest["image_id"]))
    if "/" in str(manifest.get("tarball", "")):
        errors.append("tarball {!r} must be a file name".format(manifest["tarball"]))
    return errors


def relay_upstreams(me, needed, addresses, source, port, strategy="broadcast"):
    """Upstreams of ``me``: in a chain, the nodes before it nearest first, then the controller; in a push, the controller."""
    if me not in needed:
        raise AnsibleFilterError(f"relay_upstreams: {me} is not among the nodes that receive")
    if len(needed) != len(addresses):
        raise AnsibleFilterError(f"relay_upstreams: {len(needed)} nodes but {len(addresses)} addresses")
    tail = [{"name": "controller", "host": source, "port": int(port)}]
    if strategy != "broadcast":
        return tail
    index = needed.index(me)
    before = [{"name": needed[i], "host": addresses[i], "port": int(port)} for i in range(index - 1, -1, -1)]
    return before + tail


def distribute_addresses(hosts, hostvars):
    """Each host's address on the data path: image_distribute_node_address, else ansible_host, else its name."""
    out = []
    for host in hosts:
        hv = hostvars[host]
        out.append(str(hv.get("image_distribute_node_address") or hv.get("ansible_host") or host))
    return out


class FilterModule:
    def filters(self):
        return {
            "distribute_needed": distribute_needed,
            "distribute_strategy": distribute_strategy,
            "distribute_manifest_errors": distribute_manifest_errors,
            "relay_upstreams": relay_upstreams,
            "distribute_addresses": distribute_addresses,
        }
