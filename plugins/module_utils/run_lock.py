# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A run lock that outlives the process that takes it: a directory, its holder named in an ``owner`` file.

The lock is the directory ``path`` (so it lasts across tasks and module runs). Its ``owner`` file, written atomically
(a temporary file renamed into place), holds JSON ``{owner, token, since, pid, host}``: who holds it, the token of
the run that holds it, since when (UTC, ISO 8601), and the process and host that took it.

Every take, stale takeover and release runs under ``fcntl.flock`` on the sibling guard file ``<path>.guard``, so
deciding (is it free, is it stale, is it ours) and acting on it (mkdir, rmtree) is one step: two waiters that both
judge a lock stale take it in turn, and the second one sees the first one's fresh lock, not the stale one. The guard
file is never removed (removing it would let two processes lock two different files); it is created 0644 and opened
read-only, since ``flock`` needs no write permission.

A lock is stale when it is older than ``stale_after`` seconds, by the owner file's ``since``; a plain-text owner
file (``<owner> since <since> run <token>``, what the shell version of the rollout_lock role wrote), a missing or
unreadable one, or one whose ``since`` cannot be read, is judged by the directory's mtime instead.

Standard library only: the module that calls this runs on the managed node's Python.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import time
import uuid

OWNER_FILE = "owner"
GUARD_SUFFIX = ".guard"
# What the shell version of the role wrote: "<owner> since <since> run <token>".
LEGACY_OWNER_RE = re.compile(r"^(?P<owner>.*?) since (?P<since>\S+) run (?P<token>\S+)$")
# datetime.UTC is Python 3.11+; the managed node's Python may be older.
UTC = datetime.timezone.utc  # noqa: UP017


class LockHeld(Exception):
    """Another run holds the lock after ``wait`` seconds; ``holder`` says who (see :func:`read_holder`)."""

    def __init__(self, path, holder, wait, waited):
        self.path = path
        self.holder = holder
        self.wait = wait
        self.waited = waited
        super().__init__(held_message(path, holder, wait))


def utc_now():
    return datetime.datetime.now(UTC)


def iso(moment):
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def new_token():
    return uuid.uuid4().hex[:16]


