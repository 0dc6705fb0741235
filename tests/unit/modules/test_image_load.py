"""aic.stack.image_load against an engine stand-in (the unit tests' HTTP server on a unix socket: what the module
sends, chunk by chunk) and against this machine's real Docker engine where one runs: a tiny image saved and
zstd-compressed through module_utils/docker_api, removed, then loaded back by the module (streamed through ``zstd -dc``
into the engine's load API), verified before the engine can register it, idempotent, with check mode and clear
failures."""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import subprocess
import tarfile
import threading
import time
import uuid

import pytest

from ansible_collections.aic.stack.plugins.module_utils import docker_api
from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI
from ansible_collections.aic.stack.plugins.modules import image_load

# Names of what the tests make on the real engine start with this (a test run beside another sets its own).
PREFIX = os.environ.get("AIC_UNIT_PREFIX", "aic-unit")
ENGINE = "/var/run/docker.sock"
needs_engine = pytest.mark.skipif(not os.path.exists(ENGINE), reason="no Docker engine on this machine")


def _zstd(data):
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True).stdout


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _wait_for(server, path, method="POST", seconds=5):
    """The requests the stand-in recorded on ``path`` (its thread records an abandoned upload a moment later)."""
    deadline = time.monotonic() + seconds
    while not server.calls(path, method) and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.calls(path, method)


# -- the engine stand-in -------------------------------------------------------------------------------------------

IMAGE_ID = "sha256:" + "ab" * 32
INSPECT = docker_api.path("/images/{}/json", IMAGE_ID)


@pytest.fixture(scope="module")
def big_tarball(tmp_path_factory):
    """A 9 MiB "archive" (random, so zstd cannot shrink it): three blocks of the module's reads, and more than any
    pipe holds, so the stream really is a stream."""
    raw = os.urandom(9 * 1024 * 1024)
    path = tmp_path_factory.mktemp("image-load-stand-in") / "big.tar.zst"
    path.write_bytes(_zstd(raw))
    return {"raw": raw, "path": path, "sha256": _sha256(path)}


def _args(server, tarball, **extra):
    args = {"path": str(tarball["path"]), "sha256": tarball["sha256"], "image_id": IMAGE_ID}
    args.update(docker_host=server.docker_host, timeout=30, **extra)
    return args


def test_the_archive_goes_to_the_engine_chunked_as_zstd_decompresses_it(run_module, unix_http_server, big_tarball):
    unix_http_server.sequence_route(
        INSPECT, [(404, '{"message":"No such image"}'), (200, json.dumps({"Id": IMAGE_ID}))]
    )
    unix_http_server.route("/images/load", body='{"stream":"Loaded image ID: x\\n"}\n', method="POST")
    result = run_module(image_load, _args(unix_http_server, big_tarball))
    assert result.rc == 0 and result["changed"] and result["loaded"], result
    assert result["bytes_read"] == big_tarball["path"].stat().st_size
    (req,) = unix_http_server.calls("/images/load", "POST")
    assert req.query == "quiet=1" and req.headers["Content-Type"] == "application/x-tar"
    assert req.chunked and req.complete and req.body == big_tarball["raw"]
    assert len(unix_http_server.calls(INSPECT)) == 2  # absent before, present after


def test_a_wrong_sha256_breaks_the_upload_off_before_its_last_block(run_module, unix_http_server, big_tarball):
    unix_http_server.route(INSPECT, status=404, body='{"message":"No such image"}')
    unix_http_server.route("/images/load", body='{"stream":"Loaded image ID: x\\n"}\n', method="POST")
    result = run_module(image_load, _args(unix_http_server, big_tarball, sha256="0" * 64))
    assert result.failed and result["loaded"] is False, result
    assert "sha256 mismatch" in result["msg"] and big_tarball["sha256"] in result["msg"], result
    (req,) = _wait_for(unix_http_server, "/images/load")
    # The engine got a chunked body without its end (and without the file's last block): nothing it can register.
    assert req.chunked and not req.complete and len(req.body) < len(big_tarball["raw"])


def test_the_error_the_engine_streams_under_status_200_fails_the_load(run_module, unix_http_server, big_tarball):
    unix_http_server.route(INSPECT, status=404, body='{"message":"No such image"}')
    refusal = (
        '{"errorDetail":{"message":"archive/tar: invalid tar header"},"error":"archive/tar: invalid tar header"}\n'
    )
    unix_http_server.route("/images/load", body=refusal, content_type="application/json", method="POST")
    result = run_module(image_load, _args(unix_http_server, big_tarball))
    assert result.failed and result["loaded"] is False, result
    assert "docker load failed: archive/tar: invalid tar header" in result["msg"], result


def test_an_image_the_engine_has_is_not_loaded_again_and_check_mode_sends_nothing(
    run_module, unix_http_server, big_tarball
):
    unix_http_server.json_route(INSPECT, {"Id": IMAGE_ID})
    result = run_module(image_load, _args(unix_http_server, big_tarball))
    assert result.rc == 0 and not result["changed"] and not result["loaded"], result
    unix_http_server.route(INSPECT, status=404, body='{"message":"No such image"}')
    result = run_module(image_load, _args(unix_http_server, big_tarball), check_mode=True)
    assert result.rc == 0 and result["changed"] and not result["loaded"], result
    assert unix_http_server.calls("/images/load", "POST") == []


