"""Tests for plugins/filter/router.py: the router's filters give module_utils/router.py's answers, and its errors
become Ansible filter errors that name the variable."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.filter.router import FilterModule
from ansible_collections.aic.stack.plugins.module_utils import router as rt
from ansible_collections.aic.stack.plugins.module_utils.plan import build_plan

FILTERS = FilterModule().filters()


def hostvars(**inputs):
    return {"localhost": {"aic_plan": build_plan({"aic_router_enabled": True, **inputs})[0]}}


def test_the_filters_are_the_module_utils_functions():
    assert set(FILTERS) == {"job_router_host", "router_workers", "router_spec"}
    nodes = hostvars()
    assert FILTERS["job_router_host"](nodes, ["localhost"], "localhost") == "localhost"
    workers = FILTERS["router_workers"](nodes, ["localhost"], "localhost")
    assert workers == rt.router_workers(nodes, ["localhost"], "localhost") == ["http://aic-vllm:8000"]
    spec = FILTERS["router_spec"](nodes["localhost"]["aic_plan"], workers, "aic-router:abc")
    assert spec == rt.router_spec(nodes["localhost"]["aic_plan"], workers, "aic-router:abc")


def test_a_router_error_is_a_filter_error_naming_the_variable():
    plan = build_plan({"aic_router_enabled": False})[0]
    with pytest.raises(AnsibleFilterError, match="^aic_router_enabled: false"):
        FILTERS["router_spec"](plan, ["http://aic-vllm:8000"])
    with pytest.raises(AnsibleFilterError, match="aic_router_enabled: the router has no worker"):
        FILTERS["router_spec"](hostvars()["localhost"]["aic_plan"], [])
