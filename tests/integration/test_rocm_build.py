"""The rocm flavour on the controller: patch preflight against the real pinned sources, then the build contexts.

No ROCm base image or GPU exists here, so the rocm images are rendered (image_build_render_only) instead of built;
the same tasks build them on a ROCm build host.
"""

from __future__ import annotations

import pathlib
import shutil

import dockerfile
import pytest

from .conftest import REPO, changed_tasks, failures, run_playbook

pytestmark = pytest.mark.integration

ROCM = {
    "aic_flavour": "rocm",
    "aic_vllm_model": "openai/gpt-oss-120b",
    "aic_rocm_arches": ["gfx942", "gfx950", "gfx1151"],
    "image_build_render_only": True,
    # The local inventory's L2 slots are sized for the tiny cpu model, not for gpt-oss: no L2 for this build.
    "aic_lmcache_l2_backend": "none",
}
BUILD = REPO / ".work" / "build"


def instructions(path):
    return [(i.cmd.upper(), i.value) for i in dockerfile.parse_file(str(path))]


def test_rocm_contexts_render_one_image_per_matrix_entry_and_rerun_is_a_no_op(session_tmp):
    runner = run_playbook("playbooks/build.yml", session_tmp, extravars=ROCM)
    assert runner.status == "successful", failures(runner)
    tasks = {e["event_data"].get("task") for e in runner.events if e.get("event") == "runner_on_ok"}
    assert "Check that each patch series still applies" in tasks
    recorded = [
        e["event_data"]["res"]["ansible_facts"]["image_build_rocm_images"]
        for e in runner.events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Record the rendered build"
    ][-1]
    # A set that is not entirely inside {gfx942, gfx950} builds vLLM from source, one image per consumer arch.
    assert [(r["arch_list"], r["vllm_source"]) for r in recorded] == [
        ("gfx942;gfx950", "source"),
        ("gfx1151", "source"),
    ]
    assert len({r["image"] for r in recorded}) == 2
    for suffix in ("gfx942-gfx950", "gfx1151"):
        base = instructions(BUILD / f"aic-stack-rocm-base-{suffix}" / "Dockerfile")
        stack = instructions(BUILD / f"aic-stack-rocm-{suffix}" / "Dockerfile")
        assert base[0][0] in ("ARG", "FROM")
        assert any(cmd == "FROM" for cmd, _dummy in stack)
        # Each context carries the whole vLLM and LMCache series the Dockerfile applies (2 and 9 patches).
        for project, ref, count in (("vllm", "v0.26.0", 2), ("lmcache", "v0.5.2", 9)):
            series = sorted(p.name for p in (BUILD / f"aic-stack-rocm-{suffix}" / "patches" / project / ref).iterdir())
            assert series == sorted(p.name for p in (REPO / "patches" / project / ref).glob("*.patch"))
            assert len(series) == count, (project, series)
        text = (BUILD / f"aic-stack-rocm-{suffix}" / "Dockerfile").read_text()
        assert "PYTORCH_ROCM_ARCH" in text
    again = run_playbook("playbooks/build.yml", session_tmp, extravars=ROCM)
    assert again.status == "successful", failures(again)
    assert changed_tasks(again) == []


def test_a_patch_that_no_longer_applies_fails_in_seconds_naming_it(session_tmp, tmp_path):
    patches = tmp_path / "patches"
    shutil.copytree(REPO / "patches", patches)
    broken = patches / "vllm" / "v0.26.0" / "02-rocm-gcn-arch-warning-to-stderr.patch"
    lines = broken.read_text().splitlines(keepends=True)
    # Corrupt the first context line of the first hunk: the patch no longer matches the pinned source.
    hunk = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    first_context = next(i for i in range(hunk + 1, len(lines)) if lines[i].startswith(" "))
    lines[first_context] = " this line is not in vLLM v0.26.0\n"
    broken.write_text("".join(lines))
    runner = run_playbook(
        "playbooks/build.yml", session_tmp, extravars={**ROCM, "image_build_patches_dir": str(patches)}
    )
    assert runner.status == "failed"
    messages = failures(runner)
    assert any("02-rocm-gcn-arch-warning-to-stderr.patch" in m and "does not apply" in m for m in messages), messages
    # It failed in the preflight check, before any build context was touched.
    ran = [e["event_data"].get("task") for e in runner.events if e.get("event") == "runner_on_ok"]
    assert "Render the dependency image Dockerfile" not in ran
    assert pathlib.Path(patches).is_dir()
