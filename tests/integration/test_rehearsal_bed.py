"""The rehearsal cluster (scripts/rehearsal.sh): three test-bed nodes with real Slurm across them (munged + slurmctld
on the bridge, one slurmd per node namespace), a real authorization plugin refusing --pid=host on every node's Docker
engine, a non-root deploy user with sudo, root-owned slab parents and named fake AMD devices. Every check goes
through the real part: sinfo/scontrol/srun, ssh as the deploy user, the nodes' Docker engines, Ansible with become.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import subprocess

import pytest
import yaml

from .conftest import REPO

pytestmark = pytest.mark.integration

STATE = pathlib.Path(os.environ.get("AIC_REHEARSAL_DIR") or "/var/lib/aic-rehearsal")
REHEARSAL = REPO / "scripts" / "rehearsal.sh"
NODES = 3
GPUS = 2
IMAGE = "rehearsal-tiny:1"


def run(*cmd, env=None, check=True, timeout=60):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    up = run(str(REHEARSAL), "up", str(NODES), check=False, timeout=300)
    assert up.returncode == 0, up.stderr
    last = up.stdout.strip().splitlines()[-1]
    assert last.startswith("SLURM_CONF="), up.stdout
    conf = last.split("=", 1)[1]
    inventory = yaml.safe_load((STATE / "bed.yml").read_text())
    hosts = inventory["all"]["children"]["aic_nodes"]["hosts"]
    bed_vars = inventory["all"]["vars"]
    # A tiny image on every node's engine (sleep + test and their libraries), imported as the deploy user.
    root = tmp_path_factory.mktemp("rehearsal") / "rootfs"
    for path in ("/bin/sleep", "/usr/bin/test", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"):
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest)
    tarball = root.parent / "tiny.tar"
    run("tar", "-C", str(root), "-cf", str(tarball), ".")
    info = {"conf": conf, "env": {**os.environ, "SLURM_CONF": conf}, "hosts": hosts, "vars": bed_vars}
    for name in hosts:
        with open(tarball, "rb") as data:
            subprocess.run(
                ssh_argv(info, name, f"docker import - {IMAGE}"), stdin=data, capture_output=True, check=True
            )
    yield info
    run(str(REHEARSAL), "down", check=False, timeout=120)


def ssh_argv(bed, node, command):
    v = bed["vars"]
    return [
        "ssh", "-q", "-i", v["ansible_ssh_private_key_file"], "-o", "UserKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes",
        f"{v['ansible_user']}@{bed['hosts'][node]['ansible_host']}", command,
    ]  # fmt: skip


def as_deploy_user(bed, node, command, check=True):
    return run(*ssh_argv(bed, node, command), check=check)


@pytest.fixture(scope="module")
def job(bed):
    out = run(str(REHEARSAL), "alloc", str(NODES), str(GPUS), env=bed["env"], timeout=120).stdout.strip()
    assert out.isdigit(), out
    yield out
    run("scancel", out, env=bed["env"], check=False)


def test_inventory_names_the_deploy_user_and_every_node(bed):
    assert sorted(bed["hosts"]) == [f"node{i}" for i in range(1, NODES + 1)]
    assert bed["vars"]["ansible_user"] != "root"
    assert bed["vars"]["ansible_become_method"] == "sudo"
    assert bed["vars"]["aic_rehearsal_slurm_conf"] == bed["conf"]
    assert bed["vars"]["aic_rehearsal_gpus_per_node"] == GPUS


def test_sinfo_shows_every_node_idle_with_its_gpus(bed):
    lines = run("sinfo", "-h", "-N", "-o", "%N %T %G", env=bed["env"]).stdout.split("\n")
    nodes = {line.split()[0]: line.split()[1:] for line in lines if line.strip()}
    assert nodes == {f"node{i}": ["idle", f"gpu:{GPUS}"] for i in range(1, NODES + 1)}


def test_allocation_shows_each_nodes_gpu_indices(bed, job):
    out = run("scontrol", "show", "job", "-d", job, env=bed["env"]).stdout
    assert "JobState=RUNNING" in out
    assert f"Nodes=node[1-{NODES}] " in out
    assert f"GRES=gpu:{GPUS}(IDX:0-{GPUS - 1})" in out


def test_srun_runs_on_every_node_with_the_nodes_own_engine(bed, job):
    out = run(
        "srun", f"--jobid={job}", f"-N{NODES}", "sh", "-c", 'echo "$SLURMD_NODENAME $(docker info -f {{.Name}})"',
        env=bed["env"],
    ).stdout  # fmt: skip
    # Each task runs on its node, next to that node's Docker engine (dockerd names itself after the node).
    assert sorted(out.split("\n")[:-1]) == [f"node{i} node{i}" for i in range(1, NODES + 1)]


def test_the_slurm_inventory_plugin_reads_the_allocation(bed, job, tmp_path):
    source = tmp_path / "rehearsal-slurm.yml"
    source.write_text(yaml.safe_dump({"plugin": "aic.stack.slurm", "job_id": job, "slurm_conf": bed["conf"]}))
    env = {**bed["env"], "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    out = run(
        str(REPO / ".venv" / "bin" / "ansible-inventory"), "-i", str(STATE / "bed.yml"), "-i", str(source),
        "--host", "node2", env=env,
    ).stdout  # fmt: skip
    host = yaml.safe_load(out)
    assert host["slurm_job_id"] == job
    assert host["slurm_job_gpus"] == GPUS
    # node2's own indices, from scontrol show job -d (the plugin gives them as strings)
    assert [str(g) for g in host["slurm_job_gpu_ids"]] == [str(g) for g in range(GPUS)]
    assert host["ansible_host"] == bed["hosts"]["node2"]["ansible_host"]


def test_pid_host_is_denied_by_every_nodes_plugin(bed):
    for node in bed["hosts"]:
        denied = as_deploy_user(bed, node, f"docker create --pid=host {IMAGE} /bin/sleep 1", check=False)
        assert denied.returncode != 0
        assert "authorization denied by plugin aic-pidhost" in denied.stderr
        created = as_deploy_user(bed, node, f"docker create {IMAGE} /bin/sleep 1").stdout.strip()
        as_deploy_user(bed, node, f"docker rm {created}")


def test_slab_parent_needs_sudo(bed):
    for node, host in bed["hosts"].items():
        parent = pathlib.Path(host["aic_rehearsal_slab_parent"])
        st = parent.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o755)
        plain = as_deploy_user(bed, node, f"touch {parent}/probe", check=False)
        assert plain.returncode != 0 and "Permission denied" in plain.stderr
        as_deploy_user(bed, node, f"sudo -n install -d -m 0750 {parent}/aic-sudo")
        assert (parent / "aic-sudo").is_dir()


def test_ansible_connects_as_the_deploy_user_and_becomes_root(bed):
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    ansible = str(REPO / ".venv" / "bin" / "ansible")
    inventory = str(STATE / "bed.yml")
    plain = run(ansible, "-i", inventory, "aic_nodes", "-o", "-m", "command", "-a", "id -un", env=env).stdout
    assert plain.count(f"(stdout) {bed['vars']['ansible_user']}") == NODES, plain
    become = run(
        ansible, "-i", inventory, "aic_nodes", "-o", "-b", "-m", "file",
        "-a", "path={{ aic_rehearsal_slab_parent }}/aic state=directory mode=0755", env=env,
    ).stdout  # fmt: skip
    assert become.count("CHANGED") == NODES, become
    for host in bed["hosts"].values():
        assert (pathlib.Path(host["aic_rehearsal_slab_parent"]) / "aic").stat().st_uid == 0


def test_fake_amd_devices_can_be_given_to_a_container(bed):
    for node, host in bed["hosts"].items():
        # The bed path of each stand-in and where a container expects it.
        devices = {host["aic_rehearsal_kfd"]: "/dev/kfd"}
        devices.update({p: f"/dev/dri/{pathlib.Path(p).name}" for p in host["aic_rehearsal_render_devices"]})
        assert len(devices) == 1 + GPUS
        for path in devices:
            st = os.stat(path)
            assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3), path
        flags = " ".join(f"--device {src}:{dst}" for src, dst in devices.items())
        checks = " -a ".join(f"-c {dst}" for dst in devices.values())
        as_deploy_user(bed, node, f"docker run --rm {flags} {IMAGE} /usr/bin/test {checks}")


def test_a_warm_bed_keeps_the_stand_in_images_and_nothing_else(bed):
    """Last (it recreates the bed): `down` + `up` keep each node's stand-in images, drop every other image and every
    container, like a cluster's nodes between two jobs. The stand-in here is the tiny image under the name of the
    locally built node-exporter (what rehearsal.sh keeps); the name, not the content, decides."""
    kept = run("docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "aic-node-exporter").stdout.split()
    if not kept:
        pytest.skip("no locally built aic-node-exporter image (make deploy builds it)")
    standin = kept[0]
    as_deploy_user(
        bed, "node1", f"docker tag {IMAGE} {standin} && docker create --name warm-probe {IMAGE} /bin/sleep 1"
    )
    try:
        run(str(REHEARSAL), "down", timeout=120)
        run(str(REHEARSAL), "up", str(NODES), timeout=300)
        images = as_deploy_user(bed, "node1", "docker image ls --format '{{.Repository}}:{{.Tag}}'").stdout.split()
        assert standin in images and IMAGE not in images, images
        assert as_deploy_user(bed, "node1", "docker ps -aq").stdout.strip() == ""
        for node in ("node2", "node3"):  # the tiny image was not a stand-in there either
            images = as_deploy_user(bed, node, "docker image ls --format '{{.Repository}}:{{.Tag}}'").stdout.split()
            assert IMAGE not in images, (node, images)
    finally:
        as_deploy_user(bed, "node1", f"docker rmi {standin}", check=False)
