#!/usr/bin/env python3
# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Image distribution benchmark on the multi-node test bed (scripts/testbed.sh), all strategies in one run.

For every N of --nodes it (re)creates a bed of N nodes whose links are capped at --rate, then for every strategy
wipes the nodes and runs playbooks/distribute.yml with that strategy against a tarball of --size-mib MiB of random
data (an image made here with docker import). It reports, per strategy and N:
  transfer_s  wall time from the playbook's start until the verified tarball is on every node (orchestration
              included; for shared_fs, which streams into docker load without a local copy, until every node has
              loaded it), and its ratio to the physical limit S/B (tarball size / link rate);
  load_s      the docker load step, separately;
  loaded_s    wall time from the playbook's start until every node has the image loaded (what an operator waits
              for), and its ratio to S/B (loaded_ratio);
  total_s     the whole playbook;
and, once per N, the no-op rerun (every node already has the image): its wall time and its changed count.

  .venv/bin/python bench/distribute.py --nodes 2,4,8 --size-mib 1024 --rate 25mbps

Results: logs/bench-distribute/<UTC time>/results.json and results.md (the table printed at the end).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BED = os.environ.get("AIC_BED_DIR", "/var/lib/aic-bed")
UNITS = {"kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}
STRATEGIES = ("copy", "push", "shared_fs", "broadcast")


def rate_bytes(rate):
    """tc rate string -> bytes per second (tc's 'mbps' is megaBYTES per second)."""
    match = re.fullmatch(r"([0-9.]+)([a-z]+)", rate)
    if not match or match.group(2) not in UNITS:
        raise SystemExit("--rate: use tc units such as 25mbps (MB/s) or 200mbit")
    return float(match.group(1)) * UNITS[match.group(2)]


def run(cmd, **kwargs):
    return subprocess.run(cmd, check=True, text=True, **kwargs)


def make_tarball(size_mib, shared_dir):
    """An image of size_mib MiB of random data, saved as tarball + manifest in the bed's shared directory."""
    name = f"aic-bench-{size_mib}m"
    tarball = os.path.join(shared_dir, name + ".tar.zst")
    manifest = os.path.join(shared_dir, name + ".manifest.json")
    if os.path.isfile(manifest) and os.path.isfile(tarball):
        with open(manifest, encoding="utf-8") as handle:
            data = json.load(handle)
        if os.path.getsize(tarball) == data["tarball_bytes"]:
            return manifest, data
    with tempfile.TemporaryDirectory() as tmp:
        blob = os.path.join(tmp, "blob")
        with open(blob, "wb") as handle:
            for _dummy in range(size_mib):
                handle.write(os.urandom(1 << 20))
        run(["tar", "-C", tmp, "-cf", os.path.join(tmp, "root.tar"), "blob"])
        os.unlink(blob)
        run(["docker", "import", os.path.join(tmp, "root.tar"), name + ":1"], stdout=subprocess.DEVNULL)
    save = subprocess.Popen(["docker", "save", name + ":1"], stdout=subprocess.PIPE)
    run(["zstd", "-q", "-1", "-T0", "-f", "-o", tarball], stdin=save.stdout)
    if save.wait() != 0:
        raise SystemExit("docker save failed")
    digest = hashlib.sha256()
    with open(tarball, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    image_id = run(["docker", "image", "inspect", "-f", "{{.Id}}", name + ":1"], capture_output=True).stdout.strip()
    run(["docker", "rmi", name + ":1"], stdout=subprocess.DEVNULL)
    data = {
        "image": name + ":1",
        "image_id": image_id,
        "tarball": os.path.basename(tarball),
        "tarball_bytes": os.path.getsize(tarball),
        "sha256": digest.hexdigest(),
    }
    with open(manifest, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
    return manifest, data


def parse_time(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def playbook(manifest, strategy, extra):
    """Run the distribute playbook with the json callback; return (start, end, parsed json)."""
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json",
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
    )
    cmd = [
        os.path.join(ROOT, ".venv", "bin", "ansible-playbook"),
        "-i",
        os.path.join(BED, "inventory.yml"),
        os.path.join(ROOT, "playbooks", "distribute.yml"),
        "-e",
        json.dumps(
            {
                "image_distribute_manifest": manifest,
                "image_distribute_strategy": strategy,
                "image_distribute_shared_dir": "/srv/aic-shared",
                "image_distribute_progress_interval": 30,
                **extra,
            }
        ),
    ]
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    end = time.time()
    # Progress lines (image_broadcast) come first; the json callback prints one document at the end.
    text = proc.stdout[proc.stdout.find("\n{\n") + 1 :] if not proc.stdout.startswith("{") else proc.stdout
    try:
        data = json.loads(text)
    except ValueError:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"the playbook printed no JSON (rc {proc.returncode})") from None
    if proc.returncode != 0:
        sys.stderr.write(json.dumps(data.get("stats"), indent=1) + proc.stderr[-2000:])
        raise SystemExit(f"{strategy} failed (rc {proc.returncode})")
    return start, end, data


def find_task(data, name_part):
    """(start, end, {host: result}) of the first task whose name contains name_part."""
    for play in data["plays"]:
        for task in play["tasks"]:
            if name_part in task["task"]["name"]:
                span = task["task"]["duration"]
                return parse_time(span["start"]), parse_time(span["end"]), task["hosts"]
    raise SystemExit(f"no task named like {name_part!r} in the playbook's output")


def measure(manifest, strategy, extra):
    return timings(strategy, *playbook(manifest, strategy, extra))


def timings(strategy, start, end, data):
    """The row's times from the playbook's json output (start and end: the playbook's wall clock)."""
    load = find_task(data, "Stream it into the engine" if strategy == "shared_fs" else "Load the received tarball")
    if strategy in ("push", "broadcast"):
        relays = find_task(data, "Collect each node's result")[2]
        arrived = max(r["verified_at"] for r in relays.values() if not r.get("skipped"))
    elif strategy == "copy":
        arrived = find_task(data, "Copy the tarball")[1]
    else:
        arrived = load[1]
    changed = sum(s["changed"] for s in data["stats"].values())
    return {
        "transfer_s": round(arrived - start, 2),
        "load_s": round(load[1] - load[0], 2),
        # The load task ends when its last node loaded the image.
        "loaded_s": round(load[1] - start, 2),
        "total_s": round(end - start, 2),
        "changed": changed,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="2,4,8")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rate", default="25mbps")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--out", default=os.path.join(ROOT, "logs", "bench-distribute"))
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    strategies = [s for s in args.strategies.split(",") if s]
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown:
        raise SystemExit("--strategies: unknown {}".format(", ".join(unknown)))
    bps = rate_bytes(args.rate)
    testbed = os.path.join(ROOT, "scripts", "testbed.sh")
    run([testbed, "up", "1", "none"], stdout=subprocess.DEVNULL)
    manifest, meta = make_tarball(args.size_mib, os.path.join(BED, "shared"))
    limit = meta["tarball_bytes"] / bps
    out = os.path.join(args.out, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    os.makedirs(out, exist_ok=True)
    rows = []
    print(
        "S = {:.3f} GB, B = {} ({:.1f} MB/s), S/B = {:.1f} s".format(
            meta["tarball_bytes"] / 1e9, args.rate, bps / 1e6, limit
        ),
        flush=True,
    )
    for n in counts:
        run([testbed, "up", str(n), args.rate], stdout=subprocess.DEVNULL)
        for strategy in strategies:
            run([testbed, "wipe"])
            row = {"nodes": n, "strategy": strategy, **measure(manifest, strategy, {})}
            row["ratio"] = round(row["transfer_s"] / limit, 3)
            row["loaded_ratio"] = round(row["loaded_s"] / limit, 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
        start, end, data = playbook(manifest, "broadcast", {})
        changed = sum(s["changed"] for s in data["stats"].values())
        row = {
            "nodes": n,
            "strategy": "rerun (no-op)",
            "transfer_s": None,
            "load_s": None,
            "loaded_s": None,
            "total_s": round(end - start, 2),
        }
        row.update(changed=changed, ratio=None, loaded_ratio=None)
        rows.append(row)
        print(json.dumps(row), flush=True)
    run([testbed, "down"])
    result = {
        "size_bytes": meta["tarball_bytes"],
        "rate": args.rate,
        "rate_bytes": bps,
        "limit_s": round(limit, 2),
        "rows": rows,
    }
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    lines = [
        "S = {:.3f} GB, B = {} ({:.1f} MB/s), S/B = {:.1f} s".format(
            meta["tarball_bytes"] / 1e9, args.rate, bps / 1e6, limit
        ),
        "",
        "| N | strategy | transfer s | × S/B | load s | loaded s | loaded × S/B | playbook s | changed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def fmt(v):
        return "-" if v is None else str(v)

    for r in rows:
        lines.append(
            f"| {r['nodes']} | {r['strategy']} | {fmt(r['transfer_s'])} | {fmt(r['ratio'])} | {fmt(r['load_s'])}"
            f" | {fmt(r['loaded_s'])} | {fmt(r['loaded_ratio'])} | {r['total_s']} | {r['changed']} |"
        )
    for n in counts:
        b = {r["strategy"]: r for r in rows if r["nodes"] == n}
        if "broadcast" in b and "push" in b:
            lines.append("")
            lines.append(f"N = {n}: push / broadcast = {b['push']['transfer_s'] / b['broadcast']['transfer_s']:.2f}")
    bcast = [r for r in rows if r["strategy"] == "broadcast"]
    if len(bcast) > 1:
        lines.append(
            f"broadcast growth N = {bcast[0]['nodes']} -> {bcast[-1]['nodes']}: "
            f"{100 * (bcast[-1]['transfer_s'] / bcast[0]['transfer_s'] - 1):+.1f} % (transfer), "
            f"{100 * (bcast[-1]['loaded_s'] / bcast[0]['loaded_s'] - 1):+.1f} % (loaded)"
        )
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "results.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)
    print(f"results: {out}")


if __name__ == "__main__":
    main()
