"""The real patch series against the real pinned sources, and aic.stack.patch_series around them."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from ansible_collections.aic.stack.plugins.module_utils import patching

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
SERIES_ROOT = REPO_ROOT / "patches"
VLLM_SERIES = [
    "01-rocm-trust-torch-hip-when-amdsmi-sees-no-devices.patch",
    "02-rocm-gcn-arch-warning-to-stderr.patch",
]
LMCACHE_SERIES = [
    "01-vllm-cache-salt-isolates-keys.patch",
    "02-local-cpu-controller-sender-warning-to-debug.patch",
    "03-gds-no-eviction-warning-to-debug.patch",
    "04-chunk-statistics-hash-with-engine-config.patch",
    "05-nixl-storage-ais-mt-file-backend.patch",
    "06-gds-l1-slab-gauges-and-dma-counters.patch",
    "07-nixl-l2-ais-mt-and-l1-required.patch",
    "08-nixl-l2-file-size-must-hold-a-chunk.patch",
    "09-nixl-serialise-make-prepped-xfer.patch",
]
SERIES = {"vllm": VLLM_SERIES, "lmcache": LMCACHE_SERIES}
REFS = {"vllm": "v0.26.0", "lmcache": "v0.5.2"}
PROJECTS = sorted(SERIES)


def _warnings(result):
    """Warning texts (ansible-core 2.19 returns them as event dicts, older versions as strings)."""
    return [w if isinstance(w, str) else w["event"]["msg"] for w in result.get("warnings", [])]


def _series_dir(project):
    return SERIES_ROOT / project / REFS[project]


def _copy_series(project, tmp_path):
    """A writable copy of a series under tmp_path/patches/<project>/<ref> (same label as the real one)."""
    src = _series_dir(project)
    dest = tmp_path / "patches" / project / src.name
    shutil.copytree(src, dest)
    return dest


# -- (1) every real patch applies, cumulatively, to the real pinned source ---------------------


@pytest.mark.parametrize("project", PROJECTS)
def test_real_series_applies_to_pinned_source(pinned_sources, project):
    results = patching.check_series(str(pinned_sources[project]), str(_series_dir(project)))

    assert [r["name"] for r in results] == SERIES[project]
    assert [(r["name"], r["status"], r["message"]) for r in results] == [
        (name, "applies", "") for name in SERIES[project]
    ]
    for result in results:
        assert result["sha256"] == patching.sha256_file(result["path"])


def test_real_series_touch_the_files_the_issue_names():
    files = {r: patching.touched_paths(str(_series_dir(p) / r)) for p, names in SERIES.items() for r in names}
    nixl_l2 = ["lmcache/v1/distributed/l2_adapters/nixl_store_l2_adapter.py"]
    record_strategies = "lmcache/v1/lookup_client/record_strategies"
    assert files == {
        VLLM_SERIES[0]: ["vllm/platforms/__init__.py"],
        VLLM_SERIES[1]: ["vllm/platforms/rocm.py"],
        LMCACHE_SERIES[0]: ["lmcache/integration/vllm/vllm_v1_adapter.py"],
        LMCACHE_SERIES[1]: ["lmcache/v1/storage_backend/local_cpu_backend.py"],
        LMCACHE_SERIES[2]: ["lmcache/v1/storage_backend/gds_backend.py"],
        LMCACHE_SERIES[3]: [
            f"{record_strategies}/base.py",
            f"{record_strategies}/file_hash.py",
            f"{record_strategies}/memory_bloom_filter.py",
        ],
        LMCACHE_SERIES[4]: ["lmcache/v1/storage_backend/nixl_storage_backend.py"],
        LMCACHE_SERIES[5]: ["lmcache/v1/distributed/l1_manager.py", "lmcache/v1/gpu_connector/gds_context.py"],
        LMCACHE_SERIES[6]: nixl_l2,
        LMCACHE_SERIES[7]: nixl_l2,
        LMCACHE_SERIES[8]: nixl_l2,
    }


@pytest.mark.parametrize("project", PROJECTS)
def test_real_patches_have_a_format_patch_header(project):
    for name in SERIES[project]:
        text = (_series_dir(project) / name).read_text()
        header = text[: text.index("\ndiff --git ")]
        assert header.startswith("From ")
        assert "\nFrom: " in header and "\nSubject: [PATCH] " in header
        # An explanation of why, between the Subject and the diffstat.
        assert len(header.split("\n\n", 1)[1].split("\n---\n")[0].split()) > 40
        assert f" a/{project}/" in text and f" b/{project}/" in text


@pytest.mark.parametrize("project", PROJECTS)
def test_module_checks_real_series(pinned_sources, run_series, project):
    source = pinned_sources[project]
    before = {
        p: (source / p).read_bytes() for p in patching.touched_paths(str(_series_dir(project) / SERIES[project][0]))
    }

    result = run_series({"source": str(source), "patches": str(_series_dir(project))})

    assert result.rc == 0, result.get("msg")
    assert result["changed"] is False
    assert result["series"] == f"{project} {_series_dir(project).name}"
    assert [(p["name"], p["status"]) for p in result["patches"]] == [(n, "applies") for n in SERIES[project]]
    assert result["applied"] == [] and result["merged"] == []
    assert not _warnings(result)
    assert {p: (source / p).read_bytes() for p in before} == before  # state=checked writes nothing
    assert not (source / patching.STAMP_NAME).exists()


# -- cumulative order -------------------------------------------------------------------------


def _diff(tmp_path, before, after, rel="pkg/mod.py"):
    """A git-style patch (a/ b/ paths relative to the tree root) turning ``before`` into ``after``."""
    work = tmp_path / "diff"
    for side, text in (("a", before), ("b", after)):
        (work / side / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / side / rel).write_text(text)
    proc = subprocess.run(
        ["git", "diff", "--no-index", "--no-prefix", f"a/{rel}", f"b/{rel}"],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr  # 1: the files differ
    shutil.rmtree(work)
    return proc.stdout


def _lines(*values):
    return "".join(f"{v}\n" for v in values)


def test_series_is_checked_cumulatively_in_lexical_order(tmp_path):
    base = _lines("a", "b", "c", "d", "e", "f", "g")
    step1 = _lines("a", "b", "c", "ONE", "d", "e", "f", "g")
    step2 = _lines("a", "b", "c", "ONE", "TWO", "d", "e", "f", "g")  # context includes ONE from patch 1
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text(base)
    series = tmp_path / "patches" / "demo" / "v1"
    series.mkdir(parents=True)
    (series / "10-one.patch").write_text(_diff(tmp_path, base, step1))
    (series / "20-two.patch").write_text(_diff(tmp_path, step1, step2))
    (series / "README").write_text("not a patch")

    results = patching.check_series(str(source), str(series))
    assert [(r["name"], r["status"]) for r in results] == [("10-one.patch", "applies"), ("20-two.patch", "applies")]
    assert (source / "pkg" / "mod.py").read_text() == base  # only a temporary copy was patched

    # Patch 20 on its own (without 10 under it) does not apply: the check really is cumulative.
    (series / "10-one.patch").rename(series / "30-one.patch")
    results = patching.check_series(str(source), str(series))
    assert [(r["name"], r["status"]) for r in results] == [("20-two.patch", "fails"), ("30-one.patch", "applies")]
    assert "patch does not apply" in results[0]["message"]


def test_module_applies_overlapping_series_and_is_idempotent(tmp_path, run_series):
    base = _lines("a", "b", "c", "d", "e", "f", "g")
    step1 = _lines("a", "b", "c", "ONE", "d", "e", "f", "g")
    step2 = _lines("a", "b", "c", "ONE", "TWO", "d", "e", "f", "g")
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text(base)
    series = tmp_path / "patches" / "demo" / "v1"
    series.mkdir(parents=True)
    (series / "01-one.patch").write_text(_diff(tmp_path, base, step1))
    (series / "02-two.patch").write_text(_diff(tmp_path, step1, step2))
    args = {"source": str(source), "patches": str(series), "state": "applied"}

    first = run_series(args)
    assert first.rc == 0, first.get("msg")
    assert first["changed"] is True and first["applied"] == ["01-one.patch", "02-two.patch"]
    assert (source / "pkg" / "mod.py").read_text() == step2

    # Patch 01 no longer reverses on its own on top of 02 (they overlap): the whole series does.
    second = run_series(args)
    assert second.rc == 0, second.get("msg")
    assert second["changed"] is False and second["applied"] == []
    assert [p["status"] for p in second["patches"]] == ["applied", "applied"]
    assert (source / "pkg" / "mod.py").read_text() == step2


# -- (3) a broken patch fails the module, naming it --------------------------------------------


def test_broken_patch_fails_naming_it(pinned_sources, run_series, tmp_path):
    series = _copy_series("vllm", tmp_path)
    broken = series / VLLM_SERIES[1]
    text = broken.read_text()
    context = "\n         return _query_gcn_arch_from_amdsmi()\n"
    assert text.count(context) == 1
    broken.write_text(text.replace(context, "\n         return _query_gcn_arch_from_amdsmi_v2()\n"))
    source = pinned_sources["vllm"]

    result = run_series({"source": str(source), "patches": str(series)})

    assert result.failed
    assert result["msg"].startswith(f"patch {VLLM_SERIES[1]} does not apply to {source} (vllm v0.26.0): error: ")
    assert "vllm/platforms/rocm.py" in result["msg"]
    assert [(p["name"], p["status"]) for p in result["patches"]] == [
        (VLLM_SERIES[0], "applies"),
        (VLLM_SERIES[1], "fails"),
    ]


def test_broken_patch_with_state_applied_writes_nothing(pristine_copy, run_series, tmp_path):
    source = pristine_copy("vllm")
    before = {p: p.read_bytes() for p in source.rglob("*") if p.is_file()}
    series = _copy_series("vllm", tmp_path)
    (series / VLLM_SERIES[1]).write_text(
        (series / VLLM_SERIES[1]).read_text().replace("     except Exception as e:\n", "     except OSError as e:\n", 1)
    )

    result = run_series({"source": str(source), "patches": str(series), "state": "applied"})

    assert result.failed and result["msg"].startswith(f"patch {VLLM_SERIES[1]} does not apply")
    assert result["changed"] is False
    assert {p: p.read_bytes() for p in source.rglob("*") if p.is_file()} == before  # 01 was not applied either


def test_missing_series_and_source(tmp_path, run_series, pinned_sources):
    empty = tmp_path / "patches" / "vllm" / "v9"
    empty.mkdir(parents=True)
    result = run_series({"source": str(pinned_sources["vllm"]), "patches": str(empty)})
    assert result.failed and "no *.patch files in" in result["msg"]

    result = run_series({"source": str(tmp_path / "nope"), "patches": str(_series_dir("vllm"))})
    assert result.failed and "does not exist" in result["msg"]


# -- (4) a patch already in the source is reported merged --------------------------------------


def test_already_applied_series_is_reported_merged(pristine_copy, run_series, git_apply):
    source = pristine_copy("vllm")
    git_apply(source, [_series_dir("vllm") / n for n in VLLM_SERIES])  # "merged upstream"

    result = run_series({"source": str(source), "patches": str(_series_dir("vllm"))})

    assert result.rc == 0, result.get("msg")
    assert result["changed"] is False
    assert [(p["name"], p["status"]) for p in result["patches"]] == [(n, "merged") for n in VLLM_SERIES]
    assert result["merged"] == VLLM_SERIES
    warnings = _warnings(result)
    assert len(warnings) == 2
    assert warnings[0] == (
        f"patch {VLLM_SERIES[0]} is already merged in {source} (vllm v0.26.0); "
        "it was skipped and can be removed from the series"
    )


def test_one_merged_patch_is_skipped_and_the_rest_applies(pristine_copy, run_series, git_apply):
    source = pristine_copy("vllm")
    git_apply(source, [_series_dir("vllm") / VLLM_SERIES[0]])
    args = {"source": str(source), "patches": str(_series_dir("vllm"))}

    checked = run_series(args)
    assert [p["status"] for p in checked["patches"]] == ["merged", "applies"]

    applied = run_series(dict(args, state="applied"))
    assert applied.rc == 0, applied.get("msg")
    assert applied["changed"] is True
    assert applied["applied"] == [VLLM_SERIES[1]] and applied["merged"] == [VLLM_SERIES[0]]
    # The merged one stays "merged" (not "applied": this module did not apply it).
    again = run_series(dict(args, state="applied"))
    assert again["changed"] is False
    assert [p["status"] for p in again["patches"]] == ["merged", "applied"]


def test_fail_on_merged(pristine_copy, run_series, git_apply):
    source = pristine_copy("lmcache")
    git_apply(source, [_series_dir("lmcache") / LMCACHE_SERIES[0]])

    result = run_series({"source": str(source), "patches": str(_series_dir("lmcache")), "fail_on_merged": True})

    assert result.failed
    assert result["msg"] == (
        f"patch {LMCACHE_SERIES[0]} is already merged in {source} (lmcache v0.5.2): remove it from the series"
    )
    assert result["merged"] == LMCACHE_SERIES[:1]
    assert [(p["name"], p["status"]) for p in result["patches"]] == [(LMCACHE_SERIES[0], "merged")] + [
        (name, "applies") for name in LMCACHE_SERIES[1:]
    ]


# -- (5) state=applied is idempotent; check mode ------------------------------------------------


@pytest.mark.parametrize("project", PROJECTS)
def test_state_applied_is_idempotent(pristine_copy, run_series, project, tmp_path, git_apply):
    source = pristine_copy(project)
    reference = tmp_path / "reference"
    shutil.copytree(source, reference)
    git_apply(reference, [_series_dir(project) / n for n in SERIES[project]])
    args = {"source": str(source), "patches": str(_series_dir(project)), "state": "applied"}

    first = run_series(args)
    assert first.rc == 0, first.get("msg")
    assert first["changed"] is True
    assert first["applied"] == SERIES[project]
    assert [p["status"] for p in first["patches"]] == ["applies"] * len(SERIES[project])
    for ref in reference.rglob("*.py"):
        assert (source / ref.relative_to(reference)).read_bytes() == ref.read_bytes()
    stamp = json.loads((source / patching.STAMP_NAME).read_text())
    assert [p["name"] for p in stamp["patches"]] == SERIES[project]

    second = run_series(args)
    assert second.rc == 0, second.get("msg")
    assert second["changed"] is False
    assert second["applied"] == [] and second["merged"] == []
    assert [p["status"] for p in second["patches"]] == ["applied"] * len(SERIES[project])
    assert not _warnings(second)


def test_check_mode_reports_without_writing(pristine_copy, run_series):
    source = pristine_copy("vllm")
    before = {p: p.read_bytes() for p in source.rglob("*") if p.is_file()}

    result = run_series(
        {"source": str(source), "patches": str(_series_dir("vllm")), "state": "applied"},
        check_mode=True,
    )

    assert result.rc == 0, result.get("msg")
    assert result["changed"] is True and result["applied"] == VLLM_SERIES
    assert {p: p.read_bytes() for p in source.rglob("*") if p.is_file()} == before
    assert not (source / patching.STAMP_NAME).exists()


def test_source_inside_a_git_checkout(pristine_copy, run_series, tmp_path):
    """A source below some git work tree (like .work/ in this repository) is patched by its own paths."""
    outer = tmp_path / "checkout"
    (outer / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    source = outer / "sub" / "vllm"
    shutil.copytree(pristine_copy("vllm"), source)

    result = run_series({"source": str(source), "patches": str(_series_dir("vllm")), "state": "applied"})

    assert result.rc == 0, result.get("msg")
    assert result["applied"] == VLLM_SERIES
    assert "torch.version.hip" in (source / "vllm/platforms/__init__.py").read_text()


# -- (6) documentation -------------------------------------------------------------------------


def test_ansible_doc_renders():
    ansible_doc = pathlib.Path(sys.executable).with_name("ansible-doc")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"))
    proc = subprocess.run(
        [str(ansible_doc), "--json", "aic.stack.patch_series"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)["aic.stack.patch_series"]
    assert set(doc["doc"]["options"]) == {"source", "patches", "state", "fail_on_merged"}
    assert doc["doc"]["attributes"]["check_mode"]["support"] == "full"
    assert {"patches", "applied", "merged", "series"} <= set(doc["return"])
    assert "aic.stack.patch_series:" in doc["examples"]

    text = subprocess.run(
        [str(ansible_doc), "aic.stack.patch_series"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert text.returncode == 0, text.stderr
    assert "fail_on_merged" in text.stdout and "ERROR" not in text.stderr
