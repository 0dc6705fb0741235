"""module_utils/docker_api: requests over a real unix socket (the unit tests' LocalHTTPServer answering as an engine
would) and over TCP, error bodies, unreachable engines; and the real Docker engine of this machine where one runs."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
import urllib.request
import uuid

import pytest

from ansible_collections.aic.stack.plugins.module_utils import docker_api
from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI, DockerAPIError

# Names of what the tests make on the real engine start with this (a test run beside another sets its own).
PREFIX = os.environ.get("AIC_UNIT_PREFIX", "aic-unit")


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


def frame(stream, payload):
    """One frame of the engine's multiplexed stream (stdout 1, stderr 2)."""
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def test_demultiplex_takes_the_frames_apart_and_leaves_a_raw_stream_as_it_is():
    assert docker_api.demultiplex(frame(1, b"out 1\n") + frame(2, b"err 1\n") + frame(1, b"out 2\n")) == (
        b"out 1\nerr 1\nout 2\n"
    )
    assert docker_api.demultiplex(b"a TTY container's log\n") == b"a TTY container's log\n"
    assert docker_api.demultiplex(b"") == b""


def test_container_logs_asks_for_the_tail_of_both_streams(unix_http_server):
    unix_http_server.route("/containers/aic-vllm/logs", body=frame(1, b"starting\n") + frame(2, b"Traceback\n"))
    assert DockerAPI(unix_http_server.docker_host).container_logs("aic-vllm", tail=7) == "starting\nTraceback\n"
    (req,) = unix_http_server.calls("/containers/aic-vllm/logs")
    assert sorted(req.query.split("&")) == ["stderr=1", "stdout=1", "tail=7"]


def test_inspect_is_none_for_an_unknown_name(unix_http_server):
    unix_http_server.json_route("/containers/web/json", {"Id": "abc", "RestartCount": 2})
    api = DockerAPI(unix_http_server.docker_host)
    assert api.inspect("containers", "web") == {"Id": "abc", "RestartCount": 2}
    assert api.inspect("containers", "gone") is None


def test_load_image_fails_with_the_error_the_engine_streams_under_status_200(unix_http_server):
    answer = '{"stream":"Loading layer"}\n{"errorDetail":{"message":"unexpected EOF"},"error":"unexpected EOF"}\n'
    unix_http_server.route("/images/load", body=answer, content_type="application/json", method="POST")
    with pytest.raises(DockerAPIError) as err:
        DockerAPI(unix_http_server.docker_host).load_image(b"not a tarball")
    assert (err.value.status, err.value.message) == (200, "unexpected EOF")
    (req,) = unix_http_server.calls("/images/load", "POST")
    assert req.query == "quiet=1" and req.headers["Content-Type"] == "application/x-tar"


def test_load_image_returns_the_engines_answer(unix_http_server):
    answer = '{"stream":"Loaded image ID: sha256:abc\\n"}\n'
    unix_http_server.route("/images/load", body=answer, content_type="application/json", method="POST")
    assert "Loaded image ID" in DockerAPI(unix_http_server.docker_host).load_image(b"tar")


def test_save_image_streams_the_named_tarball_and_a_missing_image_raises(unix_http_server):
    unix_http_server.route("/images/get", body=b"x" * 10_000, content_type="application/x-tar")
    chunks = list(DockerAPI(unix_http_server.docker_host).save_image("img:1", chunk_size=4096))
    assert [len(c) for c in chunks] == [4096, 4096, 1808]
    (req,) = unix_http_server.calls("/images/get")
    assert req.query == "names=img%3A1"
    unix_http_server.json_route("/images/get", {"message": "reference does not exist"}, status=404)
    with pytest.raises(DockerAPIError, match="reference does not exist"):
        list(DockerAPI(unix_http_server.docker_host).save_image("img:2"))


def test_load_image_streams_an_iterable_body_chunked(unix_http_server):
    unix_http_server.route("/images/load", body='{"stream":"Loaded"}\n', content_type="application/json", method="POST")
    blocks = [os.urandom(100_000) for _index in range(5)]
    DockerAPI(unix_http_server.docker_host).load_image(iter(blocks))
    (req,) = unix_http_server.calls("/images/load", "POST")
    assert req.chunked and req.complete and "Content-Length" not in req.headers
    assert req.body == b"".join(blocks)


def test_an_iterable_body_that_raises_aborts_the_upload_and_its_exception_comes_through(unix_http_server):
    unix_http_server.route("/images/load", body='{"stream":"Loaded"}\n', content_type="application/json", method="POST")

    class Stop(Exception):
        pass

    def body():
        yield b"a" * 1000
        yield b"b" * 1000
        raise Stop("the digest does not match")

    with pytest.raises(Stop, match="the digest does not match"):
        DockerAPI(unix_http_server.docker_host).load_image(body())
    deadline = time.monotonic() + 5
    while not unix_http_server.calls("/images/load", "POST") and time.monotonic() < deadline:
        time.sleep(0.05)
    # The engine saw a body without its last chunk: an archive it cannot register (and it got no answer to send).
    (req,) = unix_http_server.calls("/images/load", "POST")
    assert req.chunked and not req.complete and req.body == b"a" * 1000 + b"b" * 1000


def _tiny_layer(payload):
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return layer.getvalue()


@pytest.mark.skipif(not os.path.exists("/var/run/docker.sock"), reason="no Docker engine on this machine")
def test_the_real_engine_saves_and_loads_back_a_tiny_image_as_streams(tmp_path):
    api = DockerAPI("unix:///var/run/docker.sock", timeout=60)
    repo, tag = f"{PREFIX}-docker-api", uuid.uuid4().hex[:12]
    ref = f"{repo}:{tag}"
    payload = f"docker_api unit test {uuid.uuid4()}\n".encode()
    with api.open(
        "POST",
        "/images/create",
        params={"fromSrc": "-", "repo": repo, "tag": tag},
        data=_tiny_layer(payload),
        headers={"Content-Type": "application/x-tar"},
    ) as response:
        response.read()
    try:
        image = api.inspect("images", ref)
        assert image is not None and image["Id"].startswith("sha256:")
        saved = tmp_path / "tiny.tar"
        with open(saved, "wb") as handle:
            for chunk in api.save_image(ref, chunk_size=1024):
                handle.write(chunk)
        with tarfile.open(saved) as tar:
            assert [e["RepoTags"] for e in json.load(tar.extractfile("manifest.json"))] == [[ref]]
        api.call("DELETE", docker_api.path("/images/{}", image["Id"]), params={"force": "1"})
        assert api.inspect("images", ref) is None
        with open(saved, "rb") as handle:
            api.load_image(iter(lambda: handle.read(1024), b""))
        assert api.inspect("images", ref)["Id"] == image["Id"]
        with pytest.raises(DockerAPIError) as err:
            api.load_image(iter([b"this is no image archive\n" * 100]))
        assert err.value.status == 200 and err.value.message
    finally:
        api.request("DELETE", docker_api.path("/images/{}", ref), params={"force": "1"})
