# Copyright: aic.stack contributors
# Apache-2.0
"""Profiles and arms of the cliff benchmark: every profile key with its default, the built-in profiles, the
arms as plan overrides, and the validation of overrides (errors name the key). The cliff_* filters import this.
"""

from __future__ import annotations

import copy
import math

from ansible_collections.aic.stack.plugins.module_utils.coerce import (
    as_bool,
    as_choice,
    as_float,
    as_int,
    as_list,
    as_str,
)


class CliffConfigError(ValueError):
    """Invalid profile, override or arm; the message names the key."""


PREFIX_MODES = ("shared", "per_client")

# Every profile key and its default (Makefile/run_cliff.py defaults, FACTS §7/§8). A profile only lists what
# differs from these.
BASE_PROFILE = {
    "description": "",
    # prefix_mode: "shared" = one prefix for every client (L2 never touched); "per_client" = a distinct prefix per
    # client, so the working set is c x prefix KV.
    "prefix_mode": "per_client",
    "concurrency": [1, 2, 4, 8, 16, 32, 48, 64, 80, 100, 128, 160, 200, 250],
    "iterations": 3,
    "isl": 20000,  # prompt tokens per request (prefix + "Q:" suffix), exact with the tokenizer
    "prefix_tokens": 18000,  # tokens of the (shared or per-client) prefix, exact
    "max_tokens": 1,
    "warmup_iters": 1,
    # Warm every concurrency level (seeds the c per-client prefixes) instead of the lowest one only.
    "warmup_at_each_c": True,
    # After warmup: wait until the LMCache store/L2 counters stop moving for drain_settle_s, at most
    # drain_bound_s (replaces upstream's fixed 300 s post-warmup sleep).
    "drain_bound_s": 300.0,
    "drain_settle_s": 10.0,
    "drain_interval_s": 2.0,
    # Around each measured burst: wait for vLLM's query counters to settle before reading them (upstream: 0.5 s
    # poll, 10 s max).
    "metrics_settle_s": 1.0,
    "metrics_bound_s": 10.0,
    "metrics_interval_s": 0.5,
    "request_timeout_s": 900.0,
    "seed": 0,
    "cliff_drop_pct": 10.0,
    "cliff_p95_factor": 2.0,
    "arms": ["vram", "dram", "nvme"],
    # Deployment knobs the caller applies per arm (None = the plan's own value).
    "model": None,
    "gpu_memory_utilization": None,
    "l1_size_gb": None,
    # The arms' vLLM containers run without their Docker healthcheck (aic_vllm_healthcheck_interval; None = the
    # plan's own value): its 1-token completion every few seconds lands in the very prefix-cache counters the
    # ladder measures, and keeps them from ever settling, so every drain wait ran to its bound.
    "vllm_healthcheck_interval": 0,
    "slurm_time": "",
}

PROFILES = {
    # make cliff-spur-l2: working set 32 x 18k tokens of per-client prefix against an 8 GB L1, so L2 (NVMe via
    # NIXL POSIX) must serve the second iteration.
    "cliff_spur_l2": {
        "description": "SPUR L2 check: per-client prefixes at c=32 overflow an 8 GB L1 into NVMe",
        "prefix_mode": "per_client",
        "concurrency": [32],
        "iterations": 2,
        "model": "Qwen/Qwen2.5-3B-Instruct",
        "gpu_memory_utilization": 0.40,
        "l1_size_gb": 8.0,
        "arms": ["nvme"],
        "slurm_time": "03:00:00",
    },
    # make cliff-kvd: one shared prefix, ladder 1..250.
    "cliff_kvd": {
        "description": "Shared-prefix concurrency ladder 1..250, every arm",
        "prefix_mode": "shared",
        "concurrency": [1, 8, 32, 64, 128, 250],
        "iterations": 2,
        "slurm_time": "02:00:00",
    },
}

# Arms as data: plan overrides (real aic_* plan variables) the caller applies before running the ladder.
# ``lmcache`` False means vLLM runs without the LMCache connector (GPU prefix cache only).
ARMS = {
    "vram": {
        "description": "GPU prefix cache only (vLLM without the LMCache connector)",
        "lmcache": False,
        "plan_overrides": {"aic_lmcache_l2_backend": "none"},
    },
    "dram": {
        "description": "LMCache L1 in host DRAM, no L2",
        "lmcache": True,
        "plan_overrides": {"aic_lmcache_l2_backend": "none"},
    },
    "nvme": {
        "description": "LMCache L1 in DRAM plus L2 on NVMe through NIXL POSIX",
        "lmcache": True,
        "plan_overrides": {"aic_lmcache_l2_backend": "nixl_posix"},
    },
}

# plan.DEFAULTS["aic_lmcache_shm_size_gb"]; kept here so this module needs no other module_utils but metrics and
# coerce.
DEFAULT_SHM_SIZE_GB = 2

