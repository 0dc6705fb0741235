"""aic.stack.image_artifact against an engine stand-in (the unit tests' HTTP server on a unix socket) and against
this machine's real Docker engine where one runs, with a tiny imported image (no Docker SDK: module_utils/docker_api)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import subprocess
import tarfile
import time
import uuid

import pytest

from ansible_collections.aic.stack.plugins.module_utils import artifact, docker_api
from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI
from ansible_collections.aic.stack.plugins.modules import image_artifact

# Names of what the tests make on the real engine start with this (a test run beside another sets its own).
PREFIX = os.environ.get("AIC_UNIT_PREFIX", "aic-unit")
ENGINE = "/var/run/docker.sock"
REPO = f"{PREFIX}-artifact"
IMAGE = f"{REPO}:{uuid.uuid4().hex[:12]}"
STEM = IMAGE.replace(":", "-")
needs_engine = pytest.mark.skipif(not os.path.exists(ENGINE), reason="no Docker engine on this machine")


@pytest.fixture(scope="module")
def tiny_image():
    """A real image made with the engine's import (POST /images/create from a one-file rootfs; no registry)."""
    if not os.path.exists(ENGINE):
        pytest.skip("no Docker engine on this machine")
    api = DockerAPI(f"unix://{ENGINE}", timeout=60)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = os.urandom(64 * 1024)
        info = tarfile.TarInfo("payload.bin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    params = {"fromSrc": "-", "repo": REPO, "tag": IMAGE.split(":", 1)[1]}
    tar_type = {"Content-Type": "application/x-tar"}  # else urllib says form data, and the engine parses it
    with api.open("POST", "/images/create", params=params, data=buf.getvalue(), headers=tar_type) as response:
        response.read()
    yield api.inspect("images", IMAGE)
    api.request("DELETE", docker_api.path("/images/{}", IMAGE), params={"force": "1"})


def files_state(directory):
    return {
        name: hashlib.sha256(open(os.path.join(directory, name), "rb").read()).hexdigest()
        for name in sorted(os.listdir(directory))
    }


def test_save_writes_tarball_checksum_manifest_and_pointer(run_module, tiny_image, tmp_path):
    result = run_module(image_artifact, {"image": IMAGE, "dest": str(tmp_path), "manifest": {"flavour": "cpu"}})
    assert result.rc == 0, result
    assert result["changed"] is True
    files = result["paths"]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in files.values())
    digest = hashlib.sha256(pathlib.Path(files["tarball"]).read_bytes()).hexdigest()
    assert result["sha256"] == digest
    assert pathlib.Path(files["sha256"]).read_text() == f"{digest}  {STEM}.tar.zst\n"
    manifest = json.loads(pathlib.Path(files["manifest"]).read_text())
    assert manifest == json.loads(pathlib.Path(files["current"]).read_text())
    assert manifest["image"] == IMAGE
    assert manifest["image_id"] == tiny_image["Id"]
    assert manifest["flavour"] == "cpu"
    assert manifest["tarball_bytes"] == os.path.getsize(files["tarball"])
    # The tarball is a real image archive: zstd -dc | tar lists docker save's manifest.json.
    listing = subprocess.run(
        f"zstd -dc {files['tarball']} | tar -t", shell=True, check=True, capture_output=True, text=True
    )
    assert "manifest.json" in listing.stdout.split()
    # ... saved by name: a docker load on a node tags it as the build did.
    archive = subprocess.run(["zstd", "-dc", files["tarball"]], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        saved = json.load(tar.extractfile("manifest.json"))
    assert [entry["RepoTags"] for entry in saved] == [[IMAGE]]
    assert manifest["labels"] == {}


def test_second_run_changes_nothing(run_module, tiny_image, tmp_path):
    first = run_module(image_artifact, {"image": IMAGE, "dest": str(tmp_path)})
    before = files_state(tmp_path)
    second = run_module(image_artifact, {"image": IMAGE, "dest": str(tmp_path), "verify": True})
    assert first["changed"] is True
    assert second["changed"] is False
    assert second["sha256"] == first["sha256"]
    assert files_state(tmp_path) == before


def test_check_mode_writes_nothing(run_module, tiny_image, tmp_path):
    result = run_module(image_artifact, {"image": IMAGE, "dest": str(tmp_path)}, check_mode=True)
    assert result["changed"] is True
    assert os.listdir(tmp_path) == []


@needs_engine
def test_missing_image_fails_clearly(run_module, tmp_path):
    result = run_module(image_artifact, {"image": f"{REPO}:absent", "dest": str(tmp_path)})
    assert result["failed"] is True
    assert f"{REPO}:absent not found" in result["msg"]
    assert os.listdir(tmp_path) == []


def test_a_failing_save_leaves_the_previous_artifact_untouched(run_module, tiny_image, tmp_path):
    run_module(image_artifact, {"image": IMAGE, "dest": str(tmp_path)})
    before = files_state(tmp_path)
    files = artifact.paths(str(tmp_path), f"{REPO}:newer")

    def broken_stream():
        yield b"x" * 1024
        raise OSError("connection reset by the engine")

    with pytest.raises(artifact.ArtifactError, match="docker save failed"):
        artifact.save(broken_stream(), files, {"image": f"{REPO}:newer"})
    # No partial file, no new artifact, and the pointer still names the old image.
    assert files_state(tmp_path) == before
    assert json.loads((tmp_path / f"{REPO}.current.json").read_text())["image"] == IMAGE


def test_a_failing_save_names_the_save_even_when_the_compressor_is_already_gone(tmp_path):
    """The stream fails while bytes wait in the compressor's pipe buffer and the compressor has exited (`true` reads
    nothing): closing its stdin then breaks the pipe, and the error must still be the save's own."""
    files = artifact.paths(str(tmp_path), "x:y")

    def broken_stream():
        yield b"x" * 1024  # buffered, not yet written to the pipe
        time.sleep(0.3)  # `true` has exited by now
        raise OSError("connection reset by the engine")

    with pytest.raises(artifact.ArtifactError, match="docker save failed: connection reset by the engine"):
        artifact.save(broken_stream(), files, {}, zstd="true")
    assert os.listdir(tmp_path) == []


def test_a_failing_compressor_leaves_nothing_behind(tmp_path):
    files = artifact.paths(str(tmp_path), "x:y")
    with pytest.raises(artifact.ArtifactError, match="zstd exited"):
        artifact.save(iter([b"data"]), files, {}, zstd="false")  # a compressor that exits 1
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "image, stem, current",
    [
        ("aic-stack-cpu:abc", "aic-stack-cpu-abc", "aic-stack-cpu"),
        ("registry:5000/aic/stack:1.0", "registry-5000-aic-stack-1.0", "registry-5000-aic-stack"),
    ],
)
def test_paths(image, stem, current):
    files = artifact.paths("/d", image)
    assert files["tarball"] == f"/d/{stem}.tar.zst"
    assert files["current"] == f"/d/{current}.current.json"


