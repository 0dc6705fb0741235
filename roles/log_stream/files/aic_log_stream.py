#!/usr/bin/env python3
# Copyright: aic.stack contributors
# Apache-2.0
"""Stream ``docker logs --follow --timestamps`` of one container into a file, across restarts and recreations.

Shipped by the aic.stack log_stream role to the Docker host; standard library and the docker CLI only
(Python 3.8+, Linux). Subcommands, each keyed by ``--state-dir`` and ``--container``:

``start``   start a detached streamer (new session, stdio detached) unless one already streams this container
            into this file; replaces one that streams it elsewhere. Prints one JSON object and returns at once.
``run``     the streamer itself, in the foreground (what ``start`` launches).
``stop``    SIGTERM the streamers, wait for them to flush and exit (SIGKILL after ``--timeout``), report the files.
``status``  report the streamers.

State, per container, in the state directory: ``<container>.pid`` (the pid, exclusively flock()ed by the running
streamer for its whole life, so a stale pidfile is never mistaken for a live one), ``<container>.json`` (what it
streams: container, service, file, job id) and ``<container>.streamer.log`` (the streamer's own diagnostics).

The file gets every line of the container's output (stdout and stderr) as ``<RFC3339Nano timestamp> <line>``,
from the container's start. When ``docker logs`` ends (the container stopped, restarted, was removed or
recreated under the same name) the streamer waits for the container and attaches again with ``--since`` the
newest timestamp already in the file, skipping lines not newer than it: no line is written twice, and a
streamer started on an existing file (after a crash, a reboot) continues it the same way.
"""

from __future__ import annotations

import argparse
import calendar
import contextlib
import errno
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

NS = 1_000_000_000
# docker logs --timestamps: RFC3339Nano (UTC, "Z", trailing zeros of the fraction trimmed), a space, the line.
TIMESTAMP_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$")
# How much of the end of an existing file is read to find where to resume.
TAIL_BYTES = 256 * 1024
START_TIMEOUT = 15.0
EXIT_ALREADY_RUNNING = 3


# -- pure helpers ---------------------------------------------------------------------------------------------


def parse_timestamp(text):
    """Nanoseconds since the epoch of an RFC3339 timestamp (``str`` or ``bytes``), or None when it is not one."""
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            return None
    match = TIMESTAMP_RE.match(text)
    if not match:
        return None
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]):
        return None
    if hour > 23 or minute > 59 or second > 60:
        return None
    fraction = (match.group(7) or "").ljust(9, "0")
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    zone = match.group(8)
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds * NS + int(fraction)


def line_timestamp(line):
    """Timestamp (ns) a ``docker logs --timestamps`` line starts with, or None (a docker CLI message, garbage)."""
    head = line[:48]
    sep = b" " if isinstance(line, bytes) else " "
    head = head.split(sep, 1)[0].rstrip(b"\r\n" if isinstance(line, bytes) else "\r\n")
    return parse_timestamp(head)


def format_since(ns):
    """``docker logs --since`` value for a timestamp: Unix seconds with nanoseconds, no time zone to get wrong."""
    seconds, fraction = divmod(ns, NS)
    return f"{seconds}.{fraction:09d}"


def format_timestamp(ns):
    """RFC3339Nano (UTC) for messages."""
    seconds, fraction = divmod(ns, NS)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{fraction:09d}Z"


def complete_length(data):
    """Length of the complete lines (up to and including the last newline) at the start of ``data``."""
    return data.rfind(b"\n") + 1


def newest_timestamp(lines):
    """The newest timestamp among ``lines``, or None. (stdout and stderr lines may be slightly out of order.)"""
    newest = None
    for line in lines:
        ts = line_timestamp(line)
        if ts is not None and (newest is None or ts > newest):
            newest = ts
    return newest


class LineFilter:
    """Decides which lines of a ``docker logs`` session are written.

    ``newest`` is the newest timestamp written so far. Each (re)attach starts with :meth:`attach`, which fixes the
    floor at ``newest``: lines of that session not newer than the floor were written before and are skipped, as are
    lines without a timestamp. Within a session every timestamped line is written, in the order docker gives them.
    """

    def __init__(self, newest=None):
        self.newest = newest
        self.floor = newest

    def attach(self):
        """Start a session; return the ``--since`` value (None: from the container's start)."""
        self.floor = self.newest
        return None if self.floor is None else format_since(self.floor)

    def accept(self, ts):
        if ts is None:
            return False
        if self.floor is not None and ts <= self.floor:
            return False
        if self.newest is None or ts > self.newest:
            self.newest = ts
        return True


