#!/usr/bin/env python3
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The venv's compiled-code cache for zip imports (scripts/venv/aic_zipimport_cache.py), side by side, in one run:
the same playbook, --rounds times each, alternating

  off_*     AIC_ZIPIMPORT_CACHE=off: every module payload compiles its sources (Ansible as shipped);
  on_*      the cache on, warm (one unmeasured run fills a fresh cache directory first).

For each: the wall time and the CPU time of ansible-playbook and everything it ran (its workers and the module
processes), medians, with the ratios on/off. The default playbook runs read-only modules on localhost through this
venv's interpreter: ansible.builtin.stat, ansible.builtin.command, community.docker.docker_host_info and
community.docker.docker_image_info, --tasks of each (a Docker engine must answer); --playbook runs another one
(e.g. deploy.yml -e aic_deploy_fast_path=false over a deployed stack: the full path of a no-op deploy) with
--extra arguments.

  .venv/bin/python bench/module_cache.py --rounds 3 [--tasks 5] [--playbook deploy.yml --extra=-e --extra=...]

Results: logs/bench-module-cache/<UTC time>/results.json and results.md (the table printed at the end).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".venv", "bin")

MODULES = (
    ("ansible.builtin.stat", {"path": "/"}),
    ("ansible.builtin.command", {"cmd": "true"}),
    ("community.docker.docker_host_info", {}),
    ("community.docker.docker_image_info", {"name": ["hello-world:absent"]}),
)


def default_playbook(tasks):
    """A play on localhost (local connection, this venv's interpreter): ``tasks`` runs of each module of MODULES."""
    steps = [
        {"name": f"{module} {n}", module: args, "changed_when": False} for n in range(tasks) for module, args in MODULES
    ]
    play = {
        "name": "Module runs",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "tasks": steps,
    }
    return json.dumps([play], indent=1)  # JSON is YAML


def measure(argv, env):
    """(wall seconds, CPU seconds of the process and its children) of one run; SystemExit when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv)} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def summarize(runs):
    """Medians per arm and the on/off ratios from ``runs``: {"off": [(wall, cpu), ...], "on": [...]}."""
    out = {}
    for arm in ("off", "on"):
        out[f"{arm}_wall_s"] = round(statistics.median(w for w, _c in runs[arm]), 2)
        out[f"{arm}_cpu_s"] = round(statistics.median(c for _w, c in runs[arm]), 2)
    out["wall_ratio"] = round(out["on_wall_s"] / out["off_wall_s"], 3)
    out["cpu_ratio"] = round(out["on_cpu_s"] / out["off_cpu_s"], 3)
    return out


def table(summary, rounds, what):
    return "\n".join(
        [
            f"| {what} ({rounds} rounds, medians) | cache off | cache on (warm) | on / off |",
            "|---|---|---|---|",
            f"| wall s | {summary['off_wall_s']} | {summary['on_wall_s']} | {summary['wall_ratio']} |",
            f"| CPU s (ansible-playbook, workers, modules) | {summary['off_cpu_s']} | {summary['on_cpu_s']} "
            f"| {summary['cpu_ratio']} |",
        ]
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=5, help="runs of each module in the default playbook")
    parser.add_argument("--playbook", help="another playbook (relative to the repository) instead of the default")
    parser.add_argument("--extra", action="append", default=[], help="an argument for ansible-playbook (repeat)")
    args = parser.parse_args(argv)

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = os.path.join(ROOT, "logs", "bench-module-cache", stamp)
    os.makedirs(out_dir)
    with tempfile.TemporaryDirectory(prefix="aic-bench-module-cache-") as tmp:
        if args.playbook:
            playbook, what = args.playbook, " ".join([args.playbook, *args.extra])
        else:
            playbook = os.path.join(tmp, "modules.yml")
            with open(playbook, "w", encoding="utf-8") as fh:
                fh.write(default_playbook(args.tasks))
            what = f"{args.tasks * len(MODULES)} module runs"
        argv = [os.path.join(BIN, "ansible-playbook"), playbook, *args.extra]
        base = {**os.environ, "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg")}
        envs = {"off": {**base, "AIC_ZIPIMPORT_CACHE": "off"}, "on": {**base, "AIC_ZIPIMPORT_CACHE": f"{tmp}/cache"}}
        measure(argv, envs["on"])  # fills the cache: not measured
        runs = {"off": [], "on": []}
        for _round in range(args.rounds):
            for arm in ("off", "on"):
                runs[arm].append(measure(argv, envs[arm]))
    summary = summarize(runs)
    result = {"when": stamp, "what": what, "rounds": args.rounds, "runs": runs, **summary}
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    text = table(summary, args.rounds, what)
    with open(os.path.join(out_dir, "results.md"), "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
    print(text)
    print(f"results: {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
