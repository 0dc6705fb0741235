# aic.stack rocm flavour: vLLM (source) + LMCache for gfx950 on the dependency base image.
# Rendered by roles/image_build from Dockerfile.rocm.j2; every pin below is a build arg.
ARG AIC_BASE_IMAGE=aic-stack-rocm-base:rocm7.14.0-torch2.12.0-nixl1.3.2-gfx950-0123456789ab
FROM ${AIC_BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The pins this image shares with its base must be the ones the base was built with.
ARG PYTORCH_ROCM_ARCH=gfx950
ARG ROCM_VERSION=7.14.0
ARG NIXL_REF=v1.3.2
RUN set -eux; \
    for pin in "PYTORCH_ROCM_ARCH=$PYTORCH_ROCM_ARCH" "ROCM_VERSION=$ROCM_VERSION" "NIXL_REF=$NIXL_REF"; do \
        grep -Fx "$pin" /opt/aic/base-pins >/dev/null || { echo "base image mismatch: $pin, base has:" >&2; cat /opt/aic/base-pins >&2; exit 1; }; \
    done

ARG VLLM_SOURCE=source
ARG VLLM_REF=v0.26.0
ARG BUILD_JOBS=
ARG VLLM_GIT_URL=https://github.com/vllm-project/vllm.git
COPY patches/vllm/${VLLM_REF}/ /opt/aic/patches/vllm/
# vLLM from source at VLLM_REF against the base image's AMD ROCm torch, for PYTORCH_ROCM_ARCH only: shallow fetch;
# setup.py's _is_hip() forced true for VLLM_TARGET_DEVICE=rocm (never a CUDA or CPU build, whatever torch reports
# on the GPU-less build host; the build fails if setup.py has no _is_hip()); the patch series; requirements/rocm.txt
# constrained to the base image's torch (a requirement on another torch fails here instead of replacing it);
# MAX_JOBS from aic-jobs (BUILD_JOBS, or the cores bounded by memory: nproc hipcc jobs run out of memory); compiles
# through ccache (vLLM's setup.py uses it when on PATH; the cache is dropped with the sources, not kept in a layer).
RUN set -eux; \
    test "$VLLM_SOURCE" = source; \
    test -n "$PYTORCH_ROCM_ARCH"; \
    jobs="$(aic-jobs)"; \
    . /opt/aic/env.sh; \
    command -v ccache; \
    export CCACHE_DIR=/tmp/aic-ccache; \
    aic-fetch-src "$VLLM_GIT_URL" "$VLLM_REF" /opt/aic/src/vllm; \
    cd /opt/aic/src/vllm; \
    sed -i 's/^def _is_hip() -> bool:$/&\n    if VLLM_TARGET_DEVICE == "rocm":\n        return True/' setup.py; \
    grep -A1 '^def _is_hip() -> bool:$' setup.py | grep -F 'if VLLM_TARGET_DEVICE == "rocm":' >/dev/null || { echo "vLLM $VLLM_REF: no def _is_hip() in setup.py to force HIP detection" >&2; exit 1; }; \
    aic-apply-patches /opt/aic/patches/vllm /opt/aic/src/vllm; \
    python3 -m pip install -c /opt/aic/constraints.txt -r requirements/rocm.txt; \
    python3 -m pip install -c /opt/aic/constraints.txt "setuptools>=77" setuptools-scm wheel packaging jinja2 cmake ninja; \
    case "${VLLM_REF#v}" in [0-9]*) export VLLM_VERSION_OVERRIDE="${VLLM_REF#v}+rocm";; esac; \
    VLLM_TARGET_DEVICE=rocm PYTORCH_ROCM_ARCH="$PYTORCH_ROCM_ARCH" TORCH_DONT_CHECK_COMPILER_ABI=1 \
        MAX_JOBS="$jobs" CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
        python3 -m pip wheel --no-build-isolation --no-deps -w /tmp/vllm-dist .; \
    ccache --show-stats; \
    python3 -m pip install --no-deps /tmp/vllm-dist/vllm-*.whl; \
    python3 -m pip uninstall -y amdsmi; \
    cd /; \
    rm -rf /opt/aic/src /tmp/vllm-dist /tmp/aic-ccache; \
    python3 -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('vllm._rocm_C') else 'vllm was built without its ROCm kernels (vllm._rocm_C)')"

