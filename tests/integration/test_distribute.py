"""image_distribute on the multi-node test bed (scripts/testbed.sh): four nodes, each a network namespace with its
own sshd and Docker engine, links capped with tc. The images are real (docker import), the transfers real TCP, the
loads real `docker load`s on the nodes' engines; failures are made by killing a relay process, cutting a node's
link, giving a node a corrupted view of the shared file, or a manifest that does not match its tarball.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import time

import pytest
import yaml

from .conftest import REPO, changed_tasks, failures, run_playbook

pytestmark = pytest.mark.integration

BED = pathlib.Path(os.environ.get("AIC_BED_DIR", "/var/lib/aic-bed"))
TESTBED = REPO / "scripts" / "testbed.sh"
NODES = 4
RATE = "10mbps"  # 10 MB/s per link
# The image of the tests that break a transfer midway (a relay killed, a link cut): a 48 MiB tarball takes ~5 s
# per link, long enough to break things mid-transfer. Every other test needs a delivery, not its duration: 8 MiB
# (~1 s per link; still several 4 MiB relay frames and load blocks).
LONG_BLOB_MIB = 48
BLOB_MIB = 8
STALL = 2
# One ssh connection per node for the helpers below (testbed.sh down removes the sockets with the bed's cp-*).
SSH_MUX = ["-o", "ControlMaster=auto", "-o", "ControlPersist=60s", "-o", f"ControlPath={BED}/cp-test-%C"]


def sh(*cmd, **kwargs):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs).stdout


def on_node(i, command):
    """Run a shell command on node i through its sshd (the node's own mount namespace and Docker engine)."""
    return sh(
        "ssh", "-q", "-i", str(BED / "ssh" / "id_ed25519"), "-o", "UserKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes", *SSH_MUX, f"root@10.77.0.{10 + i}", command,
    )  # fmt: skip


def node_images(i):
    return set(on_node(i, "docker images -q --no-trunc").split())


def make_image(name, blob_mib, workdir):
    """A runnable image (sleep and its libraries) plus blob_mib MiB of random data, saved as tarball + manifest."""
    root = workdir / name
    for path in ("/bin/sleep", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"):
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest)
    if blob_mib:
        (root / "blob").write_bytes(os.urandom(blob_mib << 20))
    sh("tar", "-C", str(root), "-cf", str(workdir / f"{name}.tar"), ".")
    sh("docker", "import", "-c", 'CMD ["/bin/sleep", "infinity"]', str(workdir / f"{name}.tar"), f"{name}:1")
    tarball = BED / "shared" / f"{name}.tar.zst"
    with open(tarball, "wb") as out:
        save = subprocess.Popen(["docker", "save", f"{name}:1"], stdout=subprocess.PIPE)
        subprocess.run(["zstd", "-q", "-1"], stdin=save.stdout, stdout=out, check=True)
        assert save.wait() == 0
    image_id = sh("docker", "image", "inspect", "-f", "{{.Id}}", f"{name}:1").strip()
    sh("docker", "rmi", f"{name}:1")
    manifest = {
        "image": f"{name}:1",
        "image_id": image_id,
        "tarball": tarball.name,
        "tarball_bytes": tarball.stat().st_size,
        "sha256": hashlib.sha256(tarball.read_bytes()).hexdigest(),
    }
    path = BED / "shared" / f"{name}.manifest.json"
    path.write_text(json.dumps(manifest))
    return path, manifest


@pytest.fixture(scope="module")
def bed():
    sh(str(TESTBED), "up", str(NODES), RATE, timeout=300)
    work = pathlib.Path(tempfile.mkdtemp(prefix="aic-distribute-"))
    try:
        new = make_image("aic-dist-new", BLOB_MIB, work)
        long = make_image("aic-dist-long", LONG_BLOB_MIB, work)
        old = make_image("aic-dist-old", 0, work)
        yield {"new": new, "long": long, "old": old}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        sh(str(TESTBED), "down", timeout=300)


@pytest.fixture
def clean(bed):
    sh(str(TESTBED), "wipe", timeout=300)
    return bed


def distribute(tmp_path, manifest, inventory=None, cmdline=None, **extra):
    return run_playbook(
        "playbooks/distribute.yml",
        tmp_path,
        inventory=inventory or BED / "inventory.yml",
        extravars={
            "image_distribute_manifest": str(manifest),
            "image_distribute_stall_timeout": STALL,
            "image_distribute_progress_interval": 2,
            "image_distribute_log_dir": str(tmp_path / "logs"),
            **extra,
        },
        cmdline=cmdline,
    )


def host_results(runner, task_part):
    """{host: res} of the events (ok or failed) of tasks whose name contains task_part."""
    out = {}
    for event in runner.events:
        data = event.get("event_data", {})
        if event.get("event") in ("runner_on_ok", "runner_on_failed") and task_part in (data.get("task") or ""):
            out[data["host"]] = data["res"]
    return out


def summary(runner):
    return next(iter(host_results(runner, "Summary").values()))["msg"]


def when_part_grows(node, tarball, fraction, action, timeout=60):
    """Run action() once node's partial tarball holds more than fraction of it (watched from the host)."""
    part = BED / "nodes" / f"node{node}" / "tmp" / "aic" / "images" / (tarball["tarball"] + ".part")
    done = threading.Event()

    def watch():
        deadline = time.time() + timeout
        while time.time() < deadline:
            if part.exists() and part.stat().st_size > fraction * tarball["tarball_bytes"]:
                action()
                done.set()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return done


def kill_relay(node, tarball):
    """SIGKILL node's relay daemon (its pid file lies next to the tarball, in the node's private /var/tmp)."""
    pid_file = BED / "nodes" / f"node{node}" / "tmp" / "aic" / "images" / f".{tarball['tarball']}.relay.pid"
    pid = int(pid_file.read_text())
    # The pid must belong to the node's network namespace: never kill a process of this host by mistake.
    assert str(pid) in sh("ip", "netns", "pids", f"aicbed-{node}").split()
    os.kill(pid, 9)


def test_broadcast_reaches_every_node_then_a_rerun_moves_nothing(clean, tmp_path):
    path, manifest = clean["new"]
    runner = distribute(tmp_path, path, image_distribute_strategy="broadcast")
    assert runner.status == "successful", failures(runner)
    for i in range(1, NODES + 1):
        assert manifest["image_id"] in node_images(i)
        # The received tarball is removed after a verified load.
        assert not on_node(i, "ls /var/tmp/aic/images 2>/dev/null").strip()
    relays = host_results(runner, "Collect each node's result")
    assert sorted(relays) == [f"node{i}" for i in range(1, NODES + 1)]
    assert all(r["bytes_received"] == manifest["tarball_bytes"] and not r["events"] for r in relays.values())
    # A chain: the controller sent the tarball once, each node but the last forwarded it once.
    watch = next(iter(host_results(runner, "Show every node's progress").values()))
    assert watch["served_bytes"] == manifest["tarball_bytes"]
    assert [relays[f"node{i}"]["served_bytes"] for i in range(1, NODES + 1)] == [manifest["tarball_bytes"]] * (
        NODES - 1
    ) + [0]
    assert [watch["nodes"][f"node{i}"]["upstream"] for i in range(1, NODES + 1)] == [
        "controller",
        "node1",
        "node2",
        "node3",
    ]
    progress = list((tmp_path / "logs").glob("*-broadcast.jsonl"))
    assert len(progress) == 1 and progress[0].read_text().count("\n") >= 1

    again = distribute(tmp_path, path, image_distribute_strategy="broadcast")
    assert again.status == "successful", failures(again)
    assert changed_tasks(again) == []
    # Every relay asked its engine first: nothing moved, nothing was loaded.
    rerun = host_results(again, "Collect each node's result")
    assert all(r["image_present"] and r["bytes_received"] == 0 for r in rerun.values()), rerun
    assert next(iter(host_results(again, "Show every node's progress").values()))["served_bytes"] == 0
    assert host_results(again, "Load the received tarball") == {}
    assert "already had it: node1, node2, node3, node4" in summary(again)


def test_a_dead_relay_is_routed_around_and_named(clean, tmp_path):
    path, manifest = clean["long"]
    killed = when_part_grows(2, manifest, 0.3, lambda: kill_relay(2, manifest))
    runner = distribute(tmp_path, path, image_distribute_strategy="broadcast")
    assert killed.is_set()
    assert runner.status == "failed"
    assert set(runner.stats["failures"]) == {"node2"}
    assert "node2: its relay went silent" in " ".join(failures(runner))
    for i in (1, 3, 4):
        assert manifest["image_id"] in node_images(i)
    assert manifest["image_id"] not in node_images(2)
    # node3 lost its upstream (node2) mid-file and resumed from node1 at the same byte.
    events = host_results(runner, "Collect each node's result")["node3"]["events"]
    assert events[0]["upstream"] == "node2" and events[1] == {
        **events[1],
        "upstream": "node1",
        "event": "switching upstream",
    }
    assert 0 < events[0]["offset"] < manifest["tarball_bytes"]
    assert "FAILED or unreachable: node2" in summary(runner)


def test_a_node_cut_off_mid_rollout_does_not_stop_the_others(clean, tmp_path):
    path, manifest = clean["long"]
    cut = when_part_grows(3, manifest, 0.3, lambda: sh("ip", "link", "set", "aicbedh3", "down"))
    try:
        runner = distribute(tmp_path, path, image_distribute_strategy="broadcast")
    finally:
        sh("ip", "link", "set", "aicbedh3", "up")
    assert cut.is_set()
    assert runner.status == "failed"
    assert set(runner.stats["failures"]) | set(runner.stats.get("dark", {})) == {"node3"}
    for i in (1, 2, 4):
        assert manifest["image_id"] in node_images(i)
    assert "FAILED or unreachable: node3" in summary(runner)
    events = host_results(runner, "Collect each node's result")["node4"]["events"]
    assert events[0]["upstream"] == "node3" and events[1]["upstream"] == "node2"


def test_a_corrupted_tarball_fails_that_node_only_and_its_old_container_keeps_running(clean, tmp_path):
    path, manifest = clean["new"]
    old_path, old = clean["old"]
    # node2 runs the old image, and sees a corrupted copy of the tarball where the others see the shared one.
    on_node(
        2, f"zstd -dcq /srv/aic-shared/{old['tarball']} | docker load -q && docker run -d --name aic-old {old['image']}"
    )
    on_node(2, f"mkdir -p /var/tmp/bad && cp /srv/aic-shared/{manifest['tarball']} /var/tmp/bad/")
    on_node(
        2,
        f"printf X | dd of=/var/tmp/bad/{manifest['tarball']} bs=1 seek=$(({manifest['tarball_bytes']} - 100)) conv=notrunc",
    )
    before = node_images(2)
    inventory = yaml.safe_load((BED / "inventory.yml").read_text())
    inventory["all"]["vars"]["image_distribute_shared_dir"] = "/srv/aic-shared"
    inventory["all"]["children"]["aic_nodes"]["hosts"]["node2"]["image_distribute_shared_dir"] = "/var/tmp/bad"
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump(inventory))
    runner = distribute(tmp_path, path, inventory=inv, image_distribute_strategy="shared_fs")
    assert runner.status == "failed"
    assert set(runner.stats["failures"]) == {"node2"}
    message = host_results(runner, "Stream it into the engine")["node2"]["msg"]
    assert "sha256 mismatch" in message and manifest["sha256"] in message and "not loaded" in message
    assert node_images(2) == before
    assert on_node(2, "docker inspect -f '{{.State.Running}} {{.Config.Image}}' aic-old").split() == [
        "true",
        old["image"],
    ]
    for i in (1, 3, 4):
        assert manifest["image_id"] in node_images(i)
    assert "FAILED or unreachable: node2" in summary(runner)


