# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
from __future__ import annotations

DOCUMENTATION = r"""
---
name: route_source
short_description: The controller's own address that the kernel would use to reach a host
version_added: "0.1.0"
description:
  - For each host name or address, returns the local source address of the route to it (a UDP socket is connected,
    which sends nothing). C(image_distribute) uses it as the address nodes connect back to, so an operator does not
    have to name the controller's interface on the cluster network.
options:
  _terms:
    description: Host names or IP addresses.
    required: true
    type: list
    elements: str
author:
  - aic.stack developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The controller's address on the nodes' network
  ansible.builtin.debug:
    msg: "{{ lookup('aic.stack.route_source', hostvars[groups['aic_nodes'][0]].ansible_host) }}"
"""

RETURN = r"""
_raw:
  description: One local IP address per term.
  type: list
  elements: str
"""

import socket  # noqa: E402

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402


def route_source(host, port=9):
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        raise AnsibleLookupError(f"route_source: cannot resolve {host!r}: {exc}") from exc
    family, _type, _proto, _name, address = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(address)
        except OSError as exc:
            raise AnsibleLookupError(f"route_source: no route to {host!r}: {exc}") from exc
        return sock.getsockname()[0]


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [route_source(str(term)) for term in terms]
