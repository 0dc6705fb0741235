# Runs inside the LMCache container (python3 -c): stops every process of its PID namespace that belongs to another
# container - vLLM's API server and EngineCore when vLLM shares the namespace. A process belongs to LMCache's own
# container when its cgroup is PID 1's (the container's init, LMCache's server under it, this script): those are
# kept. The cgroup, not the parent, tells them apart: an orphaned EngineCore is re-parented to init but stays in
# vLLM's cgroup. SIGTERM first; whatever still runs after the timeout (argv[1], seconds) gets SIGKILL. Prints JSON.
import contextlib
import json
import os
import signal
import sys
import time

me = os.getpid()
with open("/proc/1/cgroup") as fh:
    own_cgroup = fh.read()
timeout = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0


def others():
    pids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (1, me):
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/cgroup") as fh:
                cgroup = fh.read()
        except OSError:
            continue
        if cgroup == own_cgroup:
            continue
        # Zombies are already dead; their parent (init) reaps them or they vanish with the container.
        if stat.rsplit(")", 1)[1].split()[0] == "Z" or not cmd:
            continue
        pids[int(entry)] = cmd
    return pids


def send(pids, sig):
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


found = others()
send(found, signal.SIGTERM)
deadline = time.monotonic() + timeout
left = others()
while left and time.monotonic() < deadline:
    time.sleep(0.5)
    left = others()
send(left, signal.SIGKILL)
print(json.dumps({"signalled": sorted(found.values()), "killed": sorted(left.values())}))
