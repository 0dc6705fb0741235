# Copyright: aic.stack contributors
# Apache-2.0
"""Results: the CSV rows, the JSON document, the PNG plots and the HTML report."""

from __future__ import annotations

import base64
import csv
import html
import json
import os
import statistics
import time

from ansible_collections.aic.stack.plugins.plugin_utils.cliff.counters import LMCACHE_COUNTERS, VLLM_COUNTERS, hit_rates
from ansible_collections.aic.stack.plugins.plugin_utils.cliff.finder import arm_cliffs, arms_in, as_number
from ansible_collections.aic.stack.plugins.plugin_utils.cliff.profiles import BASE_PROFILE

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


def csv_value(value):
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
            writer.writerow({k: csv_value(row.get(k)) for k in CSV_COLUMNS})


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
    for arm in arms_in(rows):
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
                values = [as_number(r.get(key)) for r in group if as_number(r.get(key)) is not None]
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
