"""Shared build inputs for the rocm image tests (plugins/filter/rocm.py and the rocm Dockerfile templates).

A plain module (not conftest.py) so that both test modules can import it by a unique name."""

from __future__ import annotations

from ansible_collections.aic.stack.plugins.filter.rocm import rocm_build_matrix

# The pins of the release we implement (FACTS section 1), as the role would put them into _image_build_rocm.
COMMON_INPUTS = {
    "version": "0.1.0",
    "base_image": "rocm/dev-ubuntu-24.04:7.14.0-full",
    "rocm_version": "7.14.0",
    "vllm_ref": "v0.26.0",
    "vllm_wheel_index_url": "https://wheels.vllm.ai/rocm/0.26.0/rocm7140",
    "lmcache_ref": "v0.5.2",
    "nixl_ref": "v1.3.2",
    "torch_index_url": "https://repo.amd.com/rocm/whl-multi-arch/",
    "sdk_index_url": "https://repo.amd.com/rocm/whl-multi-arch/",
    "torch_version": "2.12.0",
    "extra_ca_certs": [],
}


def make_inputs(arches, **overrides):
    """The complete _image_build_rocm dict for the first build of ``arches``."""
    build = rocm_build_matrix(arches)[0]
    inputs = dict(COMMON_INPUTS)
    inputs.update(
        arch_list=build["arch_list"],
        vllm_source=build["vllm_source"],
        deps_image=f"aic-stack-rocm-base:rocm7.14.0-torch2.12.0-nixl1.3.2-{build['suffix']}-0123456789ab",
    )
    inputs.update(overrides)
    return inputs
