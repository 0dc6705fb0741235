# Copyright: aic.stack contributors
# Apache-2.0
"""The cliff finder: where throughput drops or p95 latency jumps along an arm's concurrency ladder."""

from __future__ import annotations

import statistics


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
    for arm in arms_in(rows):
        arm_rows = [r for r in rows if r["arm"] == arm]
        tput = [(r["concurrency"], as_number(r.get("throughput_tok_s_prompt"))) for r in arm_rows]
        p95 = [(r["concurrency"], as_number(r.get("p95_latency_s"))) for r in arm_rows]
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


def as_number(value):
    if value is None or value == "":
        return None
    return float(value)


def arms_in(rows):
    seen = []
    for row in rows:
        if row["arm"] not in seen:
            seen.append(row["arm"])
    return seen
