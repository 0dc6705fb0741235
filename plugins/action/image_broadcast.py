# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for aic.stack.image_broadcast: the controller end of the relay (a source daemon, progress display)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.aic.stack.plugins.module_utils import relay

FINAL = ("verified", "present", "has-image", "failed")
IDLE_EXIT_S = 120


def _mb(value):
    return "%.1f" % (value / 1e6)


def progress_line(report, now):
    """One operator-readable line for a node's latest report."""
    age = now - report.get("received_at", now)
    line = (
        f"{report.get('node', '?'):<12} {report.get('state', '?'):<9} {_mb(report.get('bytes', 0)):>9}/"
        f"{_mb(report.get('total', 0))} MB {_mb(report.get('rate', 0)):>6} MB/s from {report.get('upstream') or '-':<10}"
    )
    if report.get("served"):
        line += " served {} MB".format(_mb(report["served"]))
    if report.get("switches"):
        line += f" upstream switches {report['switches']}"
    if age > 5:
        line += f" (silent {age:.0f} s)"
    if report.get("error"):
        line += " error: {}".format(report["error"])
    return line


def _serve_forever(args, tell):
    """Body of the source daemon: serve until SIGTERM, the timeout, or two idle minutes."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    try:
        blob = relay.Blob(args["src"], int(args["size"]), args["sha256"], complete=True)
        server = relay.Server(blob, args.get("address") or "0.0.0.0", int(args.get("port", 29870)))
    except OSError as exc:
        tell(f"error cannot serve on port {args.get('port', 29870)}: {exc}")
        return
    tell("ready")
    deadline = time.monotonic() + float(args.get("timeout", 3600)) + 120
    # Also ends when nobody has talked to it for IDLE_EXIT_S (a play that died between start and finish).
    while not stop and time.monotonic() < deadline and server.idle_for() < IDLE_EXIT_S:
        time.sleep(0.25)
    server.close()
    blob.close()


def start_source(args):
    """Fork the source daemon (detached from the Ansible worker); return its pid once it listens."""
    pid, error = relay.spawn_daemon(lambda tell: _serve_forever(args, tell))
    if pid is None:
        raise AnsibleActionFail(f"image_broadcast: the source did not start: {error}")
    return pid


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(
        (
            "state",
            "src",
            "sha256",
            "size",
            "nodes",
            "address",
            "port",
            "pid",
            "timeout",
            "silent_timeout",
            "progress_interval",
            "progress_log",
        )
    )

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        state = args.get("state", "started")
        if state not in ("started", "finished"):
            raise AnsibleActionFail(f"image_broadcast: state must be started or finished, not {state!r}")
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="nothing is served in check mode")
            return result
        if state == "started":
            return self._start(result, args)
        return self._finish(result, args)

    def _start(self, result, args):
        for key in ("src", "sha256", "size"):
            if args.get(key) in (None, ""):
                raise AnsibleActionFail(f"image_broadcast: {key} is required")
        size = int(args["size"])
        if not os.path.isfile(args["src"]) or os.path.getsize(args["src"]) != size:
            raise AnsibleActionFail(
                f"image_broadcast: {args['src']} is missing or not {size} bytes as the manifest says"
            )
        pid = start_source(args)
        result.update(changed=False, pid=pid, port=int(args.get("port", 29870)), started_at=time.time())
        return result

    def _finish(self, result, args):
        nodes = list(args.get("nodes") or [])
        host = args.get("address") or "127.0.0.1"
        port = int(args.get("port", 29870))
        pid = int(args.get("pid") or 0)
        timeout = float(args.get("timeout", 3600))
        silent_timeout = float(args.get("silent_timeout", 30))
        interval = float(args.get("progress_interval", 10))
        log_path = args.get("progress_log")
        if log_path:
            os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        log = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115 - closed below
        start = time.time()
        status = {"served": 0, "nodes": {}}
        silent = []
        try:
            next_print = start + interval
            while True:
                time.sleep(0.25)
                now = time.time()
                try:
                    status = relay.query_status(host, port)
                except (OSError, ValueError) as exc:
                    raise AnsibleActionFail(f"image_broadcast: the source on {host}:{port} is gone: {exc}") from exc
                reports = status["nodes"]
                pending = [n for n in nodes if reports.get(n, {}).get("state") not in FINAL]
                # A node that never reported, or went quiet, is given up on after silent_timeout (it died or
                # lost its link); the others are not held back by it.
                silent = [n for n in pending if now - reports.get(n, {}).get("received_at", start) > silent_timeout]
                finished = not [n for n in pending if n not in silent]
                if now >= next_print or finished:
                    next_print = now + interval
                    lines = [progress_line(reports[n], now) for n in nodes if n in reports]
                    lines += [f"{n:<12} no report yet" for n in nodes if n not in reports]
                    self._display.display(
                        "image_broadcast {:.0f} s, source served {} MB:\n  {}".format(
                            now - start, _mb(status["served"]), "\n  ".join(lines)
                        )
                    )
                    if log:
                        log.write(json.dumps({"t": round(now, 3), "served": status["served"], "nodes": reports}) + "\n")
                        log.flush()
                if finished or now - start > timeout:
                    break
        finally:
            if log:
                log.close()
            if pid:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
        reports = status["nodes"]
        failed = sorted(n for n in nodes if reports.get(n, {}).get("state") == "failed")
        timed_out = sorted(n for n in nodes if reports.get(n, {}).get("state") not in FINAL and n not in silent)
        result.update(
            changed=any(reports.get(n, {}).get("state") == "verified" for n in nodes),
            nodes=reports,
            served_bytes=status["served"],
            seconds=round(time.time() - start, 3),
            failed_nodes=failed,
            silent_nodes=sorted(silent),
            timed_out_nodes=timed_out,
        )
        return result
