#!/usr/bin/env python3
# Copyright: aic.stack contributors
# Apache-2.0
"""Faults, one after another, on the running local stack (``make deploy``) while a client sends a steady stream of
short completions; per fault: the time to recover, the requests that failed, and what was lost.

    bench/faults.py                      # every fault, the table on stdout, the raw record in --out
    bench/faults.py --faults lmcache-restart,vllm-kill

Faults (nothing but the fault is done; recovery is the stack's own: restart policies and vLLM's guard):

- ``lmcache-restart``: ``docker restart aic-lmcache``;
- ``lmcache-kill``: ``kill -9`` of the ``lmcache server`` process;
- ``lmcache-freeze``: ``docker pause aic-lmcache`` for --freeze-s, then unpause (requests wait, none is dropped);
- ``vllm-kill``: ``kill -9`` of the vLLM container's main process;
- ``prometheus-restart``: ``docker restart aic-prometheus``;
- ``dockerd-restart``: the Docker engine stopped and started again (systemd, else roles/docker_host's script).

Columns: ``recover_s`` from the fault to the end of the first quick completion (under a second) sent after the last
failed or slow one (0 when none failed and none waited a second); ``failed``: requests sent from the fault until the
stack answered steadily again that got an error; ``waited_max_s``: the longest successful request among them;
``lost``: ``nothing``, or what did not survive - a prompt stored before the fault no longer found in LMCache
afterwards (``KV``: with NIXL's POSIX store, LMCache's index lives in its memory and its slots are new files each
start; the ``fs`` L2 backend keeps a file per chunk, found again after a restart), or Prometheus samples from before
the fault gone (``metrics``). The table's first line names the running LMCache's L2 adapter: run it once per L2
backend (``make deploy``, then ``ansible-playbook deploy.yml -e aic_lmcache_l2_backend=fs``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import docker
import requests

REPO = pathlib.Path(__file__).resolve().parents[1]
VLLM = "http://127.0.0.1:8000"
LMCACHE = "http://127.0.0.1:8080"
PROMETHEUS = "http://127.0.0.1:9090"
MODEL = "tiny-llama"
FAULTS = ["lmcache-restart", "lmcache-kill", "lmcache-freeze", "vllm-kill", "prometheus-restart", "dockerd-restart"]


def complete(prompt, max_tokens=2, timeout=120):
    response = requests.post(
        f"{VLLM}/v1/completions",
        json={"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
        timeout=timeout,
    )
    response.raise_for_status()
    return response.json()


def metric(url, name):
    """Sum of every sample of ``name`` on ``url``/metrics (0 when absent or unreachable)."""
    try:
        text = requests.get(f"{url}/metrics", timeout=10).text
    except requests.RequestException:
        return 0.0
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Client:
    """A steady stream of short completions, one every --period seconds, each in its own thread."""

    def __init__(self, period):
        self.period = period
        self.results = []  # (start, end, ok)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def one(self):
        start = time.time()
        try:
            complete(f"steady request at {start}:")
            ok = True
        except requests.RequestException:
            ok = False
        self.results.append((start, time.time(), ok))

    def run(self):
        while not self.stop.is_set():
            threading.Thread(target=self.one, daemon=True).start()
            self.stop.wait(self.period)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def engine():
    return docker.from_env()


def wait_stack(timeout=600, stable_s=8):
    """Until LMCache and Prometheus answer and long completions (through LMCache) have succeeded for ``stable_s``
    seconds in a row: a vLLM that answers once but is about to be ended by its guard is not back yet."""
    deadline = time.time() + timeout
    since = None
    while time.time() < deadline:
        try:
            complete(f"back? {time.time()} " + "The stack answers again after the fault. " * 4, timeout=10)
            up = (
                requests.get(f"{LMCACHE}/healthcheck", timeout=5).ok
                and requests.get(f"{PROMETHEUS}/-/ready", timeout=5).ok
            )
        except requests.RequestException:
            up = False
        if not up:
            since = None
        elif since is None:
            since = time.time()
        elif time.time() - since >= stable_s:
            return
        time.sleep(1)
    raise SystemExit(f"the stack did not answer within {timeout} s")


def host_pid(container, needle):
    top = engine().api.top(container, ps_args="-eo pid,args")
    pids = [int(p[0]) for p in top["Processes"] if needle in p[1] and "docker-init" not in p[1]]
    if not pids:
        raise SystemExit(f"no process matching {needle!r} in {container}: {top['Processes']}")
    return pids[0]


def restart_dockerd():
    if pathlib.Path("/run/systemd/system").exists():
        subprocess.run(["systemctl", "restart", "docker"], check=True, timeout=300)
        return
    pid = int(pathlib.Path("/var/run/docker.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    while pathlib.Path(f"/proc/{pid}").exists():
        time.sleep(0.5)
    script = REPO / "roles" / "docker_host" / "files" / "start-dockerd.sh"
    subprocess.run(["sh", str(script), "/var/run/docker.sock", "/var/log/aic-dockerd.log"], check=False, timeout=120)


def inject(fault, freeze_s):
    if fault == "lmcache-restart":
        engine().containers.get("aic-lmcache").restart(timeout=30)
    elif fault == "lmcache-kill":
        os.kill(host_pid("aic-lmcache", "lmcache server"), signal.SIGKILL)
    elif fault == "lmcache-freeze":
        container = engine().containers.get("aic-lmcache")
        container.pause()
        time.sleep(freeze_s)
        container.unpause()
    elif fault == "vllm-kill":
        os.kill(int(engine().api.inspect_container("aic-vllm")["State"]["Pid"]), signal.SIGKILL)
    elif fault == "prometheus-restart":
        engine().containers.get("aic-prometheus").restart(timeout=30)
    elif fault == "dockerd-restart":
        restart_dockerd()
    else:
        raise SystemExit(f"unknown fault {fault!r} (one of {', '.join(FAULTS)})")


def kv_marker(fault):
    """A long prompt stored in LMCache before the fault (whole chunks), to look up after it."""
    prompt = f"{fault}: " + "Every fault is measured, none is hidden. " * 4  # ~150 tokens of the 256
    complete(prompt, max_tokens=1)
    return prompt


def kv_found(prompt):
    """After recovery: is the prompt stored before the fault still a prefix-cache hit? A vLLM that restarted has an
    empty cache of its own, so then only LMCache can answer (an external hit)."""
    names = ("vllm:prefix_cache_hits_total", "vllm:external_prefix_cache_hits_total")
    before = sum(metric(VLLM, name) for name in names)
    complete(prompt, max_tokens=1)
    return sum(metric(VLLM, name) for name in names) > before


def prometheus_samples(since, until):
    """How many samples of vLLM's `up` series Prometheus holds for [since, until]."""
    response = requests.get(
        f"{PROMETHEUS}/api/v1/query",
        params={"query": f'count_over_time(up{{job="vllm"}}[{int(until - since)}s])', "time": until},
        timeout=30,
    )
    result = response.json()["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def measure(fault, client, freeze_s, settle_s):
    prompt = kv_marker(fault)
    metrics_until = time.time()
    metrics_from = metrics_until - 60
    samples_before = prometheus_samples(metrics_from, metrics_until)
    time.sleep(2)
    fault_at = time.time()
    inject(fault, freeze_s)
    injected = time.time()
    wait_stack()
    time.sleep(settle_s)
    window = [r for r in client.results if r[0] >= fault_at - 1]
    failed = [r for r in window if not r[2]]
    # Bad: failed, or waited a second or more (a quick completion takes a few hundredths). Recovered: the end of the
    # first quick success sent after the last bad request was sent.
    bad = failed + [r for r in window if r[2] and r[1] - r[0] >= 1]
    recover = 0.0
    if bad:
        last_bad = max(r[0] for r in bad)
        after = [r[1] for r in window if r[2] and r[0] > last_bad and r[1] - r[0] < 1]
        recover = (min(after) - fault_at) if after else float("nan")
    lost = []
    if not kv_found(prompt):
        lost.append("KV")
    if prometheus_samples(metrics_from, metrics_until) < samples_before:
        lost.append("metrics")
    return {
        "fault": fault,
        "inject_s": round(injected - fault_at, 1),
        "recover_s": round(recover, 1),
        "requests": len(window),
        "failed": len(failed),
        "waited_max_s": round(max((r[1] - r[0] for r in window if r[2]), default=0.0), 1),
        "lost": ", ".join(lost) or "nothing",
    }


def l2_of_stack():
    """The running LMCache server's L2 adapters, as its command line names them (e.g. ``nixl_store POSIX``, ``fs``)."""
    cmd = engine().containers.get("aic-lmcache").attrs["Config"]["Cmd"]
    specs = [json.loads(cmd[i + 1]) for i, arg in enumerate(cmd) if arg == "--l2-adapter"]
    return ", ".join(" ".join(filter(None, [s.get("type"), s.get("backend")])) for s in specs) or "none"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--period", type=float, default=0.5, help="seconds between two requests of the client")
    parser.add_argument("--freeze-s", type=float, default=30)
    parser.add_argument("--settle-s", type=float, default=5, help="seconds of requests kept after the stack answers")
    parser.add_argument("--out", default=str(REPO / "logs" / "bench-faults.json"))
    args = parser.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    wait_stack()
    l2 = l2_of_stack()
    rows = []
    with Client(args.period) as client:
        time.sleep(5)
        for fault in faults:
            print(f"{datetime.datetime.now():%H:%M:%S} {fault} ...", file=sys.stderr, flush=True)
            rows.append(measure(fault, client, args.freeze_s, args.settle_s))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps({"l2": l2, "rows": rows, "results": client.results}, indent=1))
    columns = ["fault", "inject_s", "recover_s", "requests", "failed", "waited_max_s", "lost"]
    print(f"LMCache L2: {l2}")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in columns) + " |")


if __name__ == "__main__":
    main()
