#!/usr/bin/env python3
# Copyright: aic.stack contributors
# Apache-2.0
"""aic vLLM guard: the vLLM container's main process. It runs vLLM as its child and ends the container as soon as
the LMCache server that vLLM uses started after vLLM did; the container's restart policy then starts a fresh vLLM
that attaches to the new server.

Why: an LMCache server that restarts under a running vLLM (a crash and the restart policy, `docker restart`, a
`kill -9` of the server, a Docker engine that restarts its containers in any order) leaves vLLM's connector waiting
on the old server forever. vLLM's /health stays 200 and every completion hangs, until an operator restarts it.

How it knows: LMCache's own /metrics publishes process_start_time_seconds (prometheus_client's process collector,
the same host clock as this process). The rule is the one a correct start order gives: a vLLM must have started
after its LMCache server. Nothing here needs the Docker socket, so it works behind an authorization plugin and for
every IPC and PID mode.

Signals: SIGTERM and SIGINT (docker stop) go to vLLM alone, which drains its in-flight requests
(--shutdown-timeout) and exits; the guard exits with vLLM's status. When the guard ends vLLM itself, the requests
in flight are hung on the old server, so there is nothing to drain: SIGTERM, then SIGKILL to vLLM's whole process
group after --grace seconds (default none).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request

# Exit status when the guard ended vLLM because LMCache restarted (EX_TEMPFAIL: try again).
RESTART_EXIT = 75


def log(message):
    print(f"aic-vllm-guard: {message}", file=sys.stderr, flush=True)


def lmcache_started_at(url, timeout=5.0):
    """process_start_time_seconds of the LMCache server whose HTTP port is ``url``, or None when it does not
    answer (down, starting, or no such metric)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout) as response:
            text = response.read().decode("utf-8", errors="replace")
        for family in text_string_to_metric_families(text):
            if family.name == "process_start_time_seconds":
                return float(family.samples[0].value)
    except (OSError, ValueError, IndexError):
        return None
    return None


class Guard:
    def __init__(self, command, lmcache_url, interval=5.0, grace=5.0, clock=time.time, probe=lmcache_started_at):
        self.command = command
        self.lmcache_url = lmcache_url
        self.interval = interval
        self.grace = grace
        self.clock = clock
        self.probe = probe
        self.child = None
        self.stopping = False
        self.started_at = None

    def on_signal(self, signum, _frame):
        """docker stop: pass the signal on to vLLM, which drains; stop watching LMCache."""
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def lmcache_restarted(self):
        """The LMCache server's start time when it started after vLLM did, else None."""
        started = self.probe(self.lmcache_url)
        if started is not None and started > self.started_at:
            return started
        return None

    def end_child(self):
        """End vLLM and everything it started: SIGTERM, then SIGKILL to its process group after the grace."""
        self.child.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.child.wait(timeout=self.grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.child.pid, signal.SIGKILL)
        self.child.wait()

    def run(self):
        self.started_at = self.clock()
        # vLLM in its own process group: the guard can end all of it, even in a PID namespace shared with LMCache.
        self.child = subprocess.Popen(self.command, start_new_session=True)  # noqa: S603 - the container's command
        while True:
            try:
                code = self.child.wait(timeout=self.interval)
            except subprocess.TimeoutExpired:
                code = None
            if code is not None:
                return code if code >= 0 else 128 - code
            if self.stopping:
                continue
            restarted = self.lmcache_restarted()
            # A docker stop that arrived while the probe waited for its answer wins: vLLM drains, whatever LMCache did.
            if restarted is not None and not self.stopping:
                log(
                    f"the LMCache server at {self.lmcache_url} started at {restarted:.2f}, after this vLLM "
                    f"({self.started_at:.2f}): ending vLLM so that the container restarts and attaches to it"
                )
                self.end_child()
                return RESTART_EXIT


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--lmcache-url", required=True, help="LMCache's HTTP port, e.g. http://aic-lmcache:8080")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between two looks at LMCache")
    parser.add_argument("--grace", type=float, default=0.0, help="seconds vLLM gets after SIGTERM before SIGKILL")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then vLLM's command")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command to run (give it after --)")
    return args


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    guard = Guard(args.command, args.lmcache_url, interval=args.interval, grace=args.grace)
    signal.signal(signal.SIGTERM, guard.on_signal)
    signal.signal(signal.SIGINT, guard.on_signal)
    return guard.run()


if __name__ == "__main__":
    sys.exit(main())
