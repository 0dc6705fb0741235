#!/usr/bin/env python3
# Copyright: aic.stack contributors
# Apache-2.0
"""A new vLLM container's start, side by side: the stack image as built vs the same image with each of its two start
savings undone:

- ``built``: as the image runs in the stack: its vLLM cache root carries the model class vLLM resolves at start, and
  vLLM forks its engine core (``VLLM_WORKER_MULTIPROC_METHOD=fork``, the cpu image's build step vllm_cpu_fork.py);
- ``spawn``: the engine core started in a fresh interpreter, as vLLM's CPU platform does unless told otherwise (a
  second import of torch and vLLM);
- ``empty``: an empty cache root (vLLM resolves the model class in a subprocess, one more import of both).

    bench/vllm_start.py               # 3 rounds, the arms alternating
    bench/vllm_start.py --rounds 5

Each round creates a container per arm from the running local stack's vLLM (``make deploy``): its image, its vLLM
command (without the guard and the LMCache connector, so nothing of the running stack is touched), its environment;
``start_s`` runs from ``docker run`` to the first ``/health`` 200, ``cpu_s`` is the CPU time the container's processes
used until then (the engine's accounting of the container). The arms run one after the other, never at once. The
ratios are built / arm (below 1: the image as built is faster).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import docker
import requests

SOURCE = "aic-vllm"
NAME = "aic-bench-vllm-start"
ARMS = {
    "built": {},
    "spawn": {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"},
    "empty": {"VLLM_CACHE_ROOT": "/tmp/aic-bench-empty-cache"},
}


def vllm_command(cmd):
    """vLLM's own command from the container's: the guard's prefix (up to its ``--``) and the connector dropped."""
    if "--" in cmd and any(a.endswith("aic_vllm_guard.py") for a in cmd[: cmd.index("--")]):
        cmd = cmd[cmd.index("--") + 1 :]
    out, skip = [], False
    for arg in cmd:
        if skip:
            skip = False
            continue
        if arg == "--kv-transfer-config":
            skip = True
            continue
        out.append(arg)
    return out


def start_once(client, image, command, env, timeout):
    client.containers.run(
        image, command, name=NAME, detach=True, environment=env, ports={"8000/tcp": ("127.0.0.1", None)}
    )
    container = client.containers.get(NAME)
    t0 = time.monotonic()
    try:
        while True:
            container.reload()
            if container.status != "running":
                raise RuntimeError(f"{NAME} exited: {container.logs(tail=20).decode(errors='replace')}")
            port = container.ports.get("8000/tcp")
            if port:
                try:
                    if requests.get(f"http://127.0.0.1:{port[0]['HostPort']}/health", timeout=2).status_code == 200:
                        elapsed = time.monotonic() - t0
                        usage = container.stats(stream=False)["cpu_stats"]["cpu_usage"]["total_usage"]
                        return elapsed, usage / 1e9
                except requests.RequestException:
                    pass
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"{NAME} not healthy within {timeout} s")
            time.sleep(0.25)
    finally:
        container.remove(force=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    client = docker.from_env()
    source = client.containers.get(SOURCE)
    image = source.attrs["Config"]["Image"]
    command = vllm_command(source.attrs["Config"]["Cmd"])
    env = dict(e.split("=", 1) for e in source.attrs["Config"]["Env"])
    for stale in client.containers.list(all=True, filters={"name": f"^{NAME}$"}):
        stale.remove(force=True)
    times = {arm: [] for arm in ARMS}
    cpu = {arm: [] for arm in ARMS}
    for _dummy in range(args.rounds):
        for arm, extra in ARMS.items():
            elapsed, used = start_once(client, image, command, {**env, **extra}, args.timeout)
            times[arm].append(elapsed)
            cpu[arm].append(used)
            print(f"{arm}: {elapsed:.1f} s, {used:.1f} CPU s", file=sys.stderr)
    medians = {arm: statistics.median(values) for arm, values in times.items()}
    cpu_medians = {arm: statistics.median(values) for arm, values in cpu.items()}
    print(f"{'arm':8} {'start_s (median)':>17} {'cpu_s (median)':>15} {'start_s runs':>24}")
    for arm, values in times.items():
        runs = " ".join(f"{v:.1f}" for v in values)
        print(f"{arm:8} {medians[arm]:17.1f} {cpu_medians[arm]:15.1f} {runs:>24}")
    for arm in ARMS:
        if arm != "built":
            print(
                f"ratio built/{arm}: start {medians['built'] / medians[arm]:.2f}, "
                f"cpu {cpu_medians['built'] / cpu_medians[arm]:.2f}"
            )
    print(json.dumps({"image": image, "times": times, "cpu": cpu, "medians": medians}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
