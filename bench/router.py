#!/usr/bin/env python3
# Copyright: aic.stack contributors
# Apache-2.0
"""What the job's router does to the KV-cache cliff ladder, on the local stack, side by side in one run:

  direct        the ladder sent to one vLLM instance (no router on the path), its counters alone;
  cache_aware   the same ladder through the job's vllm-router (policy cache_aware) in front of two instances;
  round_robin   the same through the router with policy round_robin (the router is recreated, nothing else).

The stack is deployed once with two vLLM instances sharing one LMCache (in its PID namespace) and the router
(deploy.yml -e ...), without the vLLM container healthcheck (its 1-token completions land in the counters the ladder
reads, as in the cliff benchmark's arms). Each mode runs bench/cliff.py (profile cliff_kvd, arm dram, the local
site's prompt lengths) with its own prompt seed, so no mode finds the prefixes another one stored. Reported per mode,
over the measured bursts: prompt throughput, p50 and p95 latency, vLLM's own (L1) and external (LMCache) prefix-cache
hit rates, and the ratio of each to direct.

  .venv/bin/python bench/router.py [--concurrency 1,2,4] [--iterations 2] [-i inventories/local]

Results: logs/bench-router/<UTC time>/results.json and results.md (the table printed at the end); each mode's cliff
results (CSV, JSON, plots) under <mode>/. The stack is left deployed with the two instances and the router
(make deploy brings the default stack back).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".venv", "bin")
INSTANCES = ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]
ROUTER = "http://127.0.0.1:30000"
LMCACHE = "http://127.0.0.1:8080"
STACK = {
    "aic_vllm_instances": 2,
    "aic_vllm_pid_mode": "lmcache",
    "aic_vllm_healthcheck_interval": 0,
    "aic_router_enabled": True,
}
MODES = ("direct", "cache_aware", "round_robin")
COLUMNS = ("throughput_tok_s_prompt", "p50_latency_s", "p95_latency_s", "l1_hit_rate_pct", "ext_hit_rate_pct")


def run(cmd, what):
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg")}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout


def deploy(inventory, policy):
    extra = json.dumps({**STACK, "aic_router_policy": policy})
    run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, "deploy.yml", "-e", extra], f"deploy ({policy})")


def ladder(mode, seed, args, out):
    urls = INSTANCES[:1] if mode == "direct" else INSTANCES
    cmd = [os.path.join(BIN, "python"), os.path.join(ROOT, "bench", "cliff.py"), "--profile", "cliff_kvd",
           "--arm", "dram", "--lmcache-url", LMCACHE, "--results-dir", out,
           "--set", f"seed={seed}", "--set", f"concurrency={args.concurrency}", "--set", f"iterations={args.iterations}",
           "--set", f"isl={args.isl}", "--set", f"prefix_tokens={args.prefix_tokens}",
           "--set", "drain_bound_s=60", "--set", "drain_settle_s=3"]  # fmt: skip
    cmd += [f"--vllm-url={u}" for u in urls]
    if mode != "direct":
        cmd += ["--target-url", ROUTER]
    run(cmd, f"the ladder ({mode})")
    with open(os.path.join(out, "cliff-results.csv"), encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def summary(rows):
    """Medians over the measured bursts (every concurrency and iteration); None where a column is empty."""
    out = {}
    for column in COLUMNS:
        values = [float(r[column]) for r in rows if r.get(column) not in (None, "")]
        out[column] = statistics.median(values) if values else None
    out["errors"] = sum(int(r["err_count"]) for r in rows)
    out["bursts"] = len(rows)
    return out


def ratio(value, base):
    return None if value is None or not base else value / base


def table(results):
    head = "| mode | " + " | ".join(COLUMNS) + " | errors |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 2)]
    base = results["direct"]
    for mode in MODES:
        cells = []
        for column in COLUMNS:
            value, r = results[mode][column], ratio(results[mode][column], base[column])
            cells.append("n/a" if value is None else f"{value:.3f}" + ("" if r is None else f" ({r:.2f}x)"))
        lines.append(f"| {mode} | " + " | ".join(cells) + f" | {results[mode]['errors']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory", default="inventories/local")
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--isl", type=int, default=200)
    ap.add_argument("--prefix-tokens", type=int, default=128)
    args = ap.parse_args(argv)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = os.path.join(ROOT, "logs", "bench-router", stamp)
    os.makedirs(out, exist_ok=True)
    results = {}
    for seed, mode in enumerate(MODES, start=1):
        deploy(args.inventory, "round_robin" if mode == "round_robin" else "cache_aware")
        results[mode] = summary(ladder(mode, seed * 1000, args, os.path.join(out, mode)))
        print(f"{mode}: {results[mode]}", flush=True)
    doc = {"stack": STACK, "concurrency": args.concurrency, "iterations": args.iterations, "isl": args.isl,
           "prefix_tokens": args.prefix_tokens, "results": results}  # fmt: skip
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
    text = table(results)
    with open(os.path.join(out, "results.md"), "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
    print(text)
    print(f"results: {out}")
    return 1 if any(r["errors"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