def resume_point(path, tail_bytes=TAIL_BYTES):
    """(newest timestamp, length to keep) of an existing stream file; (None, None) when there is none.

    The length to keep drops a trailing incomplete line (a streamer killed mid-write): it is fetched again.
    """
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(0, size - tail_bytes)
            handle.seek(start)
            data = handle.read()
    except FileNotFoundError:
        return None, None
    keep = complete_length(data)
    lines = data[:keep].split(b"\n")
    if start > 0 and lines:
        lines = lines[1:]  # the first one is probably cut
    return newest_timestamp(lines), start + keep


def state_paths(state_dir, container):
    base = os.path.join(state_dir, container)
    return {"pidfile": base + ".pid", "meta": base + ".json", "diag": base + ".streamer.log"}


def same_file(a, b):
    return bool(a) and bool(b) and os.path.realpath(a) == os.path.realpath(b)


# -- pidfile and state ----------------------------------------------------------------------------------------


def pid_alive(pid):
    """True while ``pid`` is a live process (a zombie counts as gone)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def read_state(state_dir, container):
    """What the state directory says about the streamer of ``container``: running (its pidfile is locked), pid, file."""
    paths = state_paths(state_dir, container)
    state = {"container": container, "running": False, "pid": None}
    try:
        with open(paths["meta"]) as handle:
            meta = json.load(handle)
        if isinstance(meta, dict):
            for key in ("service", "file", "job_id", "docker"):
                state[key] = meta.get(key)
            meta_pid = meta.get("pid")
        else:
            meta_pid = None
    except (OSError, ValueError):
        meta_pid = None
    try:
        fd = os.open(paths["pidfile"], os.O_RDONLY)
    except FileNotFoundError:
        fd = None
    if fd is not None:
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                state["running"] = True
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
            with contextlib.suppress(ValueError, IndexError):
                state["pid"] = int(os.read(fd, 64).split()[0])
        finally:
            os.close(fd)
    # The metadata belongs to the running streamer only when it says so (it is written after the pidfile).
    if state["running"] and meta_pid != state["pid"]:
        for key in ("service", "file", "job_id"):
            state[key] = None
    file = state.get("file")
    state["size"] = os.path.getsize(file) if file and os.path.isfile(file) else None
    return state


def remove_stale_pidfiles(state_dir):
    """Unlink every pidfile of ``state_dir`` that no streamer holds (a streamer killed without its cleanup: SIGKILL, a
    reboot), of any container: the state dir then names only live streamers. Each is locked before it is unlinked, so
    a streamer taking it at that moment finds it unlinked and locks a new one (lock_pidfile). The containers whose
    pidfile was removed, sorted."""
    removed = []
    try:
        names = sorted(n for n in os.listdir(state_dir) if n.endswith(".pid"))
    except FileNotFoundError:
        return removed
    for name in names:
        path = os.path.join(state_dir, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live streamer holds it
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.fstat(fd), os.stat(path)):
                    os.unlink(path)
                    removed.append(name[: -len(".pid")])
        finally:
            os.close(fd)
    return removed


def write_json_atomic(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


def lock_pidfile(path, wait=5.0):
    """Open and exclusively lock the pidfile (readers hold shared locks for an instant: retry for ``wait`` s)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return None
            time.sleep(0.05)
    # The path may have been unlinked by the streamer that held it just before: lock the file now at the path.
    try:
        same = os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        same = False
    if not same:
        os.close(fd)
        return lock_pidfile(path, max(0.0, deadline - time.monotonic()))
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def log(message):
    """A line of the streamer's own diagnostics (its stderr is the .streamer.log file)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sys.stderr.write(f"{stamp} [{os.getpid()}] {message}\n")
    sys.stderr.flush()


# -- the streamer ---------------------------------------------------------------------------------------------


def _die_with_parent():
    """preexec_fn of ``docker logs``: SIGTERM it when the streamer dies, even by SIGKILL (Linux)."""
    libc = _LIBC.get("libc")
    if libc is not None:
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


_LIBC = {}


class Streamer:
    def __init__(self, docker, container, path, poll=0.5):
        self.docker = docker
        self.container = container
        self.path = path
        self.poll = poll
        self.stop = threading.Event()
        self.child = None
        self.sessions = 0

    def on_signal(self, signum, _frame):
        self.stop.set()
        child = self.child
        if child is not None and child.returncode is None:
            with contextlib.suppress(OSError):
                child.terminate()

    def inspect(self):
        """(id, running, started_at) of the container, or None when there is none (yet)."""
        fmt = "{{.Id}} {{.State.Running}} {{.State.StartedAt}}"
        try:
            result = subprocess.run(
                [self.docker, "container", "inspect", "--format", fmt, self.container],
                check=False,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log(f"docker container inspect {self.container}: {exc}")
            return None
        fields = result.stdout.decode("utf-8", "replace").split()
        if result.returncode != 0 or len(fields) != 3:
            return None
        return fields[0], fields[1] == "true", fields[2]

    def run(self):
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        newest, keep = resume_point(self.path)
        with open(self.path, "ab") as out:
            if keep is not None and keep != out.seek(0, os.SEEK_END):
                log(f"dropping an incomplete last line of {self.path}")
                out.truncate(keep)
            line_filter = LineFilter(newest)
            if newest is not None:
                log(f"resuming {self.path} after {format_timestamp(newest)}")
            try:
                self._loop(out, line_filter)
            finally:
                out.flush()
                os.fsync(out.fileno())
        log(f"stopped; {self.path} flushed")

    def _loop(self, out, line_filter):
        attached_to = None  # (id, started_at) of the last session
        waiting = False
        backoff = self.poll
        while not self.stop.is_set():
            info = self.inspect()
            if info is None:
                if not waiting:
                    log(f"waiting for container {self.container}")
                    waiting = True
                self.stop.wait(self.poll)
                continue
            waiting = False
            key = (info[0], info[2])
            if not info[1] and key == attached_to:
                # Stopped and already read to its end: nothing new until it starts again.
                self.stop.wait(self.poll)
                continue
            began = time.monotonic()
            written = self._session(out, line_filter)
            attached_to = key
            # Sessions that end at once without output (a docker error, a container stuck restarting) back off.
            backoff = self.poll if written or time.monotonic() - began > 5 else min(backoff * 2, 10.0)
            self.stop.wait(backoff)

    def _session(self, out, line_filter):
        since = line_filter.attach()
        cmd = [self.docker, "logs", "--follow", "--timestamps"]
        if since is not None:
            cmd += ["--since", since]
        cmd.append(self.container)
        self.sessions += 1
        try:
            child = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            log(f"{' '.join(cmd)}: {exc}")
            return 0
        self.child = child
        if self.stop.is_set():
            child.terminate()
        log(f"attached: {' '.join(cmd)}")
        written = skipped = 0
        try:
            for line in iter(child.stdout.readline, b""):
                ts = line_timestamp(line)
                if ts is None:
                    log(f"docker: {line.decode('utf-8', 'replace').rstrip()}")
                    continue
                if not line_filter.accept(ts):
                    skipped += 1
                    continue
                if not line.endswith(b"\n"):
                    line += b"\n"
                out.write(line)
                out.flush()
                written += 1
        finally:
            child.stdout.close()
            try:
                rc = child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                rc = child.wait()
            self.child = None
        log(f"detached (rc {rc}): {written} lines written, {skipped} already in the file skipped")
        return written


# -- subcommands ----------------------------------------------------------------------------------------------


def cmd_run(args):
    paths = state_paths(args.state_dir, args.container)
    os.makedirs(args.state_dir, exist_ok=True)
    fd = lock_pidfile(paths["pidfile"])
    if fd is None:
        log(f"another streamer holds {paths['pidfile']}")
        return EXIT_ALREADY_RUNNING
    streamer = Streamer(args.docker, args.container, os.path.abspath(args.file), args.poll)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, streamer.on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        import ctypes

        _LIBC["libc"] = ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        pass
    meta = {
        "pid": os.getpid(),
        "container": args.container,
        "service": args.service,
        "file": os.path.abspath(args.file),
        "job_id": args.job_id,
        "docker": args.docker,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json_atomic(paths["meta"], meta)
    log(f"streaming {args.container} into {meta['file']} (job {args.job_id})")
    try:
        streamer.run()
    finally:
        meta["stopped"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with contextlib.suppress(OSError):
            write_json_atomic(paths["meta"], meta)
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(fd), os.stat(paths["pidfile"])):
                os.unlink(paths["pidfile"])
        os.close(fd)
    return 0


def stop_streamers(state_dir, containers, timeout):
    """SIGTERM every running streamer of ``containers``, wait for all to exit, SIGKILL the late ones."""
    states = {c: read_state(state_dir, c) for c in containers}
    # A streamer that has just locked its pidfile writes its pid an instant later.
    deadline = time.monotonic() + 2
    while any(s["running"] and not s["pid"] for s in states.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
        states = {c: read_state(state_dir, c) for c in containers}
    signalled = {}
    for container, state in states.items():
        if state["running"] and state["pid"]:
            try:
                os.kill(state["pid"], signal.SIGTERM)
                signalled[container] = state["pid"]
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    pending = dict(signalled)
    # Gone means the pidfile lock is released and the process has exited: the lock goes a moment before the
    # interpreter does, and a caller told "stopped" must not find the pid still alive.
    while pending and time.monotonic() < deadline:
        for container, pid in list(pending.items()):
            if not read_state(state_dir, container)["running"] and not pid_alive(pid):
                del pending[container]
        if pending:
            time.sleep(0.05)
    killed = set(pending)
    for pid in pending.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    kill_deadline = time.monotonic() + 5
    while pending and time.monotonic() < kill_deadline:
        pending = {c: p for c, p in pending.items() if read_state(state_dir, c)["running"] or pid_alive(p)}
        if pending:
            time.sleep(0.05)
    results = []
    for container in containers:
        state = read_state(state_dir, container)
        state["stopped"] = container in signalled
        if container in signalled:
            state["pid"] = signalled[container]
        state["killed"] = container in killed
        results.append(state)
    return results, signalled, pending


def cmd_stop(args):
    results, signalled, stuck = stop_streamers(args.state_dir, args.containers, args.timeout)
    summary = []
    for state in results:
        size = "no file" if state["size"] is None else f"{state['size']} bytes"
        what = "killed" if state["killed"] else "stopped" if state["stopped"] else "not running"
        summary.append(f"{state.get('service') or state['container']}: {state.get('file') or '-'} ({size}; {what})")
    out = {"changed": bool(signalled), "streamers": results, "summary": summary}
    if stuck:
        out["failed"] = True
        out["msg"] = f"streamers still running after SIGKILL: {sorted(stuck)}"
        emit(out)
        return 1
    emit(out)
    return 0


def cmd_status(args):
    emit({"changed": False, "streamers": [read_state(args.state_dir, c) for c in args.containers]})
    return 0


def cmd_start(args):
    path = os.path.abspath(args.file)
    stale = remove_stale_pidfiles(args.state_dir)
    state = read_state(args.state_dir, args.container)
    if state["running"] and same_file(state.get("file"), path):
        emit({"changed": bool(stale), "started": False, "stale_removed": stale, **state})
        return 0
    replaced = None
    if state["running"]:
        results, _signalled, stuck = stop_streamers(args.state_dir, [args.container], args.timeout)
        if stuck:
            return fail(f"the streamer of {args.container} (pid {state['pid']}) does not stop")
        replaced = results[0]
    paths = state_paths(args.state_dir, args.container)
    os.makedirs(args.state_dir, exist_ok=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "run",
        "--state-dir",
        args.state_dir,
        "--container",
        args.container,
        "--service",
        args.service,
        "--job-id",
        args.job_id,
        "--file",
        path,
        "--docker",
        args.docker,
        "--poll",
        str(args.poll),
    ]
    with open(paths["diag"], "ab") as diag:
        # A new session, no terminal and no inherited descriptor: neither an SSH session nor the ansible process
        # waits for it, and their end does not take it down.
        child = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=diag, stderr=diag, close_fds=True, start_new_session=True, cwd="/"
        )
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        state = read_state(args.state_dir, args.container)
        if state["running"] and state["pid"] == child.pid and same_file(state.get("file"), path):
            break
        rc = child.poll()
        if rc is not None:
            return fail(f"the streamer exited with status {rc}: {tail(paths['diag'])}")
        if time.monotonic() > deadline:
            child.kill()
            return fail(f"the streamer did not start within {START_TIMEOUT:.0f} s: {tail(paths['diag'])}")
        time.sleep(0.05)
    emit({"changed": True, "started": True, "replaced": replaced, "stale_removed": stale, **state})
    return 0


def tail(path, lines=5):
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 4096))
            return " | ".join(handle.read().decode("utf-8", "replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no diagnostics)"


def emit(data):
    sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
    sys.stdout.flush()


def fail(message):
    sys.stderr.write(message + "\n")
    emit({"changed": False, "failed": True, "msg": message})
    return 1


def parser():
    top = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = top.add_subparsers(dest="command", required=True)
    for name in ("start", "run", "stop", "status"):
        p = sub.add_parser(name)
        p.add_argument("--state-dir", required=True, help="pidfiles, metadata and diagnostics live here")
        if name in ("start", "run"):
            p.add_argument("--container", required=True)
            p.add_argument("--file", required=True, help="the stream file (appended to)")
            p.add_argument("--service", default="")
            p.add_argument("--job-id", default="")
            p.add_argument("--docker", default="docker", help="the docker CLI")
            p.add_argument("--poll", type=float, default=0.5, help="seconds between looks for the container")
        else:
            p.add_argument("--container", dest="containers", action="append", required=True)
        if name in ("start", "stop"):
            p.add_argument("--timeout", type=float, default=20.0, help="seconds a streamer may take to stop")
    return top


def main(argv=None):
    args = parser().parse_args(argv)
    handler = {"start": cmd_start, "run": cmd_run, "stop": cmd_stop, "status": cmd_status}[args.command]
    try:
        return handler(args)
    except OSError as exc:
        if args.command == "run":
            raise
        return fail(f"{args.command}: {exc.strerror or exc} ({exc.filename or errno.errorcode.get(exc.errno, '')})")


if __name__ == "__main__":
    sys.exit(main())