def test_a_missing_pointer_is_restored_without_saving_again(run_module, tiny_image, tmp_path):
    first = run_module(image_artifact, {"image": IMAGE, "dest": str(tmp_path)})
    pointer = pathlib.Path(first["paths"]["current"])
    tarball_mtime = pathlib.Path(first["paths"]["tarball"]).stat().st_mtime_ns
    pointer.unlink()
    again = run_module(image_artifact, {"image": IMAGE, "dest": str(tmp_path)})
    assert again["changed"] is True
    assert json.loads(pointer.read_text()) == json.loads(pathlib.Path(first["paths"]["manifest"]).read_text())
    assert pathlib.Path(first["paths"]["tarball"]).stat().st_mtime_ns == tarball_mtime


# -- the engine stand-in -------------------------------------------------------------------------------------------

STAND_IN_IMAGE = "aic-stack-cpu:4ebfafbed27e"
STAND_IN_INSPECT = {
    "Id": "sha256:" + "8d" * 32,
    "Size": 123456,
    "Created": "2026-12-03T06:00:00.000000000Z",
    "Config": {"Labels": {"ai.aic.flavour": "cpu"}},
}


def _stand_in(server, saved=b"", inspect=None):
    server.json_route(docker_api.path("/images/{}/json", STAND_IN_IMAGE), inspect or STAND_IN_INSPECT)
    server.route("/images/get", body=saved, content_type="application/x-tar")


