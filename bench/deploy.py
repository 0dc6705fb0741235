#!/usr/bin/env python3
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""No-op deploy benchmark on a deployed stack (the local one by default): side by side, in one run, --rounds times:

  ping_s        one `ansible -m ansible.builtin.ping` round over the inventory's aic_nodes (the connection floor);
  health_s      playbooks/health.yml alone (the health checks a no-op deploy must still run);
  noop_s        deploy.yml over the deployed stack: the no-op fast path (aic_deploy_fast_path, the default);
  full_noop_s   deploy.yml with -e aic_deploy_fast_path=false: every role runs and changes nothing.

Each round runs the four in that order; the medians are reported with the ratios noop / (ping + health) and
full_noop / noop. Every deploy must report changed=0 (the run fails otherwise: a deploy that changed something is no
no-op). The stack must be deployed and healthy first (make deploy).

  .venv/bin/python bench/deploy.py --rounds 3 [-i inventories/local]

Results: logs/bench-deploy/<UTC time>/results.json and results.md (the table printed at the end).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".venv", "bin")
RECAP = re.compile(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)


def timed(cmd):
    """(seconds, output) of a command run from the repository root; SystemExit naming it when it fails."""
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "ANSIBLE_CALLBACKS_ENABLED": ""}
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
        )
    return seconds, proc.stdout


def changed_count(output):
    """Sum of changed= over the play recap; SystemExit when a host was unreachable or failed."""
    total = 0
    for host, changed, unreachable, failed in RECAP.findall(output):
        if int(unreachable) or int(failed):
            raise SystemExit(f"{host}: unreachable={unreachable} failed={failed}")
        total += int(changed)
    return total


def one_round(inventory):
    ping_s, _out = timed([os.path.join(BIN, "ansible"), "-i", inventory, "aic_nodes", "-m", "ansible.builtin.ping"])
    health_s, _out = timed([os.path.join(BIN, "ansible-playbook"), "-i", inventory, "playbooks/health.yml"])
    noop_s, noop_out = timed([os.path.join(BIN, "ansible-playbook"), "-i", inventory, "deploy.yml"])
    full_s, full_out = timed(
        [os.path.join(BIN, "ansible-playbook"), "-i", inventory, "deploy.yml", "-e", "aic_deploy_fast_path=false"]
    )
    fast = "healthy, unchanged (nothing to do" in noop_out
    return {
        "ping_s": ping_s,
        "health_s": health_s,
        "noop_s": noop_s,
        "full_noop_s": full_s,
        "noop_changed": changed_count(noop_out),
        "full_noop_changed": changed_count(full_out),
        "fast_path_taken": fast,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-i", "--inventory", default="inventories/local")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    # A first deploy makes sure the record matches this checkout (a changed collection takes the full path once).
    timed([os.path.join(BIN, "ansible-playbook"), "-i", args.inventory, "deploy.yml"])
    rounds = [one_round(args.inventory) for _dummy in range(args.rounds)]
    for r in rounds:
        if r["noop_changed"] or r["full_noop_changed"] or not r["fast_path_taken"]:
            raise SystemExit(f"not a no-op round: {r}")
    med = {k: statistics.median(r[k] for r in rounds) for k in ("ping_s", "health_s", "noop_s", "full_noop_s")}
    floor = med["ping_s"] + med["health_s"]
    summary = {
        **{k: round(v, 2) for k, v in med.items()},
        "noop_over_ping_and_health": round(med["noop_s"] / floor, 2),
        "full_noop_over_noop": round(med["full_noop_s"] / med["noop_s"], 2),
    }
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = os.path.join(ROOT, "logs", "bench-deploy", stamp)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump({"inventory": args.inventory, "rounds": rounds, "median": summary}, fh, indent=1)
    table = [
        "| ping round s | health checks s | no-op deploy s | no-op / (ping + health) | every role s | every role / no-op |",
        "|---|---|---|---|---|---|",
        f"| {summary['ping_s']} | {summary['health_s']} | {summary['noop_s']} | {summary['noop_over_ping_and_health']} "
        f"| {summary['full_noop_s']} | {summary['full_noop_over_noop']} |",
    ]
    with open(os.path.join(out_dir, "results.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(table) + "\n")
    print("\n".join(table))
    print(f"results: {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