def _parse_since(text):
    """A UTC datetime from an ISO 8601 string (naive means UTC), or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def guard_path(path):
    return path.rstrip("/") + GUARD_SUFFIX


@contextlib.contextmanager
def guarded(path):
    """Hold an exclusive ``flock`` on ``<path>.guard`` (created if missing) for the duration of the block."""
    fd = os.open(guard_path(path), os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


def read_holder(path, now=None):
    """Who holds the lock directory ``path``, or None when there is no lock.

    A dict ``{owner, token, since, pid, host, age, format}``: ``age`` in seconds (by ``since`` for a JSON owner file,
    by the directory's mtime otherwise), ``format`` one of ``json``, ``text`` (the shell version's line) or ``none``
    (no owner file, or one that cannot be read). Fields the owner file does not give are None.
    """
    now = now or utc_now()
    try:
        mtime = os.stat(path).st_mtime
    except FileNotFoundError:
        return None
    holder = {"owner": None, "token": None, "since": None, "pid": None, "host": None, "age": None, "format": "none"}
    since = None
    try:
        with open(os.path.join(path, OWNER_FILE), encoding="utf-8", errors="replace") as handle:
            text = handle.read().strip()
    except OSError:
        text = ""
    if text:
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            holder["format"] = "json"
            for key in ("owner", "token", "since", "host"):
                if data.get(key) is not None:
                    holder[key] = str(data[key])
            if isinstance(data.get("pid"), int):
                holder["pid"] = data["pid"]
            since = _parse_since(holder["since"])
        else:
            holder["format"] = "text"
            match = LEGACY_OWNER_RE.match(text)
            if match:
                holder.update(owner=match["owner"], since=match["since"], token=match["token"])
            else:
                holder["owner"] = text
    if since is None:
        since = datetime.datetime.fromtimestamp(mtime, UTC)
        if holder["since"] is None:
            holder["since"] = iso(since)
    holder["age"] = max(0, int((now - since).total_seconds()))
    return holder


def held_message(path, holder, wait):
    holder = holder or {}
    return "another rollout holds {}: {} since {} run {} - waited {} s".format(
        path,
        holder.get("owner") or "unknown",
        holder.get("since") or "unknown",
        holder.get("token") or "unknown",
        wait,
    )


def holder_text(holder):
    return "{} since {} run {}".format(
        holder.get("owner") or "unknown", holder.get("since") or "unknown", holder.get("token") or "unknown"
    )


def _write_owner(path, record):
    """Write the owner file atomically: a temporary file in the lock directory, renamed over ``owner``."""
    final = os.path.join(path, OWNER_FILE)
    tmp = os.path.join(path, f".{OWNER_FILE}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.rename(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _create(path, record):
    """mkdir the lock and write its owner file; the lock is removed again when the owner file cannot be written."""
    os.mkdir(path, 0o755)
    try:
        _write_owner(path, record)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


def _result(record, waited, taken_over, held):
    return {
        "owner": record["owner"],
        "token": record["token"],
        "since": record["since"],
        "waited": round(waited, 2),
        "taken_over": taken_over,
        "released": False,
        "held": held,
    }


def take(path, owner, token=None, wait=0, stale_after=7200, poll=2.0, check_mode=False, clock=None, sleep=None):
    """Take the lock directory ``path`` for ``owner`` and run ``token`` (a new one when None).

    Waits up to ``wait`` seconds (trying every ``poll`` seconds) while another run holds it; a lock older than
    ``stale_after`` seconds is taken over, and ``taken_over`` names its holder. A lock that already carries
    ``token`` is this run's: it is kept as it is. Raises :class:`LockHeld` when the lock is still held after ``wait``.

    In check mode nothing is created, written or removed (not even the guard file): the lock is read, waited for the
    same way, and the result says what a real run would have done (``held`` is false).

    Returns ``{owner, token, since, waited, taken_over, released, held, action}``, ``action`` one of ``taken``,
    ``taken_over``, ``kept`` (already this run's), or in check mode ``would_take``, ``would_take_over``,
    ``would_keep``.
    """
    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    token = token or new_token()
    path = path.rstrip("/") or path
    start = clock()
    deadline = start + max(wait, 0)
    prefix = "would_" if check_mode else ""
    while True:
        now = utc_now()
        record = {
            "owner": owner,
            "token": token,
            "since": iso(now),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        with contextlib.nullcontext() if check_mode else guarded(path):
            holder = read_holder(path, now)
            if holder is None:
                if check_mode:
                    return dict(_result(record, clock() - start, None, False), action="would_take")
                try:
                    _create(path, record)
                except FileExistsError:
                    # Created outside the guard (an older rollout_lock, by hand): judge it on the next pass.
                    continue
                return dict(_result(record, clock() - start, None, True), action="taken")
            if holder["token"] == token:
                kept = {key: holder[key] for key in ("owner", "token", "since")}
                return dict(
                    _result(kept, clock() - start, None, not check_mode),
                    action=prefix + ("keep" if check_mode else "kept"),
                )
            if holder["age"] > stale_after:
                previous = {key: value for key, value in holder.items() if key != "format"}
                if check_mode:
                    return dict(_result(record, clock() - start, previous, False), action="would_take_over")
                shutil.rmtree(path)
                _create(path, record)
                return dict(_result(record, clock() - start, previous, True), action="taken_over")
        left = deadline - clock()
        if left <= 0:
            raise LockHeld(path, holder, wait, clock() - start)
        sleep(min(max(poll, 0.01), left))


def release(path, token, check_mode=False):
    """Release the lock directory ``path`` when it carries ``token``; leave any other run's lock in place.

    Returns ``{owner, token, since, waited, taken_over, released, held, action}``: ``owner``/``token``/``since`` of
    the lock found (None when there was none), ``released`` whether it was removed (in check mode: would be),
    ``action`` one of ``released``, ``absent`` (no lock), ``not_ours`` (another run's lock, left in place).
    """
    path = path.rstrip("/") or path
    with contextlib.nullcontext() if check_mode else guarded(path):
        holder = read_holder(path)
        result = {"waited": 0.0, "taken_over": None, "held": False}
        if holder is None:
            return dict(result, owner=None, token=None, since=None, released=False, action="absent")
        result.update(owner=holder["owner"], token=holder["token"], since=holder["since"])
        if holder["token"] != token:
            return dict(result, released=False, action="not_ours")
        if not check_mode:
            try:
                shutil.rmtree(path)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
        return dict(result, released=True, action="released")
