"""module_utils/docker_api: requests over a real unix socket (an HTTP server answering as an engine would) and over
TCP, error bodies, unreachable engines; and the real Docker engine of this machine where one runs."""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import threading
import uuid

import pytest

from ansible_collections.aic.stack.plugins.module_utils import docker_api
from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI, DockerAPIError


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers like an engine: 201 for a create (echoing what it got), 404/403/500 with a JSON message, 204 empty."""

    def log_message(self, *args):
        pass

    def _answer(self, status, doc=None):
        raw = json.dumps(doc).encode() if doc is not None else b""
        self.send_response(status)
        self.send_header("Content-Length", str(len(raw)))
        if raw:
            self.send_header("Content-Type", "application/json")
        self.end_headers()
        if raw:
            self.wfile.write(raw)

    def do_GET(self):
        self.server.seen.append(("GET", self.path, None))
        if self.path == "/images/sha256%3Aabc/json":
            self._answer(200, {"Id": "sha256:abc"})
        elif self.path == "/teapot":
            self.send_response(418)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"brew!")
        elif self.path == "/broken":
            self._answer(500, {"message": "engine exploded"})
        else:
            self._answer(404, {"message": f"No such image: {self.path}"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(("POST", self.path, body))
        if body.get("HostConfig", {}).get("PidMode") == "host":
            self._answer(403, {"message": "authorization denied by plugin test: host PID is not allowed"})
        else:
            self._answer(201, {"Id": "c0ffee", "Got": body, "ContentType": self.headers.get("Content-Type")})

    def do_DELETE(self):
        self.server.seen.append(("DELETE", self.path, None))
        self._answer(204)


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        request, _dummy = super().get_request()
        return request, ("local", 0)  # BaseHTTPRequestHandler wants a (host, port) client address


class _TCPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def _serve(server):
    server.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def engine(tmp_path):
    sock = tmp_path / "engine.sock"
    server = _serve(_UnixServer(str(sock), _Handler))
    yield f"unix://{sock}", server
    server.shutdown()
    server.server_close()


def test_a_create_sends_json_with_params_and_returns_the_answer(engine):
    host, server = engine
    api = DockerAPI(host, timeout=5)
    answer = api.call("POST", "/containers/create", params={"name": "probe-1"}, body={"Image": "img:1"})
    assert answer["Id"] == "c0ffee" and answer["Got"] == {"Image": "img:1"}
    assert answer["ContentType"] == "application/json"
    assert server.seen == [("POST", "/containers/create?name=probe-1", {"Image": "img:1"})]


def test_an_empty_answer_is_none_and_the_path_is_quoted(engine):
    host, server = engine
    assert DockerAPI(host).call("DELETE", docker_api.path("/containers/{}", "a b/c"), params={"force": "1"}) is None
    assert server.seen[-1] == ("DELETE", "/containers/a%20b%2Fc?force=1", None)


def test_a_refusal_carries_the_status_and_the_engines_own_message(engine):
    host, _dummy = engine
    with pytest.raises(DockerAPIError) as err:
        DockerAPI(host).call("POST", "/containers/create", body={"HostConfig": {"PidMode": "host"}})
    assert err.value.status == 403
    assert err.value.message == "authorization denied by plugin test: host PID is not allowed"


def test_a_body_that_is_not_json_is_the_message(engine):
    host, _dummy = engine
    with pytest.raises(DockerAPIError) as err:
        DockerAPI(host).call("GET", "/teapot")
    assert (err.value.status, err.value.message) == (418, "brew!")


def test_exists_is_true_for_200_false_for_404_and_raises_otherwise(engine):
    host, _dummy = engine
    api = DockerAPI(host)
    assert api.exists(docker_api.path("/images/{}/json", "sha256:abc")) is True
    assert api.exists(docker_api.path("/images/{}/json", "sha256:def")) is False
    with pytest.raises(DockerAPIError, match="engine exploded") as err:
        api.exists("/broken")
    assert err.value.status == 500


def test_tcp_engines_are_spoken_to_as_plain_http():
    server = _serve(_TCPServer(("127.0.0.1", 0), _Handler))
    try:
        api = DockerAPI(f"tcp://127.0.0.1:{server.server_address[1]}")
        assert api.exists("/images/sha256%3Aabc/json") is True
    finally:
        server.shutdown()
        server.server_close()


def test_an_engine_that_is_not_there_is_named(tmp_path):
    host = f"unix://{tmp_path}/no.sock"
    with pytest.raises(DockerAPIError) as err:
        DockerAPI(host, timeout=2).call("GET", "/_ping")
    assert err.value.status is None
    assert f"cannot reach the Docker engine at {host}" in err.value.message


@pytest.mark.parametrize("host", ["https://engine:2376", "ssh://user@node", "/var/run/docker.sock"])
def test_other_schemes_are_refused_naming_the_option(host):
    with pytest.raises(ValueError, match="docker_host: .* is not unix:///path or tcp://host:port"):
        DockerAPI(host)


def test_the_engine_comes_from_the_option_then_docker_host_then_the_local_socket(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert docker_api.engine_host() == "unix:///var/run/docker.sock"
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.1:2375")
    assert docker_api.engine_host() == "tcp://10.0.0.1:2375"
    assert docker_api.engine_host("unix:///run/other.sock") == "unix:///run/other.sock"


@pytest.mark.skipif(not os.path.exists("/var/run/docker.sock"), reason="no Docker engine on this machine")
def test_the_real_engine_answers_and_has_no_made_up_image():
    api = DockerAPI("unix:///var/run/docker.sock", timeout=30)
    assert api.call("GET", "/version")["ApiVersion"]
    assert api.exists(docker_api.path("/images/{}/json", f"aic-no-such-image:{uuid.uuid4().hex}")) is False
    with pytest.raises(DockerAPIError) as err:
        api.call("GET", docker_api.path("/containers/{}/json", f"aic-no-such-{uuid.uuid4().hex}"))
    assert err.value.status == 404 and "No such container" in err.value.message
