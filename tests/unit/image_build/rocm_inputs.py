"""Shared build inputs for the rocm image tests (plugins/filter/rocm.py and the rocm Dockerfile templates).

A plain module (not conftest.py) so that both test modules can import it by a unique name."""

from __future__ import annotations

from ansible_collections.aic.stack.plugins.filter.rocm import rocm_build_matrix
from ansible_collections.aic.stack.plugins.module_utils.plan import vllm_install_for

# A site's index of vLLM's prebuilt ROCm wheels for its ROCm/torch pair (none is configured by default).
WHEEL_INDEX = "https://wheels.site.example/vllm/rocm7.14.0/simple/"

# The pins of the release we implement (FACTS section 1), as the role would put them into _image_build_rocm, with a
# wheel index configured (so that aic_vllm_install auto takes the wheel for a set inside gfx942/gfx950).
COMMON_INPUTS = {
    "version": "0.1.0",
    "base_image": "rocm/dev-ubuntu-24.04:7.14.0-full",
    "rocm_version": "7.14.0",
    "vllm_ref": "v0.26.0",
    "vllm_wheel_index_url": WHEEL_INDEX,
    "lmcache_ref": "v0.5.2",
    "nixl_ref": "v1.3.2",
    "torch_index_url": "https://repo.amd.com/rocm/whl-multi-arch/",
    "sdk_index_url": "https://repo.amd.com/rocm/whl-multi-arch/",
    "torch_version": "2.12.0",
    "extra_ca_certs": [],
}


def make_inputs(arches, install="auto", **overrides):
    """The complete _image_build_rocm dict for the first build of ``arches``, ``install`` being aic_vllm_install
    (resolved as the plan resolves it, with COMMON_INPUTS' wheel index and vLLM ref)."""
    resolved = vllm_install_for(install, arches, COMMON_INPUTS["vllm_wheel_index_url"], COMMON_INPUTS["vllm_ref"])
    build = rocm_build_matrix(arches, resolved)[0]
    inputs = dict(COMMON_INPUTS)
    inputs.update(
        arch_list=build["arch_list"],
        vllm_source=build["vllm_source"],
        deps_image=f"aic-stack-rocm-base:rocm7.14.0-torch2.12.0-nixl1.3.2-{build['suffix']}-0123456789ab",
    )
    inputs.update(overrides)
    return inputs
