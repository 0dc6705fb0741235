"""The controller end of the relay (plugins/action/image_broadcast.py): the forked source daemon and the progress
line, over real sockets on localhost."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import time

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.aic.stack.plugins.action import image_broadcast as action
from ansible_collections.aic.stack.plugins.module_utils import relay


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_gone(pid, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_source_daemon_serves_reports_status_and_stops_on_sigterm(tmp_path):
    data = os.urandom(2 * 1024 * 1024 + 3)
    src = tmp_path / "image.tar.zst"
    src.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    port = free_port()
    pid = action.start_source({"src": str(src), "sha256": sha, "size": len(data), "address": "127.0.0.1", "port": port})
    try:
        assert pid != os.getpid()
        blob = relay.Blob(str(tmp_path / "copy.part"), len(data), sha)
        fetcher = relay.Fetcher(
            blob, [{"name": "controller", "host": "127.0.0.1", "port": port}], "n1", stall_timeout=5
        )
        assert fetcher.run() == sha
        blob.close()
        status = relay.query_status("127.0.0.1", port)
        assert status["served"] == len(data)
        assert status["nodes"] == {}
    finally:
        os.kill(pid, signal.SIGTERM)
    assert wait_gone(pid), "the source daemon did not stop on SIGTERM"


def test_a_busy_port_is_a_clear_failure(tmp_path):
    src = tmp_path / "image.tar.zst"
    src.write_bytes(b"x")
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(AnsibleActionFail, match=f"cannot serve on port {port}"):
            action.start_source({"src": str(src), "sha256": "0" * 64, "size": 1, "address": "127.0.0.1", "port": port})


def test_progress_line_names_state_bytes_upstream_and_trouble():
    now = 1000.0
    report = {
        "node": "node3",
        "state": "receiving",
        "bytes": 512_000_000,
        "total": 1_073_741_824,
        "rate": 23_900_000,
        "upstream": "node1",
        "served": 400_000_000,
        "switches": 1,
        "received_at": now - 12,
    }
    line = action.progress_line(report, now)
    assert line.startswith("node3        receiving")
    assert "512.0/1073.7 MB" in line and "23.9 MB/s from node1" in line
    assert "served 400.0 MB" in line and "upstream switches 1" in line and "(silent 12 s)" in line
    assert "(silent" not in action.progress_line(dict(report, received_at=now - 1), now)
