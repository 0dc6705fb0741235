"""aic.stack.image_artifact against the real Docker engine, with a tiny imported image."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import subprocess
import tarfile
import time

import pytest

from ansible_collections.aic.stack.plugins.module_utils import artifact
from ansible_collections.aic.stack.plugins.modules import image_artifact

IMAGE = "aic-unit-artifact:test"


@pytest.fixture(scope="module")
def client(docker_client):
    return docker_client


@pytest.fixture(scope="module")
def tiny_image(client):
    """A real image made with docker import from a one-file rootfs (no registry needed)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = os.urandom(64 * 1024)
        info = tarfile.TarInfo("payload.bin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    client.api.import_image_from_data(buf.getvalue(), repository="aic-unit-artifact", tag="test")
    yield client.images.get(IMAGE)
    client.images.remove(IMAGE, force=True)


def files_state(directory):
    return {
        name: hashlib.sha256(open(os.path.join(directory, name), "rb").read()).hexdigest()
        for name in sorted(os.listdir(directory))
    }


def test_save_writes_tarball_checksum_manifest_and_pointer(run_module, tiny_image, client, tmp_path):
    result = run_module(image_artifact, {"image": IMAGE, "dest": str(tmp_path), "manifest": {"flavour": "cpu"}})
    assert result.rc == 0, result
    assert result["changed"] is True
    files = result["paths"]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in files.values())
    digest = hashlib.sha256(pathlib.Path(files["tarball"]).read_bytes()).hexdigest()
    assert result["sha256"] == digest
    assert pathlib.Path(files["sha256"]).read_text() == f"{digest}  aic-unit-artifact-test.tar.zst\n"
    manifest = json.loads(pathlib.Path(files["manifest"]).read_text())
    assert manifest == json.loads(pathlib.Path(files["current"]).read_text())
    assert manifest["image"] == IMAGE
    assert manifest["image_id"] == tiny_image.id
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


def test_missing_image_fails_clearly(run_module, client, tmp_path):
    result = run_module(image_artifact, {"image": "aic-unit-artifact:absent", "dest": str(tmp_path)})
    assert result["failed"] is True
    assert "aic-unit-artifact:absent not found" in result["msg"]
    assert os.listdir(tmp_path) == []


def test_a_failing_save_leaves_the_previous_artifact_untouched(run_module, tiny_image, tmp_path):
    run_module(image_artifact, {"image": IMAGE, "dest": str(tmp_path)})
    before = files_state(tmp_path)
    files = artifact.paths(str(tmp_path), "aic-unit-artifact:newer")

    def broken_stream():
        yield b"x" * 1024
        raise OSError("connection reset by the engine")

    with pytest.raises(artifact.ArtifactError, match="docker save failed"):
        artifact.save(broken_stream(), files, {"image": "aic-unit-artifact:newer"})
    # No partial file, no new artifact, and the pointer still names the old image.
    assert files_state(tmp_path) == before
    assert json.loads((tmp_path / "aic-unit-artifact.current.json").read_text())["image"] == IMAGE


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
