"""The relay data path (plugins/module_utils/relay.py) over real TCP sockets on localhost.

No test bed here: every participant runs in a thread of this process. Misbehaving upstreams (one that stops
mid-file, one that only sends heartbeats for a while, one that sends wrong bytes) are small real TCP servers
speaking the relay's framing, written below and named for what they do.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time

import pytest

from ansible_collections.aic.stack.plugins.module_utils import relay

SIZE = 3 * 1024 * 1024 + 12345


@pytest.fixture
def payload(tmp_path):
    data = os.urandom(SIZE)
    path = tmp_path / "image.tar.zst"
    path.write_bytes(data)
    return path, data, hashlib.sha256(data).hexdigest()


@pytest.fixture
def source(payload):
    path, _data, sha = payload
    blob = relay.Blob(str(path), SIZE, sha, complete=True)
    server = relay.Server(blob, "127.0.0.1", 0)
    yield server
    server.close()
    blob.close()


def up(server, name="source"):
    return {"name": name, "host": "127.0.0.1", "port": server.port}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Node(threading.Thread):
    """One relay node (relay.relay) in a thread; ``result`` or ``error`` when it ends."""

    def __init__(self, dest, sha, upstreams, name, port, **kwargs):
        super().__init__(daemon=True)
        self.args = (str(dest), sha, SIZE, upstreams, name)
        self.kwargs = {"listen": ("127.0.0.1", port), "linger": 0.5, "connect_timeout": 5, **kwargs}
        self.result = self.error = None

    def run(self):
        try:
            self.result = relay.relay(*self.args, **self.kwargs)
        except relay.RelayError as exc:
            self.error = exc


class FramedServer(threading.Thread):
    """A one-connection TCP server that runs ``behave(conn, offset)`` after reading a GET request."""

    def __init__(self, behave):
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.behave = behave
        self.requests = []
        self.start()

    def run(self):
        conn, _dummy = self.sock.accept()
        with conn:
            line = relay._recv_line(conn)
            self.requests.append(line)
            self.behave(conn, int(line.split()[3]))

    def close(self):
        self.sock.close()


def send_data(conn, data):
    conn.sendall(relay.HEADER.pack(b"D", len(data)) + data)


def test_chain_of_three_moves_the_file_once_from_the_source(tmp_path, payload, source):
    _path, data, sha = payload
    ports = [free_port() for _dummy in range(3)]
    nodes = []
    for i in range(3):
        upstreams = [{"name": f"n{j}", "host": "127.0.0.1", "port": ports[j]} for j in range(i - 1, -1, -1)]
        nodes.append(Node(tmp_path / (f"n{i}.tar.zst"), sha, [*upstreams, up(source)], f"n{i}", ports[i]))
    for node in reversed(nodes):  # the last node starts first: it must wait for its upstream to listen
        node.start()
    for node in nodes:
        node.join(30)
        assert node.error is None, node.error
    for i, node in enumerate(nodes):
        assert (tmp_path / (f"n{i}.tar.zst")).read_bytes() == data
        assert not (tmp_path / (f"n{i}.tar.zst.part")).exists()
        assert node.result["bytes_received"] == SIZE and node.result["events"] == []
    # The controller sent the file once; every node but the last forwarded it once.
    assert source.served_bytes == SIZE
    assert [n.result["served_bytes"] for n in nodes] == [SIZE, SIZE, 0]


def test_an_upstream_that_stops_mid_file_is_routed_around(tmp_path, payload, source):
    _path, data, sha = payload
    cut = 1024 * 1024 + 7

    def stall(conn, offset):
        send_data(conn, data[offset:cut])
        time.sleep(5)  # alive but silent: no data, no heartbeat

    dead = FramedServer(stall)
    node = Node(tmp_path / "n.tar.zst", sha, [up(dead, "stalled"), up(source)], "n", free_port(), stall_timeout=1)
    node.start()
    node.join(30)
    dead.close()
    assert node.error is None, node.error
    assert (tmp_path / "n.tar.zst").read_bytes() == data
    events = node.result["events"]
    assert events[0]["upstream"] == "stalled" and "timeout" in events[0]["event"] and events[0]["offset"] == cut
    assert events[1]["event"] == "switching upstream"
    # The source was asked for the rest only, from the byte where the stalled relay stopped.
    assert source.clients == [{"name": "n", "offset": cut}]
    assert source.served_bytes == SIZE - cut


def test_a_starved_but_alive_upstream_is_not_abandoned(tmp_path, payload):
    _path, data, sha = payload

    def slow(conn, offset):
        for _dummy in range(4):  # 2 s of heartbeats, longer than the stall timeout
            conn.sendall(relay.HEADER.pack(b"W", 0))
            time.sleep(0.5)
        send_data(conn, data[offset:])
        conn.sendall(relay.HEADER.pack(b"E", 0))
        conn.recv(1)

    waiting = FramedServer(slow)
    node = Node(tmp_path / "n.tar.zst", sha, [up(waiting, "starved")], "n", free_port(), stall_timeout=1)
    node.start()
    node.join(30)
    waiting.close()
    assert node.error is None, node.error
    assert node.result["events"] == []
    assert (tmp_path / "n.tar.zst").read_bytes() == data


def test_wrong_bytes_fail_the_node_and_leave_no_file(tmp_path, payload):
    _path, data, sha = payload
    bad = bytearray(data)
    bad[SIZE // 2] ^= 0xFF

    def corrupt(conn, offset):
        send_data(conn, bytes(bad[offset:]))
        conn.sendall(relay.HEADER.pack(b"E", 0))
        conn.recv(1)

    liar = FramedServer(corrupt)
    node = Node(tmp_path / "n.tar.zst", sha, [up(liar, "corrupt")], "n", free_port())
    node.start()
    node.join(30)
    liar.close()
    assert node.error is not None
    assert "sha256 mismatch" in node.error.args[0] and hashlib.sha256(bad).hexdigest() in node.error.args[0]
    assert not (tmp_path / "n.tar.zst").exists() and not (tmp_path / "n.tar.zst.part").exists()


def test_a_failed_relay_sends_an_error_so_the_next_node_moves_on(tmp_path, payload, source):
    _path, data, sha = payload
    blob = relay.Blob(str(tmp_path / "failed.part"), SIZE, sha)
    blob.fail("sha256 mismatch")
    failed = relay.Server(blob, "127.0.0.1", 0)
    node = Node(tmp_path / "n.tar.zst", sha, [up(failed, "failed"), up(source)], "n", free_port(), stall_timeout=5)
    node.start()
    node.join(30)
    failed.close()
    assert node.error is None, node.error
    assert "relay failed: sha256 mismatch" in node.result["events"][0]["event"]
    assert (tmp_path / "n.tar.zst").read_bytes() == data


def test_a_server_refuses_another_file(payload, source, tmp_path):
    _path, _data, sha = payload
    other = hashlib.sha256(b"other").hexdigest()
    node = Node(tmp_path / "n.tar.zst", other, [up(source)], "n", free_port())
    node.start()
    node.join(30)
    assert node.error is not None and f"holds sha256 {sha}, not {other}" in node.error.args[0]


def test_a_verified_file_is_reused_and_still_served(tmp_path, payload, source):
    path, data, sha = payload
    dest = tmp_path / "have.tar.zst"
    dest.write_bytes(data)
    port = free_port()
    first = Node(dest, sha, [up(source)], "have", port, linger=3)
    first.start()
    second = Node(
        tmp_path / "next.tar.zst", sha, [{"name": "have", "host": "127.0.0.1", "port": port}], "next", free_port()
    )
    second.start()
    first.join(30)
    second.join(30)
    assert first.error is None and second.error is None
    assert first.result["present"] is True and first.result["bytes_received"] == 0
    assert source.served_bytes == 0
    assert (tmp_path / "next.tar.zst").read_bytes() == data


def test_no_upstream_left_names_the_offset_and_the_last_error(tmp_path, payload):
    _path, _data, sha = payload
    node = Node(
        tmp_path / "n.tar.zst",
        sha,
        [{"name": "gone", "host": "127.0.0.1", "port": free_port()}],
        "n",
        free_port(),
        connect_timeout=0.5,
    )
    node.start()
    node.join(30)
    assert node.error is not None
    assert f"every upstream failed at byte 0 of {SIZE}; last: gone: cannot connect" in node.error.args[0]


def test_progress_reports_reach_the_source(tmp_path, payload, source):
    _path, _data, sha = payload
    node = Node(
        tmp_path / "n.tar.zst",
        sha,
        [up(source)],
        "n",
        free_port(),
        report_to={"host": "127.0.0.1", "port": source.port},
    )
    node.start()
    node.join(30)
    deadline = time.time() + 5
    while time.time() < deadline and source.snapshot().get("n", {}).get("state") != "verified":
        time.sleep(0.1)
    report = source.snapshot()["n"]
    assert report["state"] == "verified" and report["bytes"] == SIZE and report["total"] == SIZE
    assert report["upstream"] == "source"
