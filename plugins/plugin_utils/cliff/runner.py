# Copyright: aic.stack contributors
# Apache-2.0
"""The ladder for one arm: warm-ups, drain waits and measured bursts between two counter reads."""

from __future__ import annotations

import csv
import io
import sys
import time

from ansible_collections.aic.stack.plugins.plugin_utils.cliff.burst import run_burst
from ansible_collections.aic.stack.plugins.plugin_utils.cliff.counters import MetricsReader, counter_delta
from ansible_collections.aic.stack.plugins.plugin_utils.cliff.drain import wait_drained
from ansible_collections.aic.stack.plugins.plugin_utils.cliff.profiles import arm_uses_lmcache, parse_arms
from ansible_collections.aic.stack.plugins.plugin_utils.cliff.prompts import WordPromptBuilder
from ansible_collections.aic.stack.plugins.plugin_utils.cliff.results import CSV_COLUMNS, csv_value, make_row


def _stdout_line(text):
    """The default progress log of :func:`run_arm`: one line on stdout, flushed (a Slurm job's output follows it)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def run_arm(
    profile,
    arm,
    vllm_url,
    model,
    encode,
    lmcache_url=None,
    log=None,
    clock=time.monotonic,
    sleep=time.sleep,
    target_url=None,
):
    """Run the profile's concurrency ladder for ``arm`` (already deployed by the caller); returns CSV rows.

    ``vllm_url``: the vLLM whose counters are read, or a list of them (every instance behind the job's router, summed).
    ``target_url``: where the bursts go (the job's router); default the (first) vLLM itself.

    Per concurrency ``c``: warmup bursts (at every ``c`` when ``warmup_at_each_c``, else only at the lowest),
    then :func:`wait_drained` on LMCache's store/L2 counters (bounded by ``drain_bound_s``), then ``iterations``
    measured bursts, each between two counter reads that wait for vLLM's query counters to settle.
    """
    parse_arms([arm], key="arm")
    log = log or _stdout_line
    reader = MetricsReader(vllm_url, lmcache_url if arm_uses_lmcache(arm) else None)
    target = target_url or reader.vllm_urls[0].removesuffix("/metrics")
    builder = WordPromptBuilder(encode, seed=profile["seed"])
    rows = []

    def settle(read, kind):
        """wait_drained on ``read`` with the profile's ``<kind>_interval_s/_settle_s/_bound_s``."""
        return wait_drained(
            read,
            interval=profile[f"{kind}_interval_s"],
            settle=profile[f"{kind}_settle_s"],
            bound=profile[f"{kind}_bound_s"],
            clock=clock,
            sleep=sleep,
        )

    def settled_counters():
        result = settle(reader.counters, "metrics")
        last = result.samples[-1][1]
        return last if "error" not in last else {}

    def burst(c, run_id):
        prompts = builder.build(profile["prefix_mode"], c, profile["prefix_tokens"], profile["isl"], run_id)
        return run_burst(
            target,
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
            drain = settle(reader.drain_counters, "drain")
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
        writer.writerow({k: csv_value(row.get(k)) for k in CSV_COLUMNS})
    return buf.getvalue()