# LMCache from source at LMCACHE_REF with its patch series, built for HIP. ROCM_TARGET_LST names this build's arches
# for the GPU-less build host (only during this step). CUDA-only packages pulled in by dependencies break imports on
# ROCm and are removed; the ROCm NIXL wheel from the base image is reinstalled in case one of them overwrote it.
ARG BUILD_JOBS=
ARG LMCACHE_GIT_URL=https://github.com/LMCache/LMCache.git
ARG LMCACHE_REF=v0.5.2
COPY patches/lmcache/${LMCACHE_REF}/ /opt/aic/patches/lmcache/
RUN set -eux; \
    test -n "$PYTORCH_ROCM_ARCH"; \
    jobs="$(aic-jobs)"; \
    . /opt/aic/env.sh; \
    aic-fetch-src "$LMCACHE_GIT_URL" "$LMCACHE_REF" /opt/aic/src/lmcache; \
    aic-apply-patches /opt/aic/patches/lmcache /opt/aic/src/lmcache; \
    printf '%s\n' ${PYTORCH_ROCM_ARCH//;/ } > /tmp/rocm_target.lst; \
    cd /opt/aic/src/lmcache; \
    if [ -f requirements/build.txt ]; then python3 -m pip install -c /opt/aic/constraints.txt -r requirements/build.txt; fi; \
    case "${LMCACHE_REF#v}" in [0-9]*) export SETUPTOOLS_SCM_PRETEND_VERSION="${LMCACHE_REF#v}";; esac; \
    ROCM_TARGET_LST=/tmp/rocm_target.lst BUILD_WITH_HIP=1 CXX=hipcc PYTORCH_ROCM_ARCH="$PYTORCH_ROCM_ARCH" \
        MAX_JOBS="$jobs" CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
        python3 -m pip install --no-build-isolation -c /opt/aic/constraints.txt .; \
    cd /; \
    rm -rf /opt/aic/src /tmp/rocm_target.lst; \
    python3 -m pip uninstall -y nixl nixl-cu12 nixl-cu13 cupy-cuda12x cufile-python cuda-pathfinder amdsmi; \
    python3 -m pip install --no-deps --force-reinstall /opt/aic/wheels/nixl/*.whl; \
    python3 -c "import os, sys, amdsmi; want = os.path.realpath(os.environ['AIC_AMD_SMI_DIR']) + os.sep; got = os.path.realpath(amdsmi.__file__); sys.exit(0 if got.startswith(want) else 'amdsmi is imported from ' + got + ', not from the ROCm SDK under ' + want)"; \
    python3 -c "import nixl, lmcache, vllm; print('vllm', vllm.__version__, 'nixl', nixl.__file__, 'lmcache', lmcache.__file__)"

# Baked runtime settings: legacy HIP IPC (cross-container KV sharing), direct-to-GPU safetensors loading, the MI300+
# kernarg fix, and a fixed Python hash seed so that every process of the stack hashes alike.
ENV HSA_ENABLE_IPC_MODE_LEGACY=1 \
    SAFETENSORS_FAST_GPU=1 \
    HIP_FORCE_DEV_KERNARG=1 \
    PYTHONHASHSEED=0

# Declared last: a new version or input hash only rebuilds the label layer.
ARG AIC_BASE_IMAGE
ARG AIC_VERSION=0.1.0
ARG AIC_INPUTS=
LABEL ai.aic.flavour="rocm" \
      ai.aic.version="${AIC_VERSION}" \
      ai.aic.base="${AIC_BASE_IMAGE}" \
      ai.aic.rocm="${ROCM_VERSION}" \
      ai.aic.vllm="${VLLM_REF}" \
      ai.aic.vllm-source="${VLLM_SOURCE}" \
      ai.aic.lmcache="${LMCACHE_REF}" \
      ai.aic.nixl="${NIXL_REF}" \
      ai.aic.arch="${PYTORCH_ROCM_ARCH}" \
      ai.aic.inputs="${AIC_INPUTS}"
ENTRYPOINT ["/opt/aic/bin/aic-env", "python3", "-m", "vllm.entrypoints.openai.api_server"]
