"""Release resolution (plugins/module_utils/release.py): one record shape, pinned -> build -> pointer -> last healthy."""

from __future__ import annotations

import json

import pytest

from ansible_collections.aic.stack.plugins.module_utils import release as rel

NAME = "aic-stack-rocm"
OLD = "aic-stack-rocm:0.1.0-gfx950-aaaa"
NEW = "aic-stack-rocm:0.1.0-gfx950-bbbb"


def manifest(image, image_id="sha256:" + "1" * 64):
    stem = image.replace(":", "-")
    return {
        "image": image,
        "image_id": image_id,
        "tarball": f"{stem}.tar.zst",
        "tarball_bytes": 123,
        "sha256": "f" * 64,
        "flavour": "rocm",
    }


def write_artifact(directory, data, current=True):
    stem = data["image"].replace(":", "-")
    (directory / f"{stem}.manifest.json").write_text(json.dumps(data))
    if current:
        (directory / f"{rel.image_name(data['image'])}.current.json").write_text(json.dumps(data))
    return str(directory / f"{stem}.manifest.json")


def test_pinned_needs_no_record_and_no_tarball(tmp_path):
    out = rel.resolve(NAME, pinned=NEW, artifact_dir=str(tmp_path))
    assert out["image"] == NEW and out["source"] == "pinned"
    assert out["manifest"] == "" and out["image_id"] == ""
    assert not rel.distributable(out)


def test_pinned_wins_over_build_and_pointer_and_carries_its_artifact(tmp_path):
    write_artifact(tmp_path, manifest(OLD))
    path = write_artifact(tmp_path, manifest(NEW, "sha256:" + "2" * 64), current=False)
    out = rel.resolve(NAME, pinned=NEW, build=manifest(OLD), artifact_dir=str(tmp_path), last_healthy={"image": OLD})
    assert out["source"] == "pinned" and out["manifest"] == path
    assert out["image_id"] == "sha256:" + "2" * 64
    assert rel.distributable(out)


def test_build_of_this_run_wins_over_pointer(tmp_path):
    write_artifact(tmp_path, manifest(OLD))
    path = write_artifact(tmp_path, manifest(NEW), current=False)
    out = rel.resolve(NAME, build=manifest(NEW), artifact_dir=str(tmp_path))
    assert (out["image"], out["source"], out["manifest"]) == (NEW, "build", path)


def test_build_without_artifact_is_not_distributable(tmp_path):
    out = rel.resolve(NAME, build={"image": NEW, "base": "aic-base:x", "deps": "d:1"}, artifact_dir=str(tmp_path))
    assert out["source"] == "build" and not rel.distributable(out)
    # The old build record's key names become the manifest's.
    assert out["base_image"] == "aic-base:x" and out["deps_image"] == "d:1"
    assert "base" not in out and "deps" not in out


def test_build_whose_artifact_is_another_image_id_does_not_take_its_manifest(tmp_path):
    write_artifact(tmp_path, manifest(NEW, "sha256:" + "9" * 64), current=False)
    out = rel.resolve(NAME, build=manifest(NEW, "sha256:" + "2" * 64), artifact_dir=str(tmp_path))
    assert out["manifest"] == "" and out["image_id"] == "sha256:" + "2" * 64


def test_pointer_when_nothing_was_pinned_or_built(tmp_path):
    path = write_artifact(tmp_path, manifest(OLD))
    out = rel.resolve(NAME, artifact_dir=str(tmp_path), last_healthy={"image": NEW})
    assert (out["image"], out["source"], out["manifest"]) == (OLD, "manifest", path)
    assert rel.distributable(out)


def test_last_healthy_is_the_last_resort():
    out = rel.resolve(NAME, artifact_dir="/nonexistent", last_healthy={"image": OLD, "deployed_at": "t"})
    assert out["source"] == "last_healthy" and out["image"] == OLD and "deployed_at" not in out


def test_nothing_to_deploy_says_what_to_do(tmp_path):
    with pytest.raises(rel.ReleaseError, match="build first .* or pin aic_stack_image"):
        rel.resolve(NAME, artifact_dir=str(tmp_path))