def test_the_engines_save_stream_goes_into_the_artifact_as_it_comes(run_module, unix_http_server, tmp_path):
    saved = os.urandom(9 * 1024 * 1024)  # more than two of the save's reads
    _stand_in(unix_http_server, saved)
    args = {"image": STAND_IN_IMAGE, "dest": str(tmp_path / "out"), "manifest": {"flavour": "cpu"}}
    result = run_module(image_artifact, {**args, "docker_host": unix_http_server.docker_host})
    assert result.rc == 0 and result["changed"], result
    (req,) = unix_http_server.calls("/images/get")
    assert req.query == "names=aic-stack-cpu%3A4ebfafbed27e"
    tarball = result["paths"]["tarball"]
    assert subprocess.run(["zstd", "-dc", tarball], check=True, capture_output=True).stdout == saved
    manifest = result["manifest"]
    assert (manifest["image"], manifest["image_id"], manifest["flavour"]) == (
        STAND_IN_IMAGE,
        STAND_IN_INSPECT["Id"],
        "cpu",
    )
    assert manifest["image_bytes"] == 123456 and manifest["created"] == STAND_IN_INSPECT["Created"]
    assert manifest["labels"] == {"ai.aic.flavour": "cpu"}
    assert json.loads(pathlib.Path(result["paths"]["current"]).read_text()) == manifest
    # The same image id again: nothing is saved or written.
    again = run_module(image_artifact, {**args, "docker_host": unix_http_server.docker_host})
    assert again.rc == 0 and not again["changed"] and again["sha256"] == result["sha256"], again
    assert len(unix_http_server.calls("/images/get")) == 1


def test_check_mode_asks_the_engine_and_saves_nothing(run_module, unix_http_server, tmp_path):
    _stand_in(unix_http_server, b"tar")
    args = {"image": STAND_IN_IMAGE, "dest": str(tmp_path / "out"), "docker_host": unix_http_server.docker_host}
    result = run_module(image_artifact, args, check_mode=True)
    assert result.rc == 0 and result["changed"] and result["sha256"] is None, result
    assert result["manifest"]["image_id"] == STAND_IN_INSPECT["Id"]
    assert unix_http_server.calls("/images/get") == [] and not (tmp_path / "out").exists()


def test_check_mode_of_a_build_not_built_yet_says_it_would_save(run_module, unix_http_server, tmp_path):
    # --check of a build whose inputs changed: the build step built nothing, so the engine has no image yet.
    args = {"image": STAND_IN_IMAGE, "dest": str(tmp_path / "out"), "docker_host": unix_http_server.docker_host}
    result = run_module(image_artifact, args, check_mode=True)
    assert result.rc == 0 and result["changed"] and result["sha256"] is None and "manifest" not in result, result
    assert result["msg"].startswith(f"would save {STAND_IN_IMAGE} once it is built"), result
    assert unix_http_server.calls("/images/get") == [] and not (tmp_path / "out").exists()


def test_an_image_the_engine_does_not_have_is_named(run_module, unix_http_server, tmp_path):
    args = {"image": STAND_IN_IMAGE, "dest": str(tmp_path / "out"), "docker_host": unix_http_server.docker_host}
    result = run_module(image_artifact, args)
    assert result.failed and f"image {STAND_IN_IMAGE} not found on the build host" in result["msg"], result
    assert not (tmp_path / "out").exists()


def test_a_save_the_engine_refuses_leaves_the_previous_artifact_untouched(run_module, unix_http_server, tmp_path):
    _stand_in(unix_http_server, b"the first save")
    args = {"image": STAND_IN_IMAGE, "dest": str(tmp_path / "out"), "docker_host": unix_http_server.docker_host}
    assert run_module(image_artifact, args)["changed"]
    before = files_state(tmp_path / "out")
    _stand_in(unix_http_server, inspect={**STAND_IN_INSPECT, "Id": "sha256:" + "9e" * 32})
    unix_http_server.json_route("/images/get", {"message": "write /var/lib/docker/tmp: no space left"}, status=500)
    result = run_module(image_artifact, args)
    assert result.failed, result
    assert result["msg"] == (
        f"saving {STAND_IN_IMAGE} failed, previous artifact left untouched: docker save failed: "
        "write /var/lib/docker/tmp: no space left"
    )
    assert files_state(tmp_path / "out") == before


def test_an_engine_that_cannot_be_reached_is_named(run_module, tmp_path):
    args = {"image": STAND_IN_IMAGE, "dest": str(tmp_path), "docker_host": f"unix://{tmp_path}/no.sock"}
    result = run_module(image_artifact, args)
    assert result.failed and "cannot reach the Docker engine at unix://" in result["msg"], result
