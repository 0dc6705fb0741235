"""The release role and image_build's deprecated resolve entry point, run by ansible-playbook on localhost: the same
release, the facts under their new names (and their old ones through the shim, which says it is deprecated)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.aic.stack.plugins.module_utils import release as rel

REPO = Path(__file__).resolve().parents[3]
NAME = "aic-stack-cpu"
LAST = "aic-stack-cpu:0a0a0a0a0a0a"
HEALTHY = "aic-stack-cpu:0b0b0b0b0b0b"
BUILT = "aic-stack-cpu:0c0c0c0c0c0c"


def record(image, base="aic-base:1111"):
    stem = image.replace(":", "-")
    return {
        "image": image,
        "image_id": "sha256:" + "1" * 64,
        "tarball": f"{stem}.tar.zst",
        "tarball_bytes": 123,
        "sha256": "f" * 64,
        "flavour": "cpu",
        "base_image": base,
    }


@pytest.fixture
def site(tmp_path):
    """An artifact directory whose last build is LAST and a work dir whose last healthy release is HEALTHY."""
    artifacts, work = tmp_path / "artifacts", tmp_path / "work"
    artifacts.mkdir()
    work.mkdir()
    data = record(LAST)
    (artifacts / f"{LAST.replace(':', '-')}.manifest.json").write_text(json.dumps(data))
    (artifacts / f"{rel.image_name(LAST)}.current.json").write_text(json.dumps(data))
    (work / "deployed.json").write_text(json.dumps(dict(record(HEALTHY), source="manifest", manifest="")))
    return tmp_path, {
        "images": {"stack": {"name": NAME, "pinned": None}},
        "paths": {"artifact_dir": str(artifacts), "work_dir": str(work)},
    }


def play(tmp_path, plan, include, extra=None):
    """Run one play that includes the role as given and prints the facts; returns (facts, stdout)."""
    playbook = tmp_path / "play.yml"
    shown = ["aic_release", "release_last_healthy", "release_base_ref", "image_build_last_healthy",
             "image_build_base_ref"]  # fmt: skip
    tasks = [
        {"name": "Include", "ansible.builtin.include_role": include},
        {
            "name": "Show",
            "ansible.builtin.copy": {
                "dest": str(tmp_path / "facts.json"),
                "content": "{{ {" + ", ".join(f"'{k}': {k} | default('undefined')" for k in shown) + "} | to_json }}",
                "mode": "0644",
            },
        },
    ]
    playbook.write_text(yaml.safe_dump([{"name": "Release", "hosts": "localhost", "gather_facts": False,
                                         "tasks": tasks}]))  # fmt: skip
    extravars = {"aic_plan": plan, "ansible_python_interpreter": sys.executable, **(extra or {})}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
         "-e", json.dumps(extravars)],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads((tmp_path / "facts.json").read_text()), out.stdout


def test_the_role_resolves_the_last_build_and_publishes_the_last_healthy_and_the_base(site):
    tmp_path, plan = site
    facts, _out = play(tmp_path, plan, {"name": "release"})
    assert (facts["aic_release"]["image"], facts["aic_release"]["source"]) == (LAST, "manifest")
    assert facts["release_last_healthy"]["image"] == HEALTHY
    assert facts["release_base_ref"] == "aic-base:1111"
    assert facts["image_build_base_ref"] == "undefined"  # the new role sets no old name


def test_this_runs_build_and_base_image_win(site):
    tmp_path, plan = site
    extra = {"image_build_release": record(BUILT, base="aic-base:2222"), "base_image_ref": "aic-base:3333"}
    facts, _out = play(tmp_path, plan, {"name": "release"}, extra)
    assert (facts["aic_release"]["image"], facts["aic_release"]["source"]) == (BUILT, "build")
    # The base image the base_image role built in this run, not the one a record names.
    assert facts["release_base_ref"] == "aic-base:3333"


def test_the_deprecated_entry_point_still_works_and_says_it_is_deprecated(site):
    tmp_path, plan = site
    facts, out = play(tmp_path, plan, {"name": "image_build", "tasks_from": "resolve"})
    assert facts["aic_release"]["image"] == LAST
    assert facts["image_build_last_healthy"] == facts["release_last_healthy"]
    assert facts["image_build_last_healthy"]["image"] == HEALTHY
    assert facts["image_build_base_ref"] == facts["release_base_ref"] == "aic-base:1111"
    said = " ".join(out.split())  # the callback wraps long messages
    assert "tasks_from=resolve is deprecated" in said and "use the role aic.stack.release" in said, out


def test_nothing_to_deploy_fails_naming_what_to_do(tmp_path):
    plan = {"images": {"stack": {"name": NAME, "pinned": None}},
            "paths": {"artifact_dir": str(tmp_path), "work_dir": str(tmp_path)}}  # fmt: skip
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Release", "hosts": "localhost", "gather_facts": False,
                                         "tasks": [{"name": "R", "ansible.builtin.include_role": {"name": "release"}}]}]))  # fmt: skip
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
         "-e", json.dumps({"aic_plan": plan, "ansible_python_interpreter": sys.executable})],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert NAME in out.stdout, out.stdout