_INT_KEYS = {"iterations": 1, "isl": 2, "prefix_tokens": 1, "max_tokens": 1, "warmup_iters": 0, "seed": 0}
_OPTIONAL_INT_KEYS = {"vllm_healthcheck_interval": 0}
_FLOAT_KEYS = {
    "drain_bound_s": 0.0,
    "drain_settle_s": 0.0,
    "drain_interval_s": 0.001,
    "metrics_settle_s": 0.0,
    "metrics_bound_s": 0.0,
    "metrics_interval_s": 0.001,
    "request_timeout_s": 0.001,
    "cliff_drop_pct": 0.0,
    "cliff_p95_factor": 1.0,
}
_OPTIONAL_FLOAT_KEYS = {"gpu_memory_utilization": (0.01, 1.0), "l1_size_gb": (0.001, 65536.0)}
_STR_KEYS = ("description", "slurm_time")


def is_default(value):
    """True when a value means "use the default": None or an empty/blank string.

    An empty *list* is not "default": ``concurrency: []`` is an error, not a silent fallback.
    """
    return value is None or (isinstance(value, str) and value.strip() == "")


def profile_name(name):
    """Canonical profile name: ``cliff-spur-l2`` and ``cliff_spur_l2`` are the same profile."""
    return str(name).strip().replace("-", "_")


def _int(key, value, minimum):
    # Signed strings and integral floats (2.0 from a CSV/JSON) are integers here.
    return as_int(key, value, minimum, error=CliffConfigError, parse="signed", integral_floats=True)


def _float(key, value, minimum, maximum=None):
    return as_float(
        key,
        value,
        minimum,
        maximum,
        error=CliffConfigError,
        parse="number",
        finite=True,
        messages={"range": "{field}: must be between {minimum:g} and {maximum:g}, got {number:g}"},
    )


def _bool(key, value):
    return as_bool(key, value, error=CliffConfigError)


def _split(value, key, what, convert=None):
    """A non-empty list from a list/tuple, a comma/space separated string (``"1,8,32"``, ``"dram nvme"``) or one
    other value; ``what`` names the list in the error for an empty one."""
    return as_list(
        key,
        value,
        ", ",
        error=CliffConfigError,
        scalar=True,
        convert=convert,
        empty=False,
        message=f"{{field}}: the {what} is empty",
    )


def parse_concurrency(value, key="concurrency"):
    """Validate a concurrency ladder: a non-empty list of distinct integers >= 1, returned sorted ascending."""
    items = _split(value, key, "concurrency ladder")
    ladder = []
    for item in items:
        level = as_int(
            key,
            item,
            1,
            error=CliffConfigError,
            message="{field}: {value!r} is not an integer concurrency",
            messages={"minimum": "{field}: concurrency must be at least 1, got {number}"},
        )
        if level in ladder:
            raise CliffConfigError(f"{key}: concurrency {level} is listed twice")
        ladder.append(level)
    return sorted(ladder)


def parse_arms(value, key="arms"):
    """Validate an arm list such as ``AIC_CLIFF_ARMS="dram,nvme"``; returns the names in the given order."""
    items = _split(value, key, "arm list", convert=lambda item: str(item).strip())
    arms = []
    for item in items:
        as_choice(
            key, item, ARMS, error=CliffConfigError, message="{field}: unknown arm {value!r} (choose from {choices})"
        )
        if item in arms:
            raise CliffConfigError(f"{key}: arm {item!r} is listed twice")
        arms.append(item)
    return arms


def _validate_value(key, value):
    if key == "concurrency":
        return parse_concurrency(value)
    if key == "arms":
        return parse_arms(value)
    if key == "prefix_mode":
        return as_choice(
            key, as_str(key, value, error=CliffConfigError, convert=True), PREFIX_MODES, error=CliffConfigError
        )
    if key in _INT_KEYS:
        return _int(key, value, _INT_KEYS[key])
    if key in _OPTIONAL_INT_KEYS:
        return None if is_default(value) else _int(key, value, _OPTIONAL_INT_KEYS[key])
    if key in _FLOAT_KEYS:
        return _float(key, value, _FLOAT_KEYS[key])
    if key in _OPTIONAL_FLOAT_KEYS:
        return _float(key, value, *_OPTIONAL_FLOAT_KEYS[key])
    if key == "warmup_at_each_c":
        return _bool(key, value)
    if key == "model":
        return as_str(key, value, error=CliffConfigError, convert=True, spaces=False)
    if key in _STR_KEYS:
        return as_str(
            key, value, error=CliffConfigError, strip=False, message="{field}: expected a string, got {value!r}"
        )
    raise CliffConfigError(f"{key}: unknown profile key")  # pragma: no cover - keys are checked first


