# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Prometheus text exposition helpers built on ``prometheus_client``.

Notes on ``prometheus_client.parser.text_string_to_metric_families``:

* counter *family* names lose their ``_total`` suffix
  (``vllm:prefix_cache_hits_total`` -> family ``vllm:prefix_cache_hits``) while the
  *sample* keeps the full exposed name;
* histogram/summary samples are named ``<family>_bucket``, ``_count``, ``_sum``...;
* names may contain colons (``vllm:``), which the parser accepts.

Modules must check :data:`HAS_PROMETHEUS_CLIENT` and fail with
``missing_required_lib('prometheus_client')`` and :data:`PROMETHEUS_CLIENT_IMPORT_ERROR`.
"""

from __future__ import annotations

import traceback

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    HAS_PROMETHEUS_CLIENT = False
    PROMETHEUS_CLIENT_IMPORT_ERROR = traceback.format_exc()
    text_string_to_metric_families = None
else:
    HAS_PROMETHEUS_CLIENT = True
    PROMETHEUS_CLIENT_IMPORT_ERROR = None


class MetricsParseError(ValueError):
    """The text is not valid Prometheus exposition format."""


def parse(text):
    """Parse exposition ``text`` and return a list of ``prometheus_client`` ``Metric`` families.

    Raises :class:`MetricsParseError` on malformed input and ``RuntimeError`` if
    ``prometheus_client`` is not installed.
    """
    if not HAS_PROMETHEUS_CLIENT:
        raise RuntimeError("prometheus_client is required to parse Prometheus metrics")
    try:
        # The parser is a generator: materialise it here so errors surface now.
        return list(text_string_to_metric_families(text or ""))
    except Exception as exc:  # noqa: BLE001 - the parser raises ValueError, TypeError, IndexError...
        raise MetricsParseError(f"invalid Prometheus exposition text: {exc}")


def _families(text_or_families):
    if isinstance(text_or_families, (str, bytes)):
        if isinstance(text_or_families, bytes):
            text_or_families = text_or_families.decode("utf-8", "replace")
        return parse(text_or_families)
    return list(text_or_families)


def family_names(text):
    """Sorted list of all family names (as normalised by ``prometheus_client``)."""
    return sorted({f.name for f in _families(text)})


def sample_names(text):
    """Set of every sample name exposed, e.g. ``{'vllm:prefix_cache_hits_total', ...}``."""
    return {s.name for f in _families(text) for s in f.samples}


def families_with_prefix(text, prefix):
    """Sorted list of family names starting with ``prefix`` (e.g. ``vllm:`` or ``lmcache_mp_``)."""
    return sorted({f.name for f in _families(text) if f.name.startswith(prefix)})


def sample_value(text, name, labels=None):
    """Value of the sample(s) called ``name``; ``None`` when no sample matches.

    ``name`` is the exposed sample name (``vllm:prefix_cache_hits_total``); for counters the
    family name without ``_total`` is accepted too. ``labels`` (a dict) selects the samples
    whose labels include all those pairs; with several matching samples (or ``labels`` None)
    the values are summed, e.g. over all ``engine`` label values.
    """
    families = _families(text)
    wanted = {str(k): str(v) for k, v in (labels or {}).items()}
    candidates = (name, name + "_total")
    for candidate in candidates:
        matched = [
            s.value
            for f in families
            for s in f.samples
            if s.name == candidate and all(s.labels.get(k) == v for k, v in wanted.items())
        ]
        if matched:
            return float(sum(matched))
        # Only fall back to ``<name>_total`` when ``name`` itself is not exposed at all.
        if any(s.name == candidate for f in families for s in f.samples):
            return None
    return None