def test_a_tarball_that_does_not_match_its_manifest_is_never_loaded(clean, tmp_path):
    path, manifest = clean["new"]
    wrong = dict(manifest, sha256=hashlib.sha256(b"not the tarball").hexdigest())
    bad = BED / "shared" / "wrong.manifest.json"
    bad.write_text(json.dumps(wrong))
    try:
        runner = distribute(tmp_path, bad, image_distribute_strategy="broadcast")
    finally:
        bad.unlink()
    assert runner.status == "failed"
    assert set(runner.stats["failures"]) == {f"node{i}" for i in range(1, NODES + 1)}
    assert "sha256 mismatch" in failures(runner)[0]
    for i in range(1, NODES + 1):
        assert node_images(i) == set()
        assert not on_node(i, "ls /var/tmp/aic/images 2>/dev/null").strip()


@pytest.mark.parametrize("strategy", ["push", "copy", "shared_fs"])
def test_every_strategy_delivers_a_verified_image(clean, tmp_path, strategy):
    path, manifest = clean["new"]
    runner = distribute(
        tmp_path, path, image_distribute_strategy=strategy, image_distribute_shared_dir="/srv/aic-shared"
    )
    assert runner.status == "successful", failures(runner)
    for i in range(1, NODES + 1):
        assert manifest["image_id"] in node_images(i)
    if strategy == "push":
        watch = next(iter(host_results(runner, "Show every node's progress").values()))
        assert watch["served_bytes"] == NODES * manifest["tarball_bytes"]


