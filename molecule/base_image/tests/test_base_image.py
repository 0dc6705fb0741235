"""Checks, from inside the Docker-host instance, the image the base_image role built and imported."""

from __future__ import annotations

import json
import pathlib

import pytest

TEST_CA = pathlib.Path(__file__).resolve().parent.parent / "files" / "aic-molecule-test-ca.crt"


@pytest.fixture(scope="module")
def settings(host):
    """The scenario's inventory variables (molecule.yml provisioner.inventory)."""
    variables = host.ansible.get_variables()
    return {"name": variables["aic_base_image_name"], "work_dir": variables["aic_work_dir"]}


@pytest.fixture(scope="module")
def image(host, settings):
    """The one aic-molecule-base:<tag> image (cleanup removes old ones)."""
    # Default table output: no Go template, which Ansible would try to render as Jinja.
    out = host.check_output("docker image ls %s", settings["name"])
    refs = [":".join(line.split()[:2]) for line in out.splitlines()[1:]]
    assert len(refs) == 1, f"expected exactly one {settings['name']} image, got {refs}"
    return refs[0]


def run_in(host, image, script):
    return host.run("docker run --rm --network none %s /bin/sh -c %s", image, script)


def test_image_exists_with_content_tag(image, settings):
    name, tag = image.split(":")
    assert name == settings["name"]
    assert tag not in ("", "latest", "<none>")


def test_import_changes(host, image):
    config = json.loads(host.check_output("docker image inspect %s", image))[0]["Config"]
    assert config["Labels"].get("ai.aic.base.suite") == "bookworm"
    assert "LANG=C.UTF-8" in config["Env"]
    assert config["Cmd"] == ["/bin/bash"]


def test_is_debian_bookworm(host, image):
    out = run_in(host, image, "cat /etc/os-release")
    assert out.rc == 0, out.stderr
    assert "VERSION_CODENAME=bookworm" in out.stdout
    assert "ID=debian" in out.stdout


def test_python3_runs(host, image):
    out = run_in(host, image, "python3 -c 'import sys, venv; print(sys.version_info[0])'")
    assert out.rc == 0, out.stderr
    assert out.stdout.strip() == "3"


def test_extra_ca_is_trusted(host, image):
    body = [line for line in TEST_CA.read_text().splitlines() if line and not line.startswith("-----")]
    distinctive = body[-1]
    out = run_in(host, image, f"grep -c -F -x {distinctive} /etc/ssl/certs/ca-certificates.crt")
    assert out.rc == 0 and out.stdout.strip() == "1", (out.stdout, out.stderr)


def test_no_ssh_host_keys(host, image):
    out = run_in(host, image, "ls /etc/ssh/ssh_host_* 2>/dev/null | wc -l")
    assert out.rc == 0, out.stderr
    assert out.stdout.strip() == "0"


def test_no_apt_lists(host, image):
    out = run_in(host, image, "ls /var/lib/apt/lists | grep -c _Packages || true")
    assert out.stdout.strip() == "0"


def test_scratch_rootfs_removed(host, settings):
    assert not host.file(f"{settings['work_dir']}/base-rootfs").exists
