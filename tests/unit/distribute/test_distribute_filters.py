"""Filters and helpers of the image_distribute role: who receives, which strategy, each node's upstreams."""

from __future__ import annotations

import hashlib
import io

import pytest
from ansible.errors import AnsibleFilterError, AnsibleLookupError

from ansible_collections.aic.stack.plugins.filter import distribute as f
from ansible_collections.aic.stack.plugins.lookup.route_source import route_source
from ansible_collections.aic.stack.plugins.modules import image_load

GOOD = {
    "image": "aic-stack-cpu:d7c0f63149ad",
    "image_id": "sha256:" + "a" * 64,
    "tarball": "aic-stack-cpu-d7c0f63149ad.tar.zst",
    "tarball_bytes": 1634374603,
    "sha256": "0d8b24c5772c6324a827a864b507b2a70eafa86210a2f0965b641d091ae2627b",
}


def test_needed_keeps_order_and_drops_nodes_that_have_the_image():
    assert f.distribute_needed(["a", "b", "c", "d"], [1, 0, 2, 0]) == ["b", "d"]
    assert f.distribute_needed(["a"], [1]) == []
    with pytest.raises(AnsibleFilterError, match="3 hosts but 2 answers"):
        f.distribute_needed(["a", "b", "c"], [0, 0])


@pytest.mark.parametrize(
    ("strategy", "count", "shared", "expected"),
    [
        ("auto", 8, "", "broadcast"),
        ("auto", 2, "/shared", "broadcast"),
        ("auto", 1, "/shared", "shared_fs"),
        ("auto", 1, "", "push"),
        ("push", 8, "", "push"),
        ("copy", 1, "", "copy"),
        ("shared_fs", 3, "/shared", "shared_fs"),
    ],
)
def test_strategy(strategy, count, shared, expected):
    assert f.distribute_strategy(strategy, count, shared) == expected


def test_unknown_strategy_is_named():
    with pytest.raises(AnsibleFilterError, match="'torrent' is not one of auto, broadcast, push, copy, shared_fs"):
        f.distribute_strategy("torrent", 2)


def test_manifest_errors():
    assert f.distribute_manifest_errors(GOOD) == []
    assert f.distribute_manifest_errors([]) == ["the manifest is not a JSON object"]
    broken = dict(GOOD, sha256="xyz", image_id="abc", tarball="../x.tar.zst")
    del broken["tarball_bytes"]
    assert f.distribute_manifest_errors(broken) == [
        "missing tarball_bytes",
        "sha256 'xyz' is not 64 hex digits",
        "image_id 'abc' is not sha256:...",
        "tarball '../x.tar.zst' must be a file name",
    ]


def test_chain_upstreams_go_back_towards_the_controller():
    needed, addresses = ["n1", "n2", "n3"], ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert f.relay_upstreams("n1", needed, addresses, "10.0.0.254", 29870) == [
        {"name": "controller", "host": "10.0.0.254", "port": 29870}
    ]
    assert f.relay_upstreams("n3", needed, addresses, "10.0.0.254", "29870") == [
        {"name": "n2", "host": "10.0.0.2", "port": 29870},
        {"name": "n1", "host": "10.0.0.1", "port": 29870},
        {"name": "controller", "host": "10.0.0.254", "port": 29870},
    ]
    assert f.relay_upstreams("n3", needed, addresses, "c", 1, "push") == [
        {"name": "controller", "host": "c", "port": 1}
    ]
    with pytest.raises(AnsibleFilterError, match="n9 is not among"):
        f.relay_upstreams("n9", needed, addresses, "c", 1)
    with pytest.raises(AnsibleFilterError, match="3 nodes but 2 addresses"):
        f.relay_upstreams("n1", needed, addresses[:2], "c", 1)


def test_route_source_of_loopback_is_loopback():
    assert route_source("127.0.0.1") == "127.0.0.1"
    with pytest.raises(AnsibleLookupError, match="cannot resolve"):
        route_source("no-such-host.invalid")


def _feed(tmp_path, data, sha):
    path = tmp_path / "t.tar.zst"
    path.write_bytes(data)
    sink = io.BytesIO()
    state = {"bytes": 0, "digest": None}
    return path, sink, state


def test_feed_verified_writes_everything_when_the_digest_matches(tmp_path):
    data = bytes(range(256)) * 40000  # > 2 chunks
    path, sink, state = _feed(tmp_path, data, None)
    image_load.feed_verified(str(path), hashlib.sha256(data).hexdigest(), sink, state)
    assert sink.getvalue() == data and state["bytes"] == len(data)


def test_feed_verified_holds_back_the_last_block_on_a_mismatch(tmp_path):
    data = bytes(range(256)) * 40000
    path, sink, state = _feed(tmp_path, data, None)
    with pytest.raises(image_load.Mismatch):
        image_load.feed_verified(str(path), "0" * 64, sink, state)
    # The consumer (zstd | docker load) never sees the end of the archive, so nothing can be registered.
    written = sink.getvalue()
    assert len(written) < len(data) and data.startswith(written)
    assert len(data) - len(written) == len(data) % image_load.CHUNK or len(data) - len(written) == image_load.CHUNK
    assert state["digest"] == hashlib.sha256(data).hexdigest()


def test_addresses_prefer_the_data_path_address_then_ansible_host():
    hostvars = {
        "a": {"image_distribute_node_address": "192.168.1.1", "ansible_host": "10.0.0.1"},
        "b": {"ansible_host": "10.0.0.2"},
        "c": {},
    }
    assert f.distribute_addresses(["c", "b", "a"], hostvars) == ["c", "10.0.0.2", "192.168.1.1"]


def test_the_engine_question_uses_the_real_docker_api():
    import subprocess
    import tarfile

    from ansible_collections.aic.stack.plugins.modules.image_relay import engine_has_image

    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    tag = "aic-unit-relay-check:1"
    subprocess.run(["docker", "import", "-", tag], input=archive.getvalue(), check=True, capture_output=True)
    try:
        image_id = subprocess.run(
            ["docker", "image", "inspect", "-f", "{{.Id}}", tag], check=True, capture_output=True, text=True
        ).stdout.strip()
        assert engine_has_image(image_id) is True
        assert engine_has_image("sha256:" + "0" * 64) is False
        with pytest.raises(ValueError, match="is not unix:///path or tcp://host:port"):
            engine_has_image(image_id, "ssh://somewhere")
    finally:
        subprocess.run(["docker", "rmi", tag], check=False, capture_output=True)
