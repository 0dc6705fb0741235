"""Unit tests of the host-PID probe (aic.stack.docker_capability): its engine client is the collection's own
(module_utils/docker_api), talking HTTP over a unix socket to an engine stand-in that answers as an authorization
plugin or a daemon would, and to this machine's real engine where one runs.

The real engine behind a real authorization plugin is exercised by tests/integration/test_monitoring_authz.py.
"""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import threading

import pytest

from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI, DockerAPIError
from ansible_collections.aic.stack.plugins.modules import docker_capability


class _Engine(http.server.BaseHTTPRequestHandler):
    """POST /containers/create answers ``server.create`` (status, message), DELETE answers ``server.delete``."""

    def log_message(self, *args):
        pass

    def _answer(self, status, doc=None):
        raw = json.dumps(doc).encode() if doc is not None else b""
        self.send_response(status)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        if raw:
            self.wfile.write(raw)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.created.append((self.path, body))
        status, message = self.server.create
        self._answer(status, {"Id": "abc123", "Warnings": []} if status == 201 else {"message": message})

    def do_DELETE(self):
        self.server.deleted.append(self.path)
        status, message = self.server.delete
        self._answer(status, {"message": message} if message else None)


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        request, _dummy = super().get_request()
        return request, ("local", 0)


@pytest.fixture
def engine(tmp_path):
    """``engine(create=(status, message), delete=(status, message))`` -> (DockerAPI client, the server's record)."""
    servers = []

    def start(create=(201, ""), delete=(204, "")):
        server = _UnixServer(str(tmp_path / f"engine{len(servers)}.sock"), _Engine)
        server.create, server.delete, server.created, server.deleted = create, delete, [], []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return DockerAPI(f"unix://{server.server_address}", timeout=5), server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_allowed_creates_a_host_pid_container_and_removes_it(engine):
    client, server = engine()
    result = docker_capability.probe_pid_host(client, "aic-prometheus:1", "aic-probe")
    assert result == {"pid_host": "allowed", "message": "", "status_code": None}
    ((where, body),) = server.created
    assert where.startswith("/containers/create?name=aic-probe-")
    assert body["HostConfig"]["PidMode"] == "host"
    assert body["Image"] == "aic-prometheus:1"
    assert body["Labels"] == {"ai.aic.probe": "pid-host"}
    assert server.deleted == ["/containers/abc123?force=1&v=1"]


def test_authz_refusal_is_denied_with_the_daemons_message(engine):
    msg = "authorization denied by plugin aic-authz: host PID namespace is not allowed"
    client, server = engine(create=(403, msg))
    result = docker_capability.probe_pid_host(client, "img:1", "p")
    assert result == {"pid_host": "denied", "message": msg, "status_code": 403}
    assert server.deleted == []


def test_other_refusals_are_errors(engine):
    client, _dummy = engine(create=(404, "No such image: img:1"))
    result = docker_capability.probe_pid_host(client, "img:1", "p")
    assert result["pid_host"] == "error"
    assert result["message"] == "No such image: img:1"
    assert result["status_code"] == 404


def test_a_failed_removal_is_a_warning_not_a_failure(engine):
    client, _dummy = engine(delete=(500, "device busy"))
    result = docker_capability.probe_pid_host(client, "img:1", "p")
    assert result["pid_host"] == "allowed"
    assert "device busy" in result["warnings"][0]


def test_an_engine_that_is_not_there_is_no_answer(tmp_path):
    with pytest.raises(DockerAPIError) as err:
        docker_capability.probe_pid_host(DockerAPI(f"unix://{tmp_path}/none.sock", timeout=2), "img:1", "p")
    assert err.value.status is None


@pytest.mark.skipif(not os.path.exists("/var/run/docker.sock"), reason="no Docker engine on this machine")
def test_this_machines_engine_allows_it_and_keeps_no_probe_container():
    client = DockerAPI("unix:///var/run/docker.sock", timeout=60)
    images = [
        i for i in client.call("GET", "/images/json") if i.get("RepoTags") and i["RepoTags"][0] != "<none>:<none>"
    ]
    if not images:
        pytest.skip("no tagged image on this engine")
    result = docker_capability.probe_pid_host(client, images[0]["RepoTags"][0], "aic-unit-probe")
    assert result == {"pid_host": "allowed", "message": "", "status_code": None}
    left = client.call(
        "GET", "/containers/json", params={"all": "1", "filters": json.dumps({"label": ["ai.aic.probe"]})}
    )
    assert not [c for c in left if any(n.startswith("/aic-unit-probe-") for n in c["Names"])]


@pytest.mark.parametrize(
    "status, message, expected",
    [
        (403, "anything", "denied"),
        (500, "Error: authorization denied by plugin x: no", "denied"),
        (400, "invalid reference format", "error"),
        (None, "connection reset", "error"),
    ],
)
def test_classify(status, message, expected):
    assert docker_capability.classify(status, message) == expected