def _merge(profile, layer, source):
    """Merge ``layer`` over ``profile``: unknown keys are errors, empty values keep what is there."""
    for key, value in (layer or {}).items():
        if key not in BASE_PROFILE:
            raise CliffConfigError(
                f"{key}: unknown cliff profile key in {source} (known keys: {', '.join(sorted(BASE_PROFILE))})"
            )
        if is_default(value):
            continue
        profile[key] = _validate_value(key, value)


def merge_overrides(site=None, operator=None):
    """The overrides of a run: the site's (the inventory's ``cliff_bench_site_overrides``) with the operator's
    (``cliff_bench_overrides``, e.g. ``make CLIFF_*``) over them, where an empty operator value keeps the site's or
    the profile's default. Keys and values are checked later, by :func:`resolve_profile`."""
    for source, layer in (("site overrides", site), ("overrides", operator)):
        if layer is not None and not isinstance(layer, dict):
            raise CliffConfigError(f"{source}: expected a mapping of profile keys, got {layer!r}")
    merged = dict(site or {})
    merged.update({key: value for key, value in (operator or {}).items() if not is_default(value)})
    return merged


def available_profiles(user_profiles=None):
    """Names of the built-in plus user-defined profiles."""
    return sorted(set(PROFILES) | {profile_name(n) for n in (user_profiles or {})})


def resolve_profile(name, overrides=None, user_profiles=None):
    """The complete, validated profile ``name`` with ``overrides`` merged over it.

    Layers, later wins: :data:`BASE_PROFILE`, the built-in profile of that name (if any), the user-defined
    profile of that name from ``user_profiles`` (``{name: {key: value}}``; a user profile may say
    ``extends: <builtin>`` to start from another built-in), then ``overrides``. In every layer an empty string
    or None means "keep the default". Unknown keys and bad values raise :class:`CliffConfigError` naming the key.
    """
    canonical = profile_name(name)
    users = {profile_name(k): dict(v or {}) for k, v in (user_profiles or {}).items()}
    if canonical not in PROFILES and canonical not in users:
        raise CliffConfigError(
            f"profile: unknown cliff profile {name!r} (choose from {', '.join(available_profiles(user_profiles))})"
        )
    profile = copy.deepcopy(BASE_PROFILE)
    user = users.get(canonical, {})
    extends = user.pop("extends", "")
    base_name = profile_name(extends or canonical)
    if base_name in PROFILES:
        _merge(profile, PROFILES[base_name], f"profile {base_name}")
    elif not is_default(extends):
        raise CliffConfigError(f"extends: unknown built-in profile {base_name!r} (choose from {', '.join(PROFILES)})")
    _merge(profile, user, f"user profile {canonical}")
    _merge(profile, overrides, "overrides")
    if profile["prefix_tokens"] >= profile["isl"]:
        raise CliffConfigError(
            f"prefix_tokens: must be smaller than isl ({profile['prefix_tokens']} >= {profile['isl']}); "
            "the rest of each prompt is its unique suffix"
        )
    profile["name"] = canonical
    return profile


def arm_plan_overrides(profile, arm, current=None):
    """Plan variables (``aic_*``) the caller applies for ``arm`` under ``profile``.

    The arm's own overrides, plus the profile's model / GPU memory utilisation / vLLM healthcheck interval, plus its L1 size for arms that
    use LMCache. Keys the profile leaves at None are omitted (the plan keeps its value). The plan requires
    ``aic_lmcache_shm_size_gb >= aic_lmcache_l1_size_gb`` (a smaller /dev/shm silently falls back to pickle), so
    when the L1 size is set and the shm size in ``current`` (the inventory's plan inputs; the plan default 2 when
    absent or empty) is smaller, the shm size is raised to the next whole GiB.
    """
    parse_arms([arm], key="arm")
    spec = ARMS[arm]
    overrides = dict(spec["plan_overrides"])
    if profile.get("model"):
        overrides["aic_vllm_model"] = profile["model"]
    if profile.get("gpu_memory_utilization") is not None:
        overrides["aic_vllm_gpu_memory_utilization"] = profile["gpu_memory_utilization"]
    if profile.get("vllm_healthcheck_interval") is not None:
        overrides["aic_vllm_healthcheck_interval"] = profile["vllm_healthcheck_interval"]
    if spec["lmcache"] and profile.get("l1_size_gb") is not None:
        l1 = profile["l1_size_gb"]
        overrides["aic_lmcache_l1_size_gb"] = l1
        shm = (current or {}).get("aic_lmcache_shm_size_gb")
        shm = DEFAULT_SHM_SIZE_GB if is_default(shm) else float(shm)
        if shm < l1:
            overrides["aic_lmcache_shm_size_gb"] = math.ceil(l1)
    return overrides


def arm_uses_lmcache(arm):
    parse_arms([arm], key="arm")
    return ARMS[arm]["lmcache"]
