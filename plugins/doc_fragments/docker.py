# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The engine options shared by the modules that talk to the Docker Engine API through module_utils/docker_api."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  docker_host:
    description:
      - The Docker engine to talk to, V(unix:///path/to/docker.sock) or V(tcp://host:port) (plain HTTP).
      - Empty means the environment's E(DOCKER_HOST), else V(unix:///var/run/docker.sock).
    type: str
requirements:
  - Python on the node, nothing else (urllib with Ansible's own unix socket handler; no Docker CLI, no Docker SDK).
"""

    # The request timeout of a module whose requests are short (a module that streams images has its own).
    TIMEOUT = r"""
options:
  timeout:
    description: Seconds each request to the engine may take.
    type: int
    default: 60
"""
