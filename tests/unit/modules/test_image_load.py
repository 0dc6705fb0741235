"""aic.stack.image_load against this machine's real Docker engine: a tiny image saved and zstd-compressed through
module_utils/docker_api, removed, then loaded back by the module (streamed through ``zstd -dc`` into the engine's
load API), verified before the engine can register it, idempotent, with check mode and clear failures."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
import uuid

import pytest

from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI
from ansible_collections.aic.stack.plugins.modules import image_load


def _zstd(data):
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True).stdout


@pytest.fixture(scope="module")
def artifact(docker_client, tmp_path_factory):
    """A one-file image, saved as .tar.zst with its sha256 and image id, then removed from the engine."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        body = f"image_load unit test {uuid.uuid4()}\n".encode()
        info = tarfile.TarInfo("hello.txt")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    ref = f"aic-unit-image-load:{uuid.uuid4().hex[:12]}"
    subprocess.run(["docker", "import", "-", ref], input=layer.getvalue(), capture_output=True, check=True)
    image_id = docker_client.images.get(ref).id
    saved = b"".join(DockerAPI().save_image(ref))
    docker_client.images.remove(ref, force=True)
    path = tmp_path_factory.mktemp("image-load") / "tiny.tar.zst"
    path.write_bytes(_zstd(saved))
    yield {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "image_id": image_id}
    subprocess.run(["docker", "rmi", "-f", image_id], capture_output=True, check=False)


def _gone(docker_client, image_id):
    subprocess.run(["docker", "rmi", "-f", image_id], capture_output=True, check=False)
    assert not DockerAPI().exists(f"/images/{image_id}/json")


def test_loads_the_verified_tarball_then_a_rerun_changes_nothing(run_module, docker_client, artifact):
    _gone(docker_client, artifact["image_id"])
    first = run_module(image_load, artifact)
    assert first.rc == 0 and first["changed"] and first["loaded"], first
    assert first["bytes_read"] == os.path.getsize(artifact["path"])
    assert docker_client.images.get(artifact["image_id"]).id == artifact["image_id"]
    again = run_module(image_load, artifact)
    assert again.rc == 0 and not again["changed"] and not again["loaded"], again


def test_check_mode_says_it_would_load_and_loads_nothing(run_module, docker_client, artifact):
    _gone(docker_client, artifact["image_id"])
    result = run_module(image_load, artifact, check_mode=True)
    assert result.rc == 0 and result["changed"] and not result["loaded"], result
    assert not DockerAPI().exists(f"/images/{artifact['image_id']}/json")


def test_a_wrong_sha256_is_refused_before_the_engine_registers_anything(run_module, docker_client, artifact):
    _gone(docker_client, artifact["image_id"])
    result = run_module(image_load, {**artifact, "sha256": "0" * 64})
    assert result.failed and "sha256 mismatch" in result["msg"] and artifact["sha256"] in result["msg"], result
    assert result["loaded"] is False
    assert not DockerAPI().exists(f"/images/{artifact['image_id']}/json")


def test_an_archive_the_engine_refuses_fails_with_its_reason(run_module, tmp_path):
    path = tmp_path / "not-an-image.tar.zst"
    path.write_bytes(_zstd(b"this is no image archive\n" * 100))
    args = {
        "path": str(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "image_id": "sha256:" + "1" * 64,
    }
    result = run_module(image_load, args)
    assert result.failed and "docker load failed" in result["msg"], result


def test_an_engine_that_cannot_be_reached_is_named(run_module, tmp_path, artifact):
    result = run_module(image_load, {**artifact, "docker_host": f"unix://{tmp_path}/no.sock"})
    assert result.failed and "cannot reach the Docker engine" in result["msg"] and "no.sock" in result["msg"], result
