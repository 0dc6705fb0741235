# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Pipelined relay of one large file over plain TCP: the data path of ``image_distribute``'s broadcast.

Every participant holds a :class:`Blob` (the file as far as it has arrived) and runs a :class:`Server` that serves
any offset of it, following its growth, so a node forwards each block while it is still receiving the next one.
A node fetches from the first entry of its upstream list (its predecessor in the chain) and, when that upstream
dies, stalls or sends an error, resumes from the same offset at the next entry (the predecessor's predecessor...,
the source last): a dead relay is routed around within ``stall_timeout`` seconds.

Framing, server to client: 9-byte headers ``>cQ`` (kind, length). ``D`` data of ``length`` bytes follows, ``W`` the
server is alive but waiting for its own upstream (a heartbeat: a starved relay is not a dead one), ``E`` end of
file, ``X`` error (``length`` bytes of UTF-8 message follow). Requests are one line:
``AICRELAY/1 GET <sha256> <offset> <name>``, ``AICRELAY/1 REPORT <name>`` followed by JSON lines (progress), or
``AICRELAY/1 STATUS`` (answered with one JSON line: bytes served, active clients, every node's last report).

Integrity: the receiver hashes every byte it writes; the file keeps its ``.part`` name until the sha256 matches
the expected one. Control and progress travel on the same port; ssh is not in the data path (it would cost CPU).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import threading
import time

from ansible_collections.aic.stack.plugins.module_utils.digest import sha256_file

MAGIC = "AICRELAY/1"
HEADER = struct.Struct(">cQ")
FRAME_MAX = 4 * 1024 * 1024
RECV_BUF = 1024 * 1024
HEARTBEAT_S = 1.0


class RelayError(Exception):
    pass


class Blob:
    """A file being received (or already complete) that servers read while it grows."""

    def __init__(self, path, total, sha256, complete=False):
        self.path = path
        self.total = int(total)
        self.sha256 = sha256
        self.cond = threading.Condition()
        self.written = self.total if complete else 0
        self.failed = None
        mode = os.O_RDONLY if complete else os.O_RDWR | os.O_CREAT | os.O_TRUNC
        self.fd = os.open(path, mode, 0o644)

    @property
    def done(self):
        return self.written >= self.total

    def advance(self, count):
        with self.cond:
            self.written += count
            self.cond.notify_all()

    def fail(self, message):
        with self.cond:
            self.failed = message
            self.cond.notify_all()

    def wait_beyond(self, offset, timeout):
        """Bytes available after ``offset`` (0 after ``timeout`` without growth, or when failed)."""
        with self.cond:
            if self.written <= offset and not self.failed:
                self.cond.wait(timeout)
            return max(0, self.written - offset)

    def close(self):
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _recv_exact(sock, count):
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise RelayError("connection closed by the peer")
        data.extend(chunk)
    return bytes(data)


def _recv_line(sock, limit=4096):
    data = bytearray()
    while not data.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise RelayError("connection closed before the request line")
        data.extend(chunk)
        if len(data) > limit:
            raise RelayError("request line too long")
    return data.decode("utf-8").strip()


class Server:
    """Serves a :class:`Blob` to any number of clients; collects their progress reports (``reports``)."""

    def __init__(self, blob, address="0.0.0.0", port=0, client_timeout=60.0):
        # blob may come later (attach): until then readers get heartbeats; refuse() turns them away instead.
        self.blob = blob
        self.refusal = None
        self.decided = threading.Event()
        if blob is not None:
            self.decided.set()
        self.client_timeout = client_timeout
        self.sock = socket.create_server((address, port), reuse_port=False, backlog=64)
        self.port = self.sock.getsockname()[1]
        self.active = 0
        self.served_bytes = 0
        self.clients = []
        self.reports = {}
        self.last_client = time.monotonic()
        self.lock = threading.Lock()
        self.closed = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.closed:
            try:
                conn, _peer = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        with self.lock:
            self.active += 1
            self.last_client = time.monotonic()
        try:
            conn.settimeout(30)
            line = _recv_line(conn)
            parts = line.split()
            if len(parts) >= 3 and parts[0] == MAGIC and parts[1] == "REPORT":
                self._reports(conn, parts[2])
            elif len(parts) == 2 and parts[0] == MAGIC and parts[1] == "STATUS":
                conn.sendall((json.dumps(self.status()) + "\n").encode("utf-8"))
            elif len(parts) == 5 and parts[0] == MAGIC and parts[1] == "GET":
                self._serve(conn, parts[2], int(parts[3]), parts[4])
            else:
                self._error(conn, f"bad request: {line[:80]!r}")
        except (OSError, ValueError, RelayError):
            pass
        finally:
            with self.lock:
                self.active -= 1
                self.last_client = time.monotonic()
            conn.close()

    @staticmethod
    def _error(conn, message):
        data = message.encode("utf-8")
        conn.sendall(HEADER.pack(b"X", len(data)) + data)

    def attach(self, blob):
        self.blob = blob
        self.decided.set()

    def refuse(self, message):
        self.refusal = message
        self.decided.set()

    def _serve(self, conn, sha256, offset, name):
        conn.settimeout(self.client_timeout)
        while not self.decided.wait(HEARTBEAT_S):
            conn.sendall(HEADER.pack(b"W", 0))
        if self.refusal:
            return self._error(conn, self.refusal)
        blob = self.blob
        if sha256 != blob.sha256:
            return self._error(conn, f"this relay holds sha256 {blob.sha256}, not {sha256}")
        if not 0 <= offset <= blob.total:
            return self._error(conn, f"offset {offset} outside 0..{blob.total}")
        with self.lock:
            self.clients.append({"name": name, "offset": offset})
        # A client that stops reading (stalled node) must not hold this server forever.
        conn.settimeout(self.client_timeout)
        with os.fdopen(os.dup(blob.fd), "rb", buffering=0) as source:
            self._stream(conn, source, offset)

    def _stream(self, conn, source, offset):
        blob = self.blob
        while offset < blob.total:
            available = blob.wait_beyond(offset, HEARTBEAT_S)
            if blob.failed:
                return self._error(conn, f"relay failed: {blob.failed}")
            if not available:
                conn.sendall(HEADER.pack(b"W", 0))
                continue
            count = min(available, FRAME_MAX)
            conn.sendall(HEADER.pack(b"D", count))
            # socket.sendfile: zero-copy, and it waits on a full socket buffer within the socket's timeout.
            if conn.sendfile(source, offset, count) != count:
                raise RelayError("short sendfile")
            offset += count
            with self.lock:
                self.served_bytes += count
        conn.sendall(HEADER.pack(b"E", 0))
        # Let the client close first, so its last bytes are never cut by a reset.
        conn.settimeout(10)
        with contextlib.suppress(OSError):
            conn.recv(1)

    def _reports(self, conn, name):
        conn.settimeout(None)
        buffer = b""
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    report = json.loads(line)
                except ValueError:
                    continue
                report["received_at"] = time.time()
                with self.lock:
                    self.reports[name] = report

    def snapshot(self):
        with self.lock:
            return {key: dict(value) for key, value in self.reports.items()}

    def status(self):
        with self.lock:
            return {
                "served": self.served_bytes,
                "active": self.active,
                "nodes": {k: dict(v) for k, v in self.reports.items()},
            }

    def idle_for(self):
        with self.lock:
            return 0.0 if self.active else time.monotonic() - self.last_client

    def close(self):
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()


def connect(host, port, timeout):
    """Connect, retrying refusals until ``timeout`` (the next hop may not listen yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((host, int(port)), timeout=min(5.0, timeout))
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise RelayError(f"cannot connect to {host}:{port}: {exc}") from exc
            time.sleep(0.2)


class Fetcher:
    """Fills a :class:`Blob` from the first upstream that works, resuming at the same offset on failures."""

    def __init__(self, blob, upstreams, name, stall_timeout=10.0, connect_timeout=30.0, deadline=None):
        self.blob = blob
        self.upstreams = list(upstreams)
        self.name = name
        self.stall_timeout = float(stall_timeout)
        self.connect_timeout = float(connect_timeout)
        self.deadline = deadline
        self.digest = hashlib.sha256()
        self.events = []
        self.current = None
        self.started = time.time()
        self.finished = None

    def _event(self, upstream, message):
        self.events.append(
            {
                "at": round(time.time() - self.started, 3),
                "upstream": upstream,
                "offset": self.blob.written,
                "event": message,
            }
        )

    def run(self):
        if not self.upstreams:
            raise RelayError("no upstream to fetch from")
        index = 0
        while not self.blob.done:
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise RelayError(f"timed out after {self.blob.written} of {self.blob.total} bytes")
            upstream = self.upstreams[index]
            label = upstream.get("name") or "{}:{}".format(upstream["host"], upstream["port"])
            self.current = label
            try:
                self._fetch_from(upstream)
            except (OSError, RelayError) as exc:
                message = (
                    f"timeout: no data for {self.stall_timeout:.0f} s" if isinstance(exc, TimeoutError) else str(exc)
                )
                self._event(label, message)
                if index + 1 >= len(self.upstreams):
                    raise RelayError(
                        f"every upstream failed at byte {self.blob.written} of {self.blob.total}; last: {label}: {message}"
                    ) from exc
                index += 1
                self._event(self.upstreams[index].get("name", ""), "switching upstream")
        self.finished = time.time()
        return self.digest.hexdigest()

    def _fetch_from(self, upstream):
        blob = self.blob
        # Refusals are retried while the chain starts (the upstream may not listen yet); later a refusal means
        # the upstream is gone, and the next one is tried at once.
        sock = connect(upstream["host"], upstream["port"], self.connect_timeout if not blob.written else 0.5)
        try:
            sock.settimeout(self.stall_timeout)
            sock.sendall(f"{MAGIC} GET {blob.sha256} {blob.written} {self.name}\n".encode())
            buf = bytearray(RECV_BUF)
            view = memoryview(buf)
            while True:
                kind, length = HEADER.unpack(_recv_exact(sock, HEADER.size))
                if kind == b"W":
                    continue
                if kind == b"E":
                    if not blob.done:
                        raise RelayError(f"upstream ended at byte {blob.written} of {blob.total}")
                    return
                if kind == b"X":
                    raise RelayError(_recv_exact(sock, length).decode("utf-8", "replace"))
                if kind != b"D" or blob.written + length > blob.total:
                    raise RelayError(f"protocol error: frame {kind!r} of {length} bytes")
                left = length
                while left:
                    got = sock.recv_into(view, min(left, RECV_BUF))
                    if not got:
                        raise RelayError("connection closed mid-frame")
                    os.pwrite(blob.fd, view[:got], blob.written)
                    self.digest.update(view[:got])
                    blob.advance(got)
                    left -= got
        finally:
            sock.close()


class Reporter:
    """Sends this node's progress as JSON lines to the source every ``interval`` seconds (best effort)."""

    def __init__(self, target, name, state_fn, interval=1.0):
        self.target = target
        self.name = name
        self.state_fn = state_fn
        self.interval = interval
        self.stop = threading.Event()
        self.sock = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _send(self, state):
        if self.sock is None:
            self.sock = socket.create_connection((self.target["host"], int(self.target["port"])), timeout=5)
            self.sock.sendall((f"{MAGIC} REPORT {self.name}\n").encode())
        self.sock.sendall((json.dumps(state) + "\n").encode("utf-8"))

    def _run(self):
        while not self.stop.is_set():
            self.push()
            self.stop.wait(self.interval)

    def push(self):
        try:
            self._send(self.state_fn())
        except OSError:
            if self.sock is not None:
                self.sock.close()
            self.sock = None

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.push()
        if self.sock is not None:
            self.sock.close()


def relay(
    dest,
    sha256,
    size,
    upstreams,
    name,
    listen=("0.0.0.0", 0),
    serve=True,
    report_to=None,
    stall_timeout=10.0,
    connect_timeout=30.0,
    timeout=3600.0,
    linger=3.0,
    report_interval=1.0,
    on_ready=None,
    has_image=None,
):
    """Receive ``dest`` (verified) while serving it onward; return a result dict. Raises RelayError on failure.

    A complete ``dest`` whose sha256 matches is reused (no bytes move) and still served to the nodes after this one.
    ``on_ready()`` is called once this node serves (or, without serving, is about to fetch). ``has_image()``, when
    given, is asked first: a node that has the image receives nothing and turns its readers away to the nodes
    before it (they move on at once).
    """
    start = time.time()
    deadline = time.monotonic() + timeout
    part = dest + ".part"
    try:
        # A reader that takes nothing for two stall timeouts is dead (its own readers have moved on by then).
        server = Server(None, *listen, client_timeout=max(2 * float(stall_timeout), 5.0)) if serve else None
    except OSError as exc:
        raise RelayError(f"cannot serve on {listen[0]}:{listen[1]}: {exc}") from exc
    if on_ready is not None:
        on_ready()
    state = {"state": "checking"}
    blob = fetcher = None
    marks = {"t": time.monotonic(), "bytes": 0, "rate": 0.0}

    def snapshot():
        written = blob.written if blob else 0
        now = time.monotonic()
        if now - marks["t"] >= 0.5:
            marks["rate"] = (written - marks["bytes"]) / (now - marks["t"])
            marks["t"], marks["bytes"] = now, written
        return {
            "node": name,
            "state": state["state"],
            "bytes": written,
            "total": int(size),
            "rate": round(marks["rate"]),
            "upstream": fetcher.current if fetcher else None,
            "served": server.served_bytes if server else 0,
            "verified_at": state.get("verified_at"),
            "switches": sum(1 for e in fetcher.events if e["event"] == "switching upstream") if fetcher else 0,
            "error": state.get("error"),
        }

    reporter = Reporter(report_to, name, snapshot, report_interval) if report_to else None

    def linger_and_close():
        # Stay up while nodes after this one still read from it (or are told to go elsewhere).
        if server is not None:
            while time.monotonic() < deadline and (server.active or server.idle_for() < linger):
                time.sleep(0.2)
            server.close()
        if reporter is not None:
            reporter.close()

    try:
        image_present = bool(has_image and has_image())
    except Exception as exc:  # noqa: BLE001 - a broken engine must fail this node, not hang its readers
        state.update(state="failed", error=f"cannot ask the Docker engine: {exc}")
        if server is not None:
            server.refuse(f"relay failed: {state['error']}")
        linger_and_close()
        raise RelayError(state["error"], {"image_present": False, "bytes_received": 0}) from exc
    if image_present:
        # Nothing moves to a node that has the image; nodes after it are sent on to the ones before it.
        state["state"] = "has-image"
        if server is not None:
            server.refuse("has the image already, not relaying")
        linger_and_close()
        return {
            "image_present": True,
            "present": False,
            "bytes_received": 0,
            "started_at": start,
            "verified_at": None,
            "seconds": round(time.time() - start, 3),
            "served_bytes": 0,
            "events": [],
        }
    present = os.path.isfile(dest) and os.path.getsize(dest) == int(size) and sha256_file(dest) == sha256
    blob = Blob(dest if present else part, size, sha256, complete=present)
    fetcher = Fetcher(blob, upstreams, name, stall_timeout, connect_timeout, deadline)
    if server is not None:
        server.attach(blob)
    state["state"] = "present" if present else "receiving"
    error = None
    try:
        if not present:
            digest = fetcher.run()
            if digest != sha256:
                raise RelayError(f"sha256 mismatch: received {digest}, the manifest says {sha256}; nothing is loaded")
            os.fsync(blob.fd)
            os.replace(part, dest)
        state["verified_at"] = time.time()
        state["state"] = "verified"
    except RelayError as exc:
        error = str(exc.args[0])
        state.update(state="failed", error=error)
        blob.fail(error)
        with contextlib.suppress(OSError):
            os.unlink(part)
    linger_and_close()
    blob.close()
    result = {
        "image_present": False,
        "present": present,
        "bytes_received": 0 if present else blob.written,
        "started_at": start,
        "verified_at": state.get("verified_at"),
        "seconds": round((fetcher.finished or time.time()) - start, 3),
        "served_bytes": server.served_bytes if server else 0,
        "events": fetcher.events,
    }
    if error:
        raise RelayError(error, result)
    return result


def query_status(host, port, timeout=5.0):
    """The STATUS document of a relay server."""
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall((f"{MAGIC} STATUS\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


def spawn_daemon(body):
    """Run ``body(tell)`` in a daemon detached from this process (own session, stdio on /dev/null).

    ``body`` calls ``tell("ready")`` once it serves, or ``tell("error <why>")``; returns ``(pid, None)`` for ready,
    ``(None, why)`` otherwise. A body that ends without telling counts as an error.
    """
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked daemon
        try:
            os.close(read_fd)
            os.setsid()
            if os.fork():
                os._exit(0)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.closerange(3, write_fd)
            os.closerange(write_fd + 1, 65536)
            told = []

            def tell(message):
                if not told:
                    told.append(message)
                    line = f"ready {os.getpid()}" if message == "ready" else message
                    os.write(write_fd, f"{line}\n".encode())
                    os.close(write_fd)

            try:
                body(tell)
            finally:
                tell("error the daemon ended before it was ready")
        finally:
            os._exit(0)
    os.close(write_fd)
    os.waitpid(child, 0)
    with os.fdopen(read_fd, "rb") as pipe:
        line = pipe.readline().decode("utf-8", "replace").strip()
    if line.startswith("ready "):
        return int(line.split()[1]), None
    return None, (line[len("error ") :] if line.startswith("error ") else line) or "no answer"
