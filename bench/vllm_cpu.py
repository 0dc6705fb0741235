#!/usr/bin/env python3
# Copyright: aic.stack contributors
# Apache-2.0
"""vLLM on CPU, side by side: vLLM's own thread and process defaults vs the local inventory's (vllm_env).

Each arm is deployed the way an operator deploys it (``playbooks/stack.yml`` on inventories/local with
``-e vllm_env=...``), then measured on the running container:

- ``restart_s``: ``docker restart`` of the vLLM container until ``/health`` answers 200 (median of --restarts);
- ``load_wall_s`` / ``load_cpu_s``: wall time and the container's CPU time (its cgroup's ``usage_usec``) for
  --requests short completions sent by two clients at once;
- ``idle_core``: the container's CPU use while nothing is sent (fraction of one core over --idle-s).

    bench/vllm_cpu.py                 # both arms, then the inventory's setting is deployed again
    bench/vllm_cpu.py --restarts 1 --requests 20

The baseline arm states vLLM's defaults explicitly (threads pinned by vLLM, as many OpenMP threads as cores, the
model runner in its own process), so switching arms always recreates the container. Ratios are tuned / baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time

import docker
import requests
import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
INVENTORY = REPO / "inventories" / "local"
CONTAINER = "aic-vllm"
URL = "http://127.0.0.1:8000"


def tuned_env():
    return yaml.safe_load((INVENTORY / "group_vars" / "all" / "main.yml").read_text())["vllm_env"]


def baseline_env():
    return {"OMP_NUM_THREADS": str(os.cpu_count()), "VLLM_CPU_OMP_THREADS_BIND": "auto",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}  # fmt: skip


def deploy(env):
    cmd = [
        str(REPO / ".venv" / "bin" / "ansible-playbook"),
        "-i",
        str(INVENTORY),
        str(REPO / "playbooks" / "stack.yml"),
    ]
    if env is not None:
        cmd += ["-e", json.dumps({"vllm_env": env})]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"deploy failed ({' '.join(cmd)}):\n{proc.stdout[-3000:]}")


def healthy():
    try:
        return requests.get(f"{URL}/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


def cpu_seconds(container):
    """CPU time of the container's cgroup (v2 cpu.stat, wherever the engine's cgroup driver put it)."""
    for path in pathlib.Path("/sys/fs/cgroup").glob(f"**/*{container.id}*/cpu.stat"):
        for line in path.read_text().splitlines():
            if line.startswith("usage_usec"):
                return int(line.split()[1]) / 1e6
    sys.exit(f"no cgroup v2 cpu.stat for container {container.name}")


def model():
    return requests.get(f"{URL}/v1/models", timeout=10).json()["data"][0]["id"]


def measure(args):
    client = docker.from_env()
    container = client.containers.get(CONTAINER)
    restarts = []
    for _dummy in range(args.restarts):
        t0 = time.monotonic()
        container.restart(timeout=30)
        while not healthy():
            if time.monotonic() - t0 > 600:
                sys.exit("vLLM not healthy within 600 s of a restart")
            time.sleep(0.25)
        restarts.append(time.monotonic() - t0)
    name = model()
    errors = []

    def client_loop(k):
        for i in range(args.requests // 2):
            prompt = f"client {k} request {i}: the quick brown fox jumps over the lazy dog " * 3
            resp = requests.post(f"{URL}/v1/completions", timeout=120,
                                 json={"model": name, "prompt": prompt, "max_tokens": 32, "temperature": 0})  # fmt: skip
            if resp.status_code != 200:
                errors.append(resp.text)

    time.sleep(args.idle_s)  # let the start settle before the load
    c0, t0 = cpu_seconds(container), time.monotonic()
    threads = [threading.Thread(target=client_loop, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    load_wall, load_cpu = time.monotonic() - t0, cpu_seconds(container) - c0
    if errors:
        sys.exit(f"{len(errors)} completions failed, e.g. {errors[0][:300]}")
    c0, t0 = cpu_seconds(container), time.monotonic()
    time.sleep(args.idle_s)
    idle = (cpu_seconds(container) - c0) / (time.monotonic() - t0)
    return {"restart_s": statistics.median(restarts), "load_wall_s": load_wall, "load_cpu_s": load_cpu,
            "idle_core": idle}  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--idle-s", type=float, default=15.0)
    args = ap.parse_args(argv)
    arms = {"baseline (vLLM defaults)": baseline_env(), "tuned (inventories/local)": tuned_env()}
    results = {}
    try:
        for arm, env in arms.items():
            print(f"deploying {arm}: vllm_env={json.dumps(env)}", flush=True)
            deploy(env)
            results[arm] = measure(args)
            print(f"  {json.dumps({k: round(v, 3) for k, v in results[arm].items()})}", flush=True)
    finally:
        deploy(None)  # the inventory's own setting again
    base, tuned = (results[arm] for arm in arms)
    print(f"\n{'metric':<14}{'baseline':>12}{'tuned':>12}{'tuned/base':>12}")
    for key in base:
        print(f"{key:<14}{base[key]:>12.3f}{tuned[key]:>12.3f}{tuned[key] / base[key]:>12.2f}")


if __name__ == "__main__":
    main()