def test_check_mode_moves_nothing(clean, tmp_path):
    path, manifest = clean["new"]
    runner = distribute(tmp_path, path, cmdline="--check")
    assert runner.status == "successful", failures(runner)
    loads = host_results(runner, "Load the received tarball")
    assert sorted(h for h, r in loads.items() if r.get("changed")) == [f"node{i}" for i in range(1, NODES + 1)]
    for i in range(1, NODES + 1):
        assert node_images(i) == set()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"image_distribute_manifest": "/nonexistent/x.manifest.json"}, "is not a file on the controller"),
        ({"image_distribute_strategy": "shared_fs"}, "strategy shared_fs needs image_distribute_shared_dir"),
        ({"image_distribute_strategy": "torrent"}, "image_distribute_strategy"),
        ({"image_distribute_shared_fs_concurrency": "many"}, "image_distribute_shared_fs_concurrency"),
    ],
)
def test_bad_input_fails_before_any_node_is_asked(bed, tmp_path, extra, message):
    # No node is asked anything: the bed as the previous test left it will do (no wipe).
    path, _manifest = bed["new"]
    args = {"image_distribute_manifest": str(path), **extra}
    runner = distribute(tmp_path, args.pop("image_distribute_manifest"), **args)
    assert runner.status == "failed"
    assert message in " ".join(failures(runner))
    assert host_results(runner, "Ask every node's engine") == {}
