# aic.stack rocm flavour: dependency base image (ROCm SDK, torch, UCX, NIXL) for gfx942;gfx950.
# Rendered by roles/image_build from Dockerfile.rocm-base.j2; every pin below is a build arg.
ARG ROCM_BASE_IMAGE=rocm/dev-ubuntu-24.04:7.14.0-full
FROM ${ROCM_BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/aic/bin:$PATH

# Build dependencies. libopenmpi3t64: ROCm torch has a NEEDED entry on libmpi_cxx.so.40. libboost-dev only (not
# boost-all). The PEP 668 marker goes: this image is the Python environment, pip installs system-wide.
RUN set -eux; \
    export DEBIAN_FRONTEND=noninteractive; \
    apt-get update; \
    apt-get install -y --no-install-recommends \
        autoconf automake build-essential ca-certificates ccache cmake curl git libboost-dev libibverbs-dev \
        libnuma-dev libopenmpi3t64 librdmacm-dev libtool ninja-build nvme-cli pkg-config python3-dev python3-pip \
        rdma-core; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*; \
    rm -f /usr/lib/python3*/EXTERNALLY-MANAGED; \
    ldconfig -p | grep 'libmpi_cxx\.so\.40' >/dev/null

# Helpers for this image and the stack image:
#   aic-env CMD...                run CMD with /opt/aic/env.sh sourced (the entrypoint of both images)
#   aic-jobs                      build parallelism: $BUILD_JOBS, or when empty nproc but at most one job per
#                                 4 GiB of available memory (a hipcc job for several arches takes GiBs); never
#                                 unbounded
#   aic-fetch-src URL REF DIR     shallow https fetch of one tag, branch or commit into DIR
#   aic-apply-patches SERIES DIR  git apply SERIES/*.patch to DIR in lexical order; a failing patch or an
#                                 empty series fails (DIR may be a plain tree such as site-packages)
RUN set -eux; \
    mkdir -p /opt/aic/bin /opt/aic/patches /opt/aic/python /opt/aic/wheels; \
    printf '%s\n' '#!/bin/sh' 'set -eu' '. /opt/aic/env.sh' 'exec "$@"' > /opt/aic/bin/aic-env; \
    printf '%s\n' '#!/bin/sh' 'set -eu' 'jobs=${BUILD_JOBS:-}' \
        'if [ -z "$jobs" ]; then' \
        '  jobs=$(nproc)' \
        '  kib=$(sed -n "s/^MemAvailable: *\([0-9][0-9]*\) kB$/\1/p" "${AIC_JOBS_MEMINFO:-/proc/meminfo}")' \
        '  if [ -n "$kib" ] && [ $((kib / 4194304)) -lt "$jobs" ]; then jobs=$((kib / 4194304)); fi' \
        '  if [ "$jobs" -lt 1 ]; then jobs=1; fi' \
        '  echo "aic-jobs: BUILD_JOBS unset: $jobs job(s) ($(nproc) cores, one job per 4 GiB of available memory)" >&2' \
        'fi' \
        'case "$jobs" in ""|*[!0-9]*|0*) echo "aic-jobs: BUILD_JOBS must be a positive integer, got: $jobs" >&2; exit 1;; esac' \
        'echo "$jobs"' > /opt/aic/bin/aic-jobs; \
    printf '%s\n' '#!/bin/sh' 'set -eu' 'url=$1 ref=$2 dir=$3' \
        'case "$url" in https://*) ;; *) echo "aic-fetch-src: $url is not an https URL" >&2; exit 1;; esac' \
        'git init -q "$dir"' \
        'git -C "$dir" remote add origin "$url"' \
        'git -C "$dir" fetch -q --depth 1 origin "$ref"' \
        'git -C "$dir" checkout -q FETCH_HEAD' \
        'echo "aic-fetch-src: $url $ref is $(git -C "$dir" rev-parse HEAD)"' > /opt/aic/bin/aic-fetch-src; \
    printf '%s\n' '#!/bin/sh' 'set -eu' 'series=$1 target=$2 n=0' 'export LC_ALL=C' \
        'for p in "$series"/*.patch; do' \
        '  [ -f "$p" ] || continue' \
        '  echo "aic-apply-patches: $p"' \
        '  git -C "$target" apply --verbose "$p"' \
        '  n=$((n + 1))' \
        'done' \
        '[ "$n" -gt 0 ] || { echo "aic-apply-patches: no *.patch in $series" >&2; exit 1; }' \
        'echo "aic-apply-patches: $n patch(es) applied to $target"' > /opt/aic/bin/aic-apply-patches; \
    chmod 0755 /opt/aic/bin/aic-env /opt/aic/bin/aic-jobs /opt/aic/bin/aic-fetch-src /opt/aic/bin/aic-apply-patches

# torch + torchvision from the configured index (one device extra per arch, e.g. torch[device-gfx950]; an index
# without such extras only warns) and the ROCm SDK's devel package. /opt/aic/constraints.txt pins what was
# installed, so no later pip run can replace torch or the SDK.
ARG PYTORCH_ROCM_ARCH=gfx942;gfx950
ARG ROCM_VERSION=7.14.0
ARG TORCH_INDEX_URL=https://repo.amd.com/rocm/whl-multi-arch/
ARG ROCM_SDK_INDEX_URL=https://repo.amd.com/rocm/whl-multi-arch/
ARG TORCH_VERSION=2.12.0
RUN set -eux; \
    test -n "$PYTORCH_ROCM_ARCH"; \
    extras=""; \
    for arch in ${PYTORCH_ROCM_ARCH//;/ }; do extras="${extras:+$extras,}device-$arch"; done; \
    python3 -m pip install --index-url "$TORCH_INDEX_URL" --extra-index-url "$ROCM_SDK_INDEX_URL" \
        "torch[$extras]==$TORCH_VERSION" torchvision "rocm[devel]==$ROCM_VERSION" "rocm-sdk-devel==$ROCM_VERSION"; \
    python3 -m pip uninstall -y amdsmi; \
    python3 -m pip list --format=freeze | grep -iE '^(torch|torchvision|triton|pytorch-triton-rocm|rocm[a-z0-9_-]*)==' > /opt/aic/constraints.txt; \
    cat /opt/aic/constraints.txt; \
    printf '%s\n' "PYTORCH_ROCM_ARCH=$PYTORCH_ROCM_ARCH" "ROCM_VERSION=$ROCM_VERSION" "TORCH_VERSION=$TORCH_VERSION" > /opt/aic/base-pins

# ROCM_PATH, CMAKE_PREFIX_PATH and the compilers come from the SDK's own path CLI, computed here and written to
# /opt/aic/env.sh. amdclang is CC/CXX for Triton's JIT. The SDK's amd_smi is registered with a .pth file pointing
# at its directory: a pip-installed copy cannot find libamd_smi.so, so any pip amdsmi is removed.
RUN set -eux; \
    rocm-sdk init --quiet; \
    root="$(rocm-sdk path --root)"; \
    cmake_dir="$(rocm-sdk path --cmake)"; \
    bin="$(rocm-sdk path --bin)"; \
    test -d "$root"; \
    test -d "$cmake_dir"; \
    test -x "$bin/amdclang"; \
    test -x "$bin/amdclang++"; \
    smi="$root/share/amd_smi"; \
    if [ ! -f "$smi/amdsmi/__init__.py" ]; then \
        smi="$(python3 -c 'import os, _rocm_sdk_core; print(os.path.join(os.path.dirname(_rocm_sdk_core.__file__), "share", "amd_smi"))')"; \
    fi; \
    test -f "$smi/amdsmi/__init__.py" || { echo "no amd_smi package in the ROCm SDK ($root/share/amd_smi, $smi)" >&2; exit 1; }; \
    site="$(python3 -c 'import os, rocm_sdk; print(os.path.dirname(os.path.dirname(rocm_sdk.__file__)))')"; \
    echo "$smi" > "$site/aic-amd-smi.pth"; \
    echo /opt/aic/python > "$site/aic-python.pth"; \
    { \
        echo "# Written at image build from the path CLI of the ROCm SDK (rocm-sdk path); sourced by /opt/aic/bin/aic-env."; \
        echo "export ROCM_PATH='$root'"; \
        echo "export ROCM_HOME='$root'"; \
        echo "export CMAKE_PREFIX_PATH='$cmake_dir'"; \
        echo "export CC='$bin/amdclang'"; \
        echo "export CXX='$bin/amdclang++'"; \
        echo "export AIC_AMD_SMI_DIR='$smi'"; \
    } > /opt/aic/env.sh; \
    ln -sf /opt/aic/env.sh /etc/profile.d/aic-rocm.sh; \
    cat /opt/aic/env.sh; \
    . /opt/aic/env.sh; \
    python3 -c "import os, sys, amdsmi; want = os.path.realpath(os.environ['AIC_AMD_SMI_DIR']) + os.sep; got = os.path.realpath(amdsmi.__file__); sys.exit(0 if got.startswith(want) else 'amdsmi is imported from ' + got + ', not from the ROCm SDK under ' + want)"; \
    python3 -c "import sys, torch; print('torch', torch.__version__, 'hip', torch.version.hip); sys.exit(0 if torch.version.hip else 'torch is not a ROCm build')"

# UCX (ROCm fork) and NIXL at NIXL_REF with its patch series (AIS_MT hipFile backend). Host code is built with
# gcc; HIP is found through ROCM_PATH. Libraries are registered in ld.so.conf.d, not LD_LIBRARY_PATH.
ARG UCX_GIT_URL=https://github.com/ROCm/ucx.git
ARG UCX_REF=v1.19.x
ARG NIXL_GIT_URL=https://github.com/ai-dynamo/nixl.git
ARG NIXL_REF=v1.3.2
ARG NIXL_BUILD_TOOLS="meson==1.12.1 meson-python==0.22.1 pybind11==3.1.0"
ARG BUILD_JOBS=
COPY patches/nixl/${NIXL_REF}/ /opt/aic/patches/nixl/
RUN set -eux; \
    jobs="$(aic-jobs)"; \
    . /opt/aic/env.sh; \
    export CC=gcc CXX=g++; \
    python3 -m pip install -c /opt/aic/constraints.txt $NIXL_BUILD_TOOLS; \
    aic-fetch-src "$UCX_GIT_URL" "$UCX_REF" /opt/aic/src/ucx; \
    cd /opt/aic/src/ucx; \
    ./autogen.sh; \
    ./configure --prefix=/opt/rocnixl-ucx --with-rocm="$ROCM_PATH" --with-verbs --with-dm --enable-mt \
        --enable-optimizations; \
    make -j"$jobs"; \
    make install; \
    aic-fetch-src "$NIXL_GIT_URL" "$NIXL_REF" /opt/aic/src/nixl; \
    aic-apply-patches /opt/aic/patches/nixl /opt/aic/src/nixl; \
    cd /opt/aic/src/nixl; \
    grep -F wheel_variant meson_options.txt >/dev/null || { echo "NIXL $NIXL_REF has no wheel_variant meson option" >&2; exit 1; }; \
    meson_opts="-Dwheel_variant=rocm -Drocm_ais_path=/opt/rocm -Ducx_path=/opt/rocnixl-ucx -Ddisable_gds_backend=true -Dbuild_tests=false -Dbuild_examples=false -Ddisable_plugins=OBJ,AZURE_BLOB"; \
    meson setup build --prefix=/opt/nixl --buildtype=release $meson_opts; \
    ninja -C build -j "$jobs" install; \
    libdir=/opt/nixl/lib/x86_64-linux-gnu; \
    find build -name 'libprometheus-cpp*.so*' -exec cp -P {} "$libdir/" \; ; \
    find build -name 'libcivetweb*.so*' -exec cp -P {} "$libdir/" \; ; \
    printf '%s\n' "$libdir" /opt/nixl/lib /opt/rocnixl-ucx/lib > /etc/ld.so.conf.d/aic-nixl.conf; \
    ldconfig; \
    test -f "$libdir/plugins/libplugin_AIS_MT.so" || { echo "NIXL built without the AIS_MT plugin (patch series not applied?)" >&2; exit 1; }; \
    exporter="$(find /opt/nixl -name libtelemetry_exporter_prometheus.so -print -quit)"; \
    test -n "$exporter" || { echo "NIXL built without libtelemetry_exporter_prometheus.so" >&2; exit 1; }; \
    deps="$(ldd "$exporter")"; \
    case "$deps" in *"not found"*) echo "$deps" >&2; echo "unresolved libraries for $exporter" >&2; exit 1;; esac; \
    wheel_args=""; \
    for opt in $meson_opts; do wheel_args="$wheel_args -Csetup-args=$opt"; done; \
    python3 -m pip wheel --no-build-isolation --no-deps -w /opt/aic/wheels/nixl $wheel_args .; \
    python3 -m pip install --no-deps /opt/aic/wheels/nixl/*.whl; \
    if ! python3 -c 'import nixl' 2>/dev/null; then \
        python3 -c 'import nixl_rocm'; \
        mkdir -p /opt/aic/python/nixl; \
        printf '%s\n' '"""aic.stack: nixl is the ROCm build, nixl_rocm."""' 'import sys' 'import nixl_rocm' \
            'sys.modules[__name__] = nixl_rocm' > /opt/aic/python/nixl/__init__.py; \
    fi; \
    python3 -c 'import nixl; print("nixl", nixl.__file__)'; \
    echo "NIXL_REF=$NIXL_REF" >> /opt/aic/base-pins; \
    cd /; \
    rm -rf /opt/aic/src
ENV NIXL_PLUGIN_DIR=/opt/nixl/lib/x86_64-linux-gnu/plugins

ARG ROCM_BASE_IMAGE
ARG AIC_INPUTS=
LABEL ai.aic.flavour="rocm" \
      ai.aic.rocm="${ROCM_VERSION}" \
      ai.aic.rocm-base-image="${ROCM_BASE_IMAGE}" \
      ai.aic.torch="${TORCH_VERSION}" \
      ai.aic.nixl="${NIXL_REF}" \
      ai.aic.arch="${PYTORCH_ROCM_ARCH}" \
      ai.aic.base-inputs="${AIC_INPUTS}"
ENTRYPOINT ["/opt/aic/bin/aic-env"]
CMD ["bash"]