def test_broken_pointer_is_named(tmp_path):
    (tmp_path / f"{NAME}.current.json").write_text("{not json")
    with pytest.raises(rel.ReleaseError, match=r"aic-stack-rocm.current.json: not a readable JSON record"):
        rel.resolve(NAME, artifact_dir=str(tmp_path))


@pytest.mark.parametrize("bad", [{"image": "no tag"}, {"image": ""}, {}, ["x"], "UPPER SPACE"])
def test_malformed_records_are_refused(bad):
    with pytest.raises(rel.ReleaseError, match="is not a release record"):
        rel.record(bad, "build")


def test_one_shape_for_all_records(tmp_path):
    write_artifact(tmp_path, manifest(OLD))
    pinned = rel.resolve(NAME, pinned=NEW)
    built = rel.resolve(NAME, build=manifest(NEW))
    pointed = rel.resolve(NAME, artifact_dir=str(tmp_path))
    healthy = rel.resolve(NAME, last_healthy=rel.deployed_record(pointed, "2026-12-01T00:00:00+00:00"))
    for out in (pinned, built, pointed, healthy):
        assert {"image", "image_id", "base_image", "source", "manifest"} <= set(out)


def test_rollback_target_is_the_last_healthy_other_image():
    new = rel.record(manifest(NEW, "sha256:" + "2" * 64), "build")
    assert rel.rollback_target(new, None) is None
    assert rel.rollback_target(new, manifest(NEW, "sha256:" + "2" * 64)) is None
    back = rel.rollback_target(new, rel.deployed_record(rel.record(manifest(OLD), "manifest"), "t"))
    assert back["image"] == OLD and back["source"] == "last_healthy"
    # Same tag, rebuilt under another id: the old id is what passed health, restore it.
    assert rel.rollback_target(new, manifest(NEW, "sha256:" + "3" * 64))["image_id"] == "sha256:" + "3" * 64


def test_image_name_keeps_registry_ports():
    assert rel.image_name("registry:5000/ns/aic-stack-rocm:tag") == "registry:5000/ns/aic-stack-rocm"
    assert rel.image_name("prom/prometheus:v3.13.2") == "prom/prometheus"


def test_deployed_record_is_stable_across_reruns():
    release = rel.record(manifest(NEW), "build", "/a/m.json")
    first = rel.deployed_record(release, "2026-12-01T10:00:00+00:00")
    assert "source" not in first and "manifest" not in first and first["deployed_at"] == "2026-12-01T10:00:00+00:00"
    again = rel.deployed_record(rel.record(manifest(NEW), "manifest", "/b"), "2026-12-02T00:00:00+00:00", first)
    assert again == first
    other = rel.deployed_record(rel.record(manifest(OLD), "pinned"), "2026-12-03T00:00:00+00:00", first)
    assert other["image"] == OLD and other["deployed_at"] == "2026-12-03T00:00:00+00:00"
    # Read back, it is a release record whose source is last_healthy.
    assert rel.record(first, "last_healthy")["source"] == "last_healthy"


def test_a_rerun_rewrites_nothing_through_the_records_the_action_returns():
    # First rollout: the pinned release with its artifact; deployed.json is written from it.
    release = rel.record(manifest(NEW), "pinned", "/a/m.json")
    written = rel.deployed_record(release, "t0")
    # Rerun: the action reads deployed.json back (last_healthy_record) and resolves the same release.
    last = rel.last_healthy_record(written)
    assert last["deployed_at"] == "t0" and last["source"] == "last_healthy"
    assert rel.deployed_record(release, "t1", last) == written
    assert rel.last_healthy_record(None) is None


def test_pinned_rerun_keeps_the_known_image_id():
    first = rel.deployed_record(rel.record(manifest(NEW), "build"), "t0")
    pinned = rel.resolve(NAME, pinned=NEW)
    assert rel.deployed_record(pinned, "t1", first)["image_id"] == first["image_id"]
