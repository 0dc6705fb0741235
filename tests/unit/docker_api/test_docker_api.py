"""module_utils/docker_api: requests over a real unix socket (the unit tests' LocalHTTPServer answering as an engine
would) and over TCP, error bodies, unreachable engines; and the real Docker engine of this machine where one runs."""

from __future__ import annotations

import json
import os
import urllib.request
import uuid

import pytest

from ansible_collections.aic.stack.plugins.module_utils import docker_api
from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI, DockerAPIError


def echo_create(req):
    """A create answered 201 with what it got (body and content type)."""
    doc = {"Id": "c0ffee", "Got": req.json(), "ContentType": req.headers.get("Content-Type")}
    return 201, json.dumps(doc), "application/json"


def test_a_create_sends_json_with_params_and_returns_the_answer(unix_http_server):
    unix_http_server.handler_route("/containers/create", echo_create, method="POST")
    api = DockerAPI(unix_http_server.docker_host, timeout=5)
    answer = api.call("POST", "/containers/create", params={"name": "probe-1"}, body={"Image": "img:1"})
    assert answer["Id"] == "c0ffee" and answer["Got"] == {"Image": "img:1"}
    assert answer["ContentType"] == "application/json"
    (req,) = unix_http_server.calls("/containers/create", "POST")
    assert req.query == "name=probe-1"


def test_an_empty_answer_is_none_and_the_path_is_quoted(unix_http_server):
    unix_http_server.route("/containers/a%20b%2Fc", status=204, method="DELETE")
    api = DockerAPI(unix_http_server.docker_host)
    assert api.call("DELETE", docker_api.path("/containers/{}", "a b/c"), params={"force": "1"}) is None
    assert [r.query for r in unix_http_server.calls("/containers/a%20b%2Fc", "DELETE")] == ["force=1"]


def test_a_refusal_carries_the_status_and_the_engines_own_message(unix_http_server):
    message = "authorization denied by plugin test: host PID is not allowed"
    unix_http_server.json_route("/containers/create", {"message": message}, status=403, method="POST")
    with pytest.raises(DockerAPIError) as err:
        DockerAPI(unix_http_server.docker_host).call("POST", "/containers/create", body={"Image": "i"})
    assert (err.value.status, err.value.message) == (403, message)


def test_a_body_that_is_not_json_is_the_message(unix_http_server):
    unix_http_server.route("/teapot", status=418, body="brew!")
    with pytest.raises(DockerAPIError) as err:
        DockerAPI(unix_http_server.docker_host).call("GET", "/teapot")
    assert (err.value.status, err.value.message) == (418, "brew!")


def test_exists_is_true_for_200_false_for_404_and_raises_otherwise(unix_http_server):
    unix_http_server.json_route("/images/sha256%3Aabc/json", {"Id": "sha256:abc"})
    unix_http_server.json_route("/broken", {"message": "engine exploded"}, status=500)
    api = DockerAPI(unix_http_server.docker_host)
    assert api.exists(docker_api.path("/images/{}/json", "sha256:abc")) is True
    assert api.exists(docker_api.path("/images/{}/json", "sha256:def")) is False
    with pytest.raises(DockerAPIError, match="engine exploded") as err:
        api.exists("/broken")
    assert err.value.status == 500


def test_tcp_engines_are_spoken_to_as_plain_http(http_server):
    http_server.json_route("/images/sha256%3Aabc/json", {"Id": "sha256:abc"})
    assert DockerAPI(http_server.docker_host).exists("/images/sha256%3Aabc/json") is True


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


def test_a_call_over_a_unix_socket_leaves_the_process_urllib_alone(unix_http_server, http_server):
    # open_url would install its opener for the whole process: every later urlopen would go to the engine's socket.
    unix_http_server.json_route("/_ping", {"ok": True})
    http_server.route("/elsewhere", body="here")
    assert DockerAPI(unix_http_server.docker_host).call("GET", "/_ping") == {"ok": True}
    with urllib.request.urlopen(http_server.url + "/elsewhere", timeout=5) as response:
        assert response.read() == b"here"
    assert unix_http_server.calls("/elsewhere") == []
