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

With --to-healthy it measures instead, --rounds times, the deploy to a healthy stack after a teardown (images
present) beside the raw start of the same containers:

  deploy_s      playbooks/teardown.yml, then deploy.yml until it ends (its health checks passed: a completion on
                every vLLM instance, LMCache's /healthcheck, every Prometheus target up);
  raw_s         the same containers (their Docker Engine create body as the deploy left them: config, host config,
                networks) removed, then created and started through the Engine API in dependency order, until the
                same endpoints answer: a completion on every vLLM instance, LMCache's /healthcheck, every target of
                Prometheus up. The orchestration overhead is deploy_s / raw_s.

The stack is left deployed at the end (a last deploy.yml).

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
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".venv", "bin")
RECAP = re.compile(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)


def timed(cmd):
    """(seconds, output) of a command run from the repository root; SystemExit naming it when it fails."""
    env = {**os.environ, "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg")}
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


STACK_LABEL = "ai.aic.stack=aic"
VLLM_URLS = ("http://127.0.0.1:8000",)
LMCACHE_URL = "http://127.0.0.1:8080"
PROMETHEUS_URL = "http://127.0.0.1:9090"
MODEL = "tiny-llama"


def answers(url, body=None, timeout=30):
    """The decoded JSON answer (or True for a non-JSON 200) of a GET, or a POST of ``body``; None when it fails."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except OSError:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return True


def stack_healthy():
    """What the health role checks: a completion on every vLLM instance, LMCache's health, every target up."""
    for url in VLLM_URLS:
        done = answers(f"{url}/v1/completions", {"model": MODEL, "prompt": "ping", "max_tokens": 1, "temperature": 0})
        if not isinstance(done, dict) or not done.get("choices"):
            return False
    if answers(f"{LMCACHE_URL}/healthcheck") is None:
        return False
    targets = answers(f"{PROMETHEUS_URL}/api/v1/targets")
    active = (targets or {}).get("data", {}).get("activeTargets") if isinstance(targets, dict) else None
    return bool(active) and all(t.get("health") == "up" for t in active)


def create_bodies(client):
    """name -> (create body, id) of every container of the stack, as the Engine API's create takes it."""
    bodies = {}
    for c in client.containers.list(all=True, filters={"label": STACK_LABEL}):
        a = c.attrs
        networks = a["NetworkSettings"]["Networks"] or {}
        first = next(iter(networks), None)
        endpoint = (
            {first: {"Aliases": networks[first].get("Aliases")}} if first and first not in ("bridge", "host") else {}
        )
        body = {**a["Config"], "HostConfig": a["HostConfig"], "NetworkingConfig": {"EndpointsConfig": endpoint}}
        bodies[a["Name"].lstrip("/")] = (body, a["Id"])
    return bodies


def raw_start(client, bodies):
    """Create and start every container (those another one joins by container:<id> first); the seconds until the
    stack is healthy."""
    ids = {cid: name for name, (_body, cid) in bodies.items()}

    def joined(body):
        host = body["HostConfig"]
        return [
            ids.get(v.split(":", 1)[1])
            for k in ("IpcMode", "PidMode", "NetworkMode")
            if (v := host.get(k) or "").startswith("container:")
        ]

    order = sorted(bodies, key=lambda name: bool(joined(bodies[name][0])))
    start = time.monotonic()
    # The stack's network, as the deploy creates it (the teardown removed it).
    for network in {n for body, _cid in bodies.values() for n in body["NetworkingConfig"]["EndpointsConfig"]}:
        if not client.networks.list(names=[network]):
            client.networks.create(network)
    for name in order:
        body = json.loads(json.dumps(bodies[name][0]))
        for key in ("IpcMode", "PidMode", "NetworkMode"):
            value = body["HostConfig"].get(key) or ""
            if value.startswith("container:"):
                ref = value.split(":", 1)[1]
                body["HostConfig"][key] = "container:" + ids.get(ref, ref)
        created = client.api.create_container_from_config(body, name=name)
        client.api.start(created["Id"])
    while not stack_healthy():
        if time.monotonic() - start > 900:
            raise SystemExit("the raw start did not become healthy within 900 s")
        time.sleep(0.5)
    return time.monotonic() - start


def to_healthy_round(inventory, client):
    playbook = os.path.join(BIN, "ansible-playbook")
    timed([playbook, "-i", inventory, "playbooks/teardown.yml"])
    deploy_s, _out = timed([playbook, "-i", inventory, "deploy.yml"])
    bodies = create_bodies(client)
    timed([playbook, "-i", inventory, "playbooks/teardown.yml"])
    raw_s = raw_start(client, bodies)
    return {"deploy_s": deploy_s, "raw_s": raw_s, "containers": sorted(bodies)}


def to_healthy(args, out_dir):
    import docker  # noqa: PLC0415 - only this mode talks to the engine itself

    client = docker.from_env()
    rounds = [to_healthy_round(args.inventory, client) for _dummy in range(args.rounds)]
    timed([os.path.join(BIN, "ansible-playbook"), "-i", args.inventory, "playbooks/teardown.yml"])
    timed([os.path.join(BIN, "ansible-playbook"), "-i", args.inventory, "deploy.yml"])
    med = {k: statistics.median(r[k] for r in rounds) for k in ("deploy_s", "raw_s")}
    summary = {**{k: round(v, 2) for k, v in med.items()}, "deploy_over_raw": round(med["deploy_s"] / med["raw_s"], 2)}
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(
            {"inventory": args.inventory, "mode": "to-healthy", "rounds": rounds, "median": summary}, fh, indent=1
        )
    table = [
        "| deploy after teardown s | raw start of the same containers s | deploy / raw |",
        "|---|---|---|",
        f"| {summary['deploy_s']} | {summary['raw_s']} | {summary['deploy_over_raw']} |",
    ]
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-i", "--inventory", default="inventories/local")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--to-healthy", action="store_true", help="deploy after a teardown vs the raw container start")
    args = parser.parse_args()
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = os.path.join(ROOT, "logs", "bench-deploy", stamp)
    os.makedirs(out_dir, exist_ok=True)
    if args.to_healthy:
        table = to_healthy(args, out_dir)
        with open(os.path.join(out_dir, "results.md"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(table) + "\n")
        print("\n".join(table))
        print(f"results: {out_dir}")
        return 0
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
