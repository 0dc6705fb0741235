"""The node's engine after docker_host (and after side_effect stopped it and the role started it again): Debian's
docker.io answers on the socket, started in the background by the role (its log in /var/log/aic-dockerd.log), on
storage driver overlay2 and a bridge of its own; a container runs on that bridge."""

from __future__ import annotations

import json

import pytest

# A one-binary image from the node's own files (no registry here): dash and the C library it links.
IMAGE = "aic-molecule-sh:1"
IMAGE_FILES = ["bin/sh", "lib64/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/libc.so.6"]
# The engine's /info through the Docker SDK the role installed (python3-docker): JSON, no Go template.
INFO = "import docker, json; print(json.dumps(docker.from_env().info()))"


@pytest.fixture(scope="module")
def info(host):
    return json.loads(host.check_output("python3 -c %s", INFO))


def test_the_packages_of_the_role_are_installed(host):
    for package in ("docker.io", "debootstrap", "zstd", "iproute2", "python3-docker"):
        assert host.package(package).is_installed, package


def test_the_engine_answers_started_by_the_role_in_the_background(host, info):
    assert info["ServerVersion"].startswith("20.10."), info["ServerVersion"]
    # No systemd on the node: start-dockerd.sh started it, writing to the role's log.
    assert not host.file("/run/systemd/system").exists
    assert "API listen on /var/run/docker.sock" in host.file("/var/log/aic-dockerd.log").content_string
    pid = host.file("/var/run/docker.pid").content_string.strip()
    assert host.file(f"/proc/{pid}/comm").content_string.strip() == "dockerd"


def test_the_engine_stores_images_with_overlay2(info):
    assert info["Driver"] == "overlay2", info["Driver"]


def test_the_engine_has_a_bridge_of_its_own(host, info):
    bridge = json.loads(host.check_output("docker network inspect bridge"))[0]
    assert bridge["Options"]["com.docker.network.bridge.name"] == "docker0"
    (subnet,) = [config["Subnet"] for config in bridge["IPAM"]["Config"]]
    addresses = json.loads(host.check_output("ip -j -4 addr show dev docker0"))[0]["addr_info"]
    assert [f"{a['local']}/{a['prefixlen']}" for a in addresses] == [subnet.replace(".0/", ".1/")], (subnet, addresses)


def test_a_container_runs_on_that_bridge(host):
    host.check_output("tar -C / -c --dereference -f /tmp/sh.tar " + " ".join(["%s"] * len(IMAGE_FILES)), *IMAGE_FILES)
    host.check_output("docker import /tmp/sh.tar %s", IMAGE)
    # /proc/net/route with dash's builtins only: the container's default route goes through docker0's address.
    out = host.check_output(
        "docker run --rm %s /bin/sh -c %s",
        IMAGE,
        'while read -r iface dest gw rest; do [ "$dest" = 00000000 ] && echo "$iface $gw"; done < /proc/net/route; echo ran',
    )
    lines = out.splitlines()
    assert lines[-1] == "ran", out
    iface, gateway = lines[0].split()
    docker0 = json.loads(host.check_output("ip -j -4 addr show dev docker0"))[0]["addr_info"][0]["local"]
    # /proc/net/route writes the address as little-endian hex.
    assert iface == "eth0" and ".".join(str(int(gateway[i : i + 2], 16)) for i in (6, 4, 2, 0)) == docker0, out
