# Copyright: aic.stack contributors
# Apache-2.0
"""Filters for the job's vllm-router (the logic lives in module_utils/router.py)."""

from __future__ import annotations

from ansible_collections.aic.stack.plugins.module_utils import router as rt
from ansible_collections.aic.stack.plugins.plugin_utils.filters import as_filter


def job_router_host(hostvars, nodes, default=""):
    """The node of the job that runs the router (aic_router_host, else ``default``, else the first node)."""
    return rt.job_router_host(hostvars, nodes, default)


def router_workers(hostvars, nodes, router_host):
    """The router's worker URLs: every vLLM instance of every node of ``nodes``, as ``router_host`` reaches it."""
    return rt.router_workers(hostvars, nodes, router_host)


def router_spec(plan, workers, image=""):
    """docker_container parameters of the router (module_utils/router.py router_spec)."""
    return rt.router_spec(plan, workers, image)


class FilterModule:
    def filters(self):
        return {
            func.__name__: as_filter(func, rt.RouterError) for func in (job_router_host, router_workers, router_spec)
        }