def test_a_missing_file_is_named(run_module, unix_http_server, big_tarball, tmp_path):
    unix_http_server.route(INSPECT, status=404, body='{"message":"No such image"}')
    result = run_module(image_load, _args(unix_http_server, big_tarball, path=str(tmp_path / "absent.tar.zst")))
    assert result.failed and "absent.tar.zst does not exist on this node" in result["msg"], result


def test_an_engine_that_goes_away_mid_upload_fails_the_load_at_once(run_module, big_tarball, tmp_path):
    """The engine answers the image question, then reads the start of the upload and closes: the module fails
    naming the load (it used to wait for ever on the decompressor's full pipe)."""
    sock_path = str(tmp_path / "drop.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(4)

    def serve():
        while True:
            try:
                conn, _dummy = listener.accept()
            except OSError:
                return
            with conn:
                head = conn.recv(65536)
                if head.startswith(b"GET "):
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
                    continue
                received = len(head)
                while received < 256 * 1024:
                    data = conn.recv(65536)
                    if not data:
                        break
                    received += len(data)

    threading.Thread(target=serve, daemon=True).start()
    outcome = {}
    args = {
        "path": str(big_tarball["path"]),
        "sha256": big_tarball["sha256"],
        "image_id": IMAGE_ID,
        "docker_host": f"unix://{sock_path}",
        "timeout": 30,
    }
    runner = threading.Thread(target=lambda: outcome.update(result=run_module(image_load, args)), daemon=True)
    runner.start()
    runner.join(timeout=60)
    listener.close()
    assert not runner.is_alive(), "image_load hung after the engine went away mid-upload"
    result = outcome["result"]
    assert result.failed and result["loaded"] is False, result
    assert "docker load failed: cannot reach the Docker engine" in result["msg"], result


# -- the real engine -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """A one-file image, saved as .tar.zst with its sha256 and image id, then removed from the engine."""
    api = DockerAPI(f"unix://{ENGINE}", timeout=60)
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        body = f"image_load unit test {uuid.uuid4()}\n".encode()
        info = tarfile.TarInfo("hello.txt")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    repo, tag = f"{PREFIX}-image-load", uuid.uuid4().hex[:12]
    params = {"fromSrc": "-", "repo": repo, "tag": tag}
    tar_type = {"Content-Type": "application/x-tar"}  # else urllib says form data, and the engine parses it
    with api.open("POST", "/images/create", params=params, data=layer.getvalue(), headers=tar_type) as response:
        response.read()
    image_id = api.inspect("images", f"{repo}:{tag}")["Id"]
    saved = b"".join(api.save_image(f"{repo}:{tag}"))
    api.call("DELETE", docker_api.path("/images/{}", image_id), params={"force": "1"})
    path = tmp_path_factory.mktemp("image-load") / "tiny.tar.zst"
    path.write_bytes(_zstd(saved))
    yield {"path": str(path), "sha256": _sha256(path), "image_id": image_id}
    api.request("DELETE", docker_api.path("/images/{}", image_id), params={"force": "1"})


def _gone(image_id):
    api = DockerAPI(f"unix://{ENGINE}")
    api.request("DELETE", docker_api.path("/images/{}", image_id), params={"force": "1"})
    assert api.inspect("images", image_id) is None


@needs_engine
def test_loads_the_verified_tarball_then_a_rerun_changes_nothing(run_module, artifact):
    _gone(artifact["image_id"])
    first = run_module(image_load, artifact)
    assert first.rc == 0 and first["changed"] and first["loaded"], first
    assert first["bytes_read"] == os.path.getsize(artifact["path"])
    assert DockerAPI().inspect("images", artifact["image_id"])["Id"] == artifact["image_id"]
    again = run_module(image_load, artifact)
    assert again.rc == 0 and not again["changed"] and not again["loaded"], again


@needs_engine
def test_check_mode_says_it_would_load_and_loads_nothing(run_module, artifact):
    _gone(artifact["image_id"])
    result = run_module(image_load, artifact, check_mode=True)
    assert result.rc == 0 and result["changed"] and not result["loaded"], result
    assert DockerAPI().inspect("images", artifact["image_id"]) is None


@needs_engine
def test_a_wrong_sha256_is_refused_before_the_engine_registers_anything(run_module, artifact):
    _gone(artifact["image_id"])
    result = run_module(image_load, {**artifact, "sha256": "0" * 64})
    assert result.failed and "sha256 mismatch" in result["msg"] and artifact["sha256"] in result["msg"], result
    assert result["loaded"] is False
    assert DockerAPI().inspect("images", artifact["image_id"]) is None


@needs_engine
def test_an_archive_the_engine_refuses_fails_with_its_reason(run_module, tmp_path):
    path = tmp_path / "not-an-image.tar.zst"
    path.write_bytes(_zstd(b"this is no image archive\n" * 100))
    args = {"path": str(path), "sha256": _sha256(path), "image_id": "sha256:" + "1" * 64}
    result = run_module(image_load, args)
    assert result.failed and "docker load failed" in result["msg"], result


def test_an_engine_that_cannot_be_reached_is_named(run_module, tmp_path, big_tarball):
    args = {"path": str(big_tarball["path"]), "sha256": big_tarball["sha256"], "image_id": IMAGE_ID}
    result = run_module(image_load, {**args, "docker_host": f"unix://{tmp_path}/no.sock"})
    assert result.failed and "cannot reach the Docker engine" in result["msg"] and "no.sock" in result["msg"], result
