"""The SPUR rollout, rehearsed: `deploy.yml -i inventories/spur -i inventories/rehearsal -i <bed>` on a 3-node cluster.

Real parts: Slurm across the bed (the job's nodes and each node's GPU ids come from the allocation, through
inventories/spur/aic-slurm.yml), a Docker engine per node behind an authorization plugin that refuses --pid=host,
root-owned slab parents that need the sudo fallback, a non-root deploy user, vLLM (CPU) + LMCache with its NIXL
POSIX L2 on every node, one Prometheus for the job. Stand-ins (inventories/rehearsal): the cpu stack image for the
rocm one, the tiny model, fake GPU device nodes, scaled pools.

The module is one scenario, in order: first rollout -> KV hits after a vLLM restart on every node -> a rerun that
changes nothing -> a bad image stopped at the canary (deployed with fewer devices, which the rollback keeps) -> a
good image rolled out under load, canary first, in-flight requests drained, the default devices back -> node2's Docker
engine crashes under load (marked down, named by the next deploy, back when the engine is) -> the cliff benchmark as
a job on node3 -> a rollout during which node2's sshd and node3's slurmd die.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import ansible_runner
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from .conftest import REPO, failures, run_playbook

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("slurmd") or not shutil.which("dockerd"),
        reason="needs root, Slurm (slurm-wlm) and dockerd",
    ),
]

REHEARSAL = REPO / "scripts" / "rehearsal.sh"
STATE = pathlib.Path(os.environ.get("AIC_REHEARSAL_DIR") or "/var/lib/aic-rehearsal")
BED = STATE / "bed"
NODES = ["node1", "node2", "node3"]
PREFIX = "10.78.0"
IP = {f"node{i}": f"{PREFIX}.{10 + i}" for i in range(1, 4)}
MODEL = "tiny-llama"
SUMMARY_TASK = "Summary of the rollout (every node of the job)"
POINTER = REPO / ".work" / "artifacts" / "aic-stack-cpu.current.json"


def sh(*argv, timeout=300, check=True, env=None):
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv} failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def on_node(node, command, check=True, timeout=120):
    """Run ``command`` on ``node`` as the deploy user, over ssh (its own Docker engine, its own /var/tmp)."""
    return sh(
        "ssh", "-q", "-i", BED / "ssh" / "id_ed25519", "-o", "UserKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
        f"aicop@{IP[node]}", command, check=check, timeout=timeout,
    )  # fmt: skip


def inspect(node, container, template):
    return on_node(node, f"docker inspect -f '{template}' {container}").stdout.strip()


def started(nodes=tuple(NODES)):
    return {n: inspect(n, "aic-lmcache", "{{.State.StartedAt}}") + "/" + inspect(n, "aic-vllm", "{{.State.StartedAt}}")
            for n in nodes}  # fmt: skip


def metric(text, name):
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples if s.name == name)


def complete(node, prompt="The capital of France is", max_tokens=8, timeout=60):
    response = requests.post(
        f"http://{IP[node]}:8000/v1/completions",
        json={"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
        timeout=timeout,
    )
    return response


def wait_healthy(node, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://{IP[node]}:8000/health", timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(2)
    raise AssertionError(f"vLLM of {node} not healthy within {timeout} s")


# The job's router (inventories/spur: aic_router_enabled) runs on the first node of the job.
ROUTER = f"http://{IP['node1']}:30000"


def worker_node(url):
    """The node of a router worker URL: the other nodes' instances at their address, the router's own by name."""
    host = url.split("://", 1)[1].rsplit(":", 1)[0]
    return next((n for n, ip in IP.items() if ip == host), "node1" if host == "aic-vllm" else url)


def routed_nodes():
    """The nodes whose vLLM instances the router routes to (its /list_workers)."""
    return {worker_node(u) for u in requests.get(f"{ROUTER}/list_workers", timeout=5).json()["urls"]}


class Cluster:
    def __init__(self, job):
        self.job = job
        self.env = {
            "SLURM_CONF": str(STATE / "slurm" / "etc" / "slurm.conf"),
            "SLURM_JOB_ID": job,
            # The stand-in for SPUR's GetJob call that inventories/spur/aic-slurm.yml runs for each node's GPU ids.
            "AIC_SLURM_GPU_IDS_COMMAND": f"{REHEARSAL} gpu-ids {{job_id}}",
        }

    def deploy(self, tmp_path, playbook="deploy.yml", event_handler=None, **extravars):
        """The operator's command: ansible-playbook deploy.yml -i inventories/spur -i inventories/rehearsal -i bed.
        ``event_handler`` sees each event as it comes (ansible-runner's)."""
        private = tmp_path / f"runner-{time.monotonic_ns()}"
        private.mkdir(parents=True)
        env = {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            "PATH": os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]),
            **self.env,
        }
        inventories = ["inventories/spur", "inventories/rehearsal", str(STATE / "bed.yml")]
        return ansible_runner.run(
            private_data_dir=str(private),
            project_dir=str(REPO),
            playbook=str(REPO / playbook),
            cmdline=" ".join(f"-i {i}" for i in inventories),
            extravars=extravars,
            envvars=env,
            event_handler=event_handler,
            quiet=True,
        )


def summary(runner):
    """The last per-node summary the rollout printed."""
    lines = None
    for event in runner.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == SUMMARY_TASK:
            lines = data["res"]["msg"]
    assert lines is not None, f"no rollout summary; failures: {failures(runner)}"
    return {line.split(":", 1)[0]: line for line in lines}


def debug_messages(runner):
    out = []
    for event in runner.events:
        res = event.get("event_data", {}).get("res", {})
        if event.get("event") == "runner_on_ok" and isinstance(res.get("msg"), str):
            out.append(res["msg"])
    return out


def changed_per_host(runner):
    return {host: n for host, n in runner.stats.get("changed", {}).items() if n}


def build_on_nodes(tag, lines):
    """Build image ``tag`` FROM the stand-in release on every node's own engine (a new image id per tag)."""
    base = json.loads(POINTER.read_text())["image"]
    dockerfile = "\\n".join([f"FROM {base}", *lines])
    threads = [
        threading.Thread(target=on_node, args=(n, f"printf '{dockerfile}\\n' | docker build -q -t {tag} -"))
        for n in NODES
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n in NODES:
        assert on_node(n, f"docker image inspect -f '{{{{.Id}}}}' {tag}").stdout.startswith("sha256:")


@pytest.fixture(scope="module")
def cluster():
    # The stand-ins come from the local build: its cpu stack image artifact and the locally built monitoring images.
    ready = POINTER.exists() and all(
        sh("docker", "image", "ls", "-q", repo).stdout.strip() for repo in ("aic-prometheus", "aic-node-exporter")
    )
    if not ready:
        runner = run_playbook("deploy.yml", pathlib.Path("/tmp") / "aic-rehearsal-local")
        assert runner.status == "successful", failures(runner)
    sh(REHEARSAL, "up", "3", timeout=300)
    # One GPU per node: a vLLM instance per GPU, three in all (what this machine's memory and cores allow).
    job = sh(REHEARSAL, "alloc", "3", "1").stdout.strip().splitlines()[-1]
    yield Cluster(job)
    sh("scancel", job, check=False, env={**os.environ, "SLURM_CONF": str(STATE / "slurm" / "etc" / "slurm.conf")})
    sh(REHEARSAL, "down", timeout=300, check=False)


@pytest.fixture(scope="module")
def first_rollout(cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rehearsal")
    runner = cluster.deploy(tmp, aic_rollout_batch_size="100%")
    return runner, tmp


def test_first_rollout_brings_every_node_to_healthy(first_rollout):
    runner, _dummy = first_rollout
    assert runner.status == "successful", failures(runner)
    lines = summary(runner)
    assert sorted(lines) == NODES
    for node in NODES:
        assert lines[node].startswith(f"{node}: healthy"), lines[node]
        response = complete(node)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["text"]
    # One endpoint for the job: the router on node1 routes to every node's vLLM, and the rollout printed it.
    assert routed_nodes() == set(NODES)
    response = requests.post(f"{ROUTER}/v1/completions", json={"model": MODEL, "prompt": "Hello", "max_tokens": 4},
                             timeout=60)  # fmt: skip
    assert response.status_code == 200 and response.json()["choices"][0]["text"], response.text
    assert f"The job's endpoint: {ROUTER}/v1 (vllm-router on node1" in " ".join(debug_messages(runner))


def test_each_node_skips_node_exporter_because_its_engine_refused_host_pid(first_rollout):
    runner, _dummy = first_rollout
    messages = debug_messages(runner)
    for node in NODES:
        assert any(m.startswith(f"{node}: skipping node_exporter") and "--pid=host" in m for m in messages), messages


def test_one_prometheus_sees_every_target_of_every_node(first_rollout):
    # The job's Prometheus runs on the first node of the job (aic_monitoring_host default) and scrapes the others.
    targets = requests.get(f"http://{IP['node1']}:9090/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
    seen = {}
    for target in targets:
        seen.setdefault(target["labels"].get("job"), {})[target["labels"].get("node")] = target["health"]
    for job in ("vllm", "lmcache"):
        assert seen.get(job) == dict.fromkeys(NODES, "up"), seen
    vllm_gpus = {t["labels"]["node"]: t["labels"].get("gpu") for t in targets if t["labels"].get("job") == "vllm"}
    assert vllm_gpus == dict.fromkeys(NODES, "0"), vllm_gpus
    # The other nodes run no Prometheus of their own; the job's never restarted while exporters were refused.
    for node in ("node2", "node3"):
        assert on_node(node, "docker ps -q -f name=^aic-prometheus$").stdout.strip() == ""
    assert inspect("node1", "aic-prometheus", "{{.RestartCount}}") == "0"
    # And the job's router, on node1 (up once its first scrape after the router started came in).
    deadline = time.monotonic() + 60
    while targets_by_node().get(("router", "node1")) != "up":
        assert time.monotonic() < deadline, targets_by_node()
        time.sleep(2)


def test_second_rollout_changes_nothing_and_restarts_nothing(cluster, first_rollout):
    _dummy, tmp = first_rollout
    before = started()
    runner = cluster.deploy(tmp, aic_rollout_batch_size="100%")
    assert runner.status == "successful", failures(runner)
    assert changed_per_host(runner) == {}, [
        (e["event_data"].get("host"), e["event_data"].get("task"))
        for e in runner.events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("res", {}).get("changed")
    ]
    assert started() == before
    # deploy.yml's no-op fast path on every node (each one's record matches): the health checks ran, nothing else.
    assert all(line.startswith(f"{n}: healthy, unchanged (nothing to do") for n, line in summary(runner).items()), (
        summary(runner)
    )


def test_kv_stored_on_each_node_is_an_external_hit_after_its_vllm_restarts(first_rollout):
    rng = random.Random(time.time_ns())
    words = ["alpha", "bravo", "zulu", "kilo", "x9", "q7", "fox", "dog", "KV", "cache"]
    prompts = {n: " ".join(rng.choice(words) for _dummy in range(64)) for n in NODES}
    for node in NODES:
        first = complete(node, prompts[node], max_tokens=1)
        assert first.status_code == 200 and first.json()["usage"]["prompt_tokens"] >= 128, first.text
    lmcache_before = {n: inspect(n, "aic-lmcache", "{{.State.StartedAt}}") for n in NODES}
    # Restart only vLLM, on every node at once (they start slowly on two cores).
    for node in NODES:
        on_node(node, "docker restart -t 40 aic-vllm")
    for node in NODES:
        wait_healthy(node)
    for node in NODES:
        assert inspect(node, "aic-lmcache", "{{.State.StartedAt}}") == lmcache_before[node]
        before = metric(
            requests.get(f"http://{IP[node]}:8000/metrics", timeout=10).text, "vllm:external_prefix_cache_hits_total"
        )
        second = complete(node, prompts[node], max_tokens=1)
        assert second.status_code == 200, second.text
        after = metric(
            requests.get(f"http://{IP[node]}:8000/metrics", timeout=10).text, "vllm:external_prefix_cache_hits_total"
        )
        assert after > before, f"{node}: no external prefix-cache hit after restarting vLLM ({before} -> {after})"


def test_a_bad_image_stops_at_the_canary_which_rolls_back_and_serves(cluster, first_rollout):
    _dummy, tmp = first_rollout
    good = json.loads(POINTER.read_text())["image"]
    # vLLM cannot start from this image (its API server module is gone); LMCache can.
    build_on_nodes("aic-stack-cpu:rehearsal-broken", [
        "RUN rm /opt/aic/venv/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py",
    ])  # fmt: skip
    others = started(["node2", "node3"])
    # No short health timeout: the health role watches the container, so the canary fails as soon as vLLM exits; the
    # rollback's own vLLM then has the default time to start (the cores are shared with the other test lane in CI).
    # The run also takes /dev/dri away (a device setting to revert: the next rollout deploys the default again).
    runner = cluster.deploy(
        tmp, aic_stack_image="aic-stack-cpu:rehearsal-broken", aic_rollout_batch_size="100%",
        aic_rocm_devices=[KFD],
    )  # fmt: skip
    assert runner.status == "failed"
    messages = " ".join(failures(runner))
    assert "Rollout of aic-stack-cpu:rehearsal-broken failed on node1" in messages, messages
    assert "vLLM" in messages and f"Rolled back to {good}" in messages, messages
    lines = summary(runner)
    assert lines["node1"].startswith("node1: FAILED on aic-stack-cpu:rehearsal-broken"), lines
    assert f"rolled back to {good}, healthy" in lines["node1"]
    assert lines["node2"] == "node2: not reached (untouched)" and lines["node3"] == "node3: not reached (untouched)"
    # The canary serves its last healthy image again; the others were never touched.
    assert inspect("node1", "aic-vllm", "{{.Config.Image}}") == good
    assert complete("node1").status_code == 200
    assert started(["node2", "node3"]) == others
    # The rollback restores the image with the run's settings: the canary's containers have the one device asked for.
    assert devices("node1") == {"aic-lmcache": {"/dev/kfd"}, "aic-vllm": {"/dev/kfd"}}
    assert devices("node2") == DEFAULT_DEVICES


# The rehearsal inventory's device that stands in for the GPU compute node (its /dev/dri is the other default one).
KFD = "{{ aic_rehearsal_kfd }}:/dev/kfd"
DEFAULT_DEVICES = {"aic-lmcache": {"/dev/kfd", "/dev/dri"}, "aic-vllm": {"/dev/kfd", "/dev/dri"}}


def devices(node):
    """The devices of node's LMCache and vLLM containers, by their path in the container."""
    return {
        name: {d["PathInContainer"] for d in json.loads(inspect(node, name, "{{json .HostConfig.Devices}}")) or []}
        for name in ("aic-lmcache", "aic-vllm")
    }


TURN_STARTS = "Note where this node starts"
TURN_HEALTHY = "Note that this node is healthy"
LONG_STREAMS = 3
LONG_TOKENS = (128, 96, 176)  # within the stand-in's max_model_len 256, with the prompt
KILL_EVENT_SLACK = 2.0
ROUTER_CLIENTS = 2
# Seconds each router client waits between two requests: a steady trickle through the router all through a rollout
# (each node's removal and return takes tens of seconds, so a request that the router sent to a node being replaced
# would fail within them), not back-to-back load: the three vLLMs share two cores with the rollout itself.
ROUTER_PAUSE = 1.0


class Clients:
    """Client threads run while the block runs (``self.threads``), told to end by ``self.stop``."""

    threads = ()

    def __init__(self):
        self.stop = threading.Event()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=150)


class Load(Clients):
    """Requests sent to every node all through a rollout: a short one per node every second (cheap: the two cores are
    shared by three vLLMs, the one starting and, in CI, the other test lane), and, from the start of a node's turn to
    its health, long ones back to back to that node (LONG_STREAMS at once), so that some are in flight when its vLLM
    is told to stop. A long stream whose request failed (its vLLM refuses new ones: it was told to stop) sends no more
    until the turn ends: its new vLLM starts and passes health without them."""

    def __init__(self, nodes=tuple(NODES)):
        super().__init__()
        self.results = []  # (node, kind, start, end, outcome)
        self.turn = {n: threading.Event() for n in NODES}
        self.healthy_at = {}
        self.turn_at = {}
        self.threads = [threading.Thread(target=self.steady, args=(n,), daemon=True) for n in nodes]
        # Several long streams per node: when its vLLM gets SIGTERM, some long request sent well before is in flight.
        # Each stream asks for a different length: streams of one length end together and start again together, and a
        # SIGTERM landing just after such a restart would find nothing sent before it still in flight.
        self.threads += [
            threading.Thread(target=self.long, args=(n, LONG_TOKENS[i % len(LONG_TOKENS)]), daemon=True)
            for n in nodes for i in range(LONG_STREAMS)
        ]  # fmt: skip

    def one(self, node, kind, max_tokens):
        start = time.time()
        try:
            response = complete(node, f"{kind} request to {node} at {start}:", max_tokens=max_tokens, timeout=120)
            outcome = "ok" if response.status_code == 200 else f"http {response.status_code}"
        except requests.RequestException as exc:
            outcome = type(exc).__name__
        self.results.append((node, kind, start, time.time(), outcome))
        return outcome

    def steady(self, node):
        while not self.stop.is_set():
            self.one(node, "steady", 4)
            self.stop.wait(1)

    def long(self, node, max_tokens):
        while not self.stop.is_set():
            if not self.turn[node].wait(0.5):
                continue
            if self.one(node, "long", max_tokens) != "ok":
                while self.turn[node].is_set() and not self.stop.wait(0.5):
                    pass

    def on_event(self, event):
        """ansible-runner's event handler: a node's turn starts, or it passed health."""
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("host") in self.turn:
            if data.get("task") == TURN_STARTS:
                self.turn_at[data["host"]] = time.time()
                self.turn[data["host"]].set()
            elif data.get("task") == TURN_HEALTHY:
                self.turn[data["host"]].clear()
                self.healthy_at[data["host"]] = time.time()
        return True


TURN_BACK = "Put this node's vLLM instances back into the job's router (it passed health)"


class RouterLoad(Clients):
    """Requests through the job's router all through a rollout (ROUTER_CLIENTS back to back, of different lengths),
    and what it routes to: its worker list every half second, and at the start of each turn (a batch boundary for the
    first node of a batch: its removal is the turn's first task after that)."""

    def __init__(self):
        super().__init__()
        self.results = []  # (client, start, end, outcome)
        self.polls = []  # (time, nodes listed, or None when the router did not answer)
        self.at_turn = {}  # node -> (time, nodes listed) when its turn started
        self.back_at = {}
        self.threads = [threading.Thread(target=self.client, args=(i,), daemon=True) for i in range(ROUTER_CLIENTS)]
        self.threads.append(threading.Thread(target=self.poll, daemon=True))

    def client(self, i):
        while not self.stop.is_set():
            start = time.time()
            try:
                response = requests.post(
                    f"{ROUTER}/v1/completions",
                    json={"model": MODEL, "prompt": f"router client {i} at {start}:", "max_tokens": 8 + 24 * i},
                    timeout=120,
                )
                outcome = "ok" if response.status_code == 200 else f"http {response.status_code}: {response.text[:80]}"
            except requests.RequestException as exc:
                outcome = type(exc).__name__
            self.results.append((i, start, time.time(), outcome))
            self.stop.wait(ROUTER_PAUSE)

    def listed(self):
        try:
            return routed_nodes()
        except (requests.RequestException, ValueError, KeyError):
            return None

    def poll(self):
        while not self.stop.is_set():
            self.polls.append((time.time(), self.listed()))
            self.stop.wait(0.5)

    def on_event(self, event):
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("host") in NODES:
            if data.get("task") == TURN_STARTS:
                self.at_turn[data["host"]] = (time.time(), self.listed())
            elif data.get("task") == TURN_BACK:
                self.back_at[data["host"]] = time.time()
        return True


def brief(results, t0, most=6):
    """Load results, short enough for the tail of a CI log: kind, start-end in seconds after t0, outcome."""
    return "; ".join(f"{r[1]} +{r[2] - t0:.2f}..+{r[3] - t0:.2f}s {r[4]}" for r in results[:most]) + (
        f" (+{len(results) - most} more)" if len(results) > most else ""
    )


class VllmEvents:
    """Times of the kill and start events of every node's aic-vllm while the block runs, as Docker reports them.

    Recorded as they happen (``docker events`` streaming from each node's engine), not asked for afterwards: an engine
    keeps only its last 256 events, and the healthchecks' exec events (one probe every 3 s per container) push a
    canary's kill out of that record long before a three-node rollout ends. (A stream left behind ends by itself.)"""

    def __init__(self, nodes=tuple(NODES)):
        self.nodes = nodes
        self.procs = {}
        self.kill = {n: [] for n in nodes}
        self.start = {n: [] for n in nodes}

    def __enter__(self):
        for node in self.nodes:
            self.procs[node] = subprocess.Popen(
                ["ssh", "-q", "-i", str(BED / "ssh" / "id_ed25519"), "-o", "UserKnownHostsFile=/dev/null",
                 "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", f"aicop@{IP[node]}",
                 "exec timeout 1800 docker events --filter container=aic-vllm --filter event=kill --filter event=start "
                 "--format '{{.TimeNano}} {{.Action}}'"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip
        time.sleep(2)  # every stream is subscribed before the block acts
        for node, proc in self.procs.items():
            assert proc.poll() is None, f"{node}: docker events ended at once (rc {proc.returncode})"
        return self

    def __exit__(self, *exc):
        time.sleep(2)  # the last events reach the streams
        for node, proc in self.procs.items():
            proc.terminate()
            out, _dummy = proc.communicate(timeout=30)
            for line in out.splitlines():
                nano, _dummy, action = line.partition(" ")
                (self.kill if action.startswith("kill") else self.start)[node].append(int(nano) / 1e9)
        return False


def test_a_good_image_rolls_out_canary_first_under_load(cluster, first_rollout):
    """A new image, requests sent to every node all the time: the canary first, then the others; requests fail only
    on the node being replaced, from the moment its vLLM is told to stop, and the ones in flight then complete."""
    _dummy, tmp = first_rollout
    build_on_nodes("aic-stack-cpu:rehearsal-next", ["LABEL ai.aic.rehearsal=next"])
    with Load() as load, RouterLoad() as routed:
        with VllmEvents() as events:
            time.sleep(1)  # every node answers before the rollout starts
            t0 = time.time()
            runner = cluster.deploy(
                tmp, aic_stack_image="aic-stack-cpu:rehearsal-next", aic_rollout_batch_size="100%",
                event_handler=lambda event: load.on_event(event) and routed.on_event(event),
            )  # fmt: skip
            t1 = time.time()
        time.sleep(1)
        after = routed.listed()
    assert runner.status == "successful", failures(runner)
    lines = summary(runner)
    for node in NODES:
        assert lines[node].startswith(f"{node}: healthy") and lines[node].endswith("-> aic-stack-cpu:rehearsal-next")
        assert inspect(node, "aic-vllm", "{{.Config.Image}}") == "aic-stack-cpu:rehearsal-next"
        # The devices the bad image's run took away from the canary are back (the next deploy reruns with no change).
        assert devices(node) == DEFAULT_DEVICES, node
    # Each node's LMCache was replaced (a new image) and its old server ended on SIGTERM, within its stop timeout
    # (30 s, then the engine's SIGKILL): with usage statistics on, its shutdown flushed three usage threads, each
    # blocking on the unreachable server (these nodes have no route out) for 10 s, and every replacement took 31 s.
    replaced = {
        e["event_data"]["host"]: e["event_data"]["duration"]
        for e in runner.events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Run the LMCache server"
        and e["event_data"]["res"].get("changed")
    }  # fmt: skip
    assert set(replaced) == set(NODES) and all(d < 20 for d in replaced.values()), replaced

    stopped = {n: [t for t in events.kill[n] if t0 <= t <= t1 + 1] for n in NODES}
    back = {n: [t for t in events.start[n] if t0 <= t <= t1 + 1] for n in NODES}
    assert all(stopped[n] and back[n] for n in NODES), (stopped, back)
    # The canary first: node1's new vLLM started before the others' were stopped.
    assert back["node1"][-1] < min(stopped["node2"][0], stopped["node3"][0]), (stopped, back)
    results = load.results
    record = {"t0": t0, "t1": t1, "stopped": stopped, "back": back, "turn_at": load.turn_at, "healthy_at": load.healthy_at,
              "results": results}  # fmt: skip
    (tmp / "load.json").write_text(json.dumps(record, indent=1))
    assert {r[0] for r in results if r[1] == "steady" and r[4] == "ok" and t0 <= r[2] <= t1} == set(NODES)
    assert sorted(load.healthy_at) == NODES, load.healthy_at
    for node in NODES:
        # Before its vLLM was told to stop, and once its new one passed health (the turn's end), nothing failed.
        failed = [r for r in results if r[0] == node and r[4] != "ok"]
        # Docker records the kill event after containerd delivered the signal: on a starved machine, requests sent a
        # moment before the recorded time already met a vLLM that refuses new ones.
        window = (stopped[node][0] - KILL_EVENT_SLACK, load.healthy_at[node])
        outside = [r for r in failed if not window[0] <= r[2] <= window[1]]
        turn = load.turn_at.get(node, t0)
        where = f"{node}: turn +{turn - t0:.1f}s, kill +{stopped[node][0] - t0:.1f}s, healthy +{window[1] - t0:.1f}s"
        assert not outside, f"{where}; failed outside: " + brief(outside, t0)
        # The drain: every request in flight when vLLM got SIGTERM completed (and there were some). Everything sent
        # before the slack was in flight for sure: none of it was cut.
        in_flight = [r for r in results if r[0] == node and r[2] < stopped[node][0] < r[3]]
        cut = [r for r in in_flight if r[4] != "ok" and r[2] < window[0]]
        assert not cut, f"{where}; in-flight requests failed: " + brief(cut, t0)
        around = sorted((r for r in results if r[0] == node and abs(r[2] - stopped[node][0]) < 30), key=lambda r: r[2])
        assert [r for r in in_flight if r[4] == "ok"], (
            f"{where}: no request in flight when its vLLM was stopped completed; in flight: {brief(in_flight, t0)}; "
            f"sent from 30 s before to 30 s after: {brief(around, t0, most=40)}"
        )
    # After the rollout every node serves again.
    late = [r for r in results if r[2] > t1 and r[4] != "ok"]
    assert not late, "after the rollout: " + brief(late, t0)

    # Through the job's router nothing failed: each node's instances were taken out before its vLLM was stopped (the
    # drain bounded by aic_router_drain_timeout_s) and put back once it passed health; the others took the requests.
    sent = [r for r in routed.results if t0 <= r[1] <= t1]
    assert len(sent) >= 10 and not [r for r in routed.results if r[3] != "ok"], [
        (r[0], f"+{r[1] - t0:.1f}..+{r[2] - t0:.1f}s", r[3]) for r in routed.results if r[3] != "ok"
    ][:10]
    # Its worker list at every batch boundary (the start of a batch's first turn, and the end): every node's instances.
    first_of_batch = [("node1",), ("node2", "node3")]
    for batch in first_of_batch:
        when, listed = min(routed.at_turn[n] for n in batch)
        assert listed == set(NODES), (batch, f"+{when - t0:.1f}s", listed)
    assert after == set(NODES), after
    # And never a node whose vLLM was down (from its kill until its new vLLM started).
    for node in NODES:
        down = [(t, listed) for t, listed in routed.polls if stopped[node][0] <= t <= back[node][-1]]
        assert down and all(listed is not None and node not in listed for _t, listed in down), (
            node, [(f"+{t - t0:.1f}s", listed) for t, listed in down][:10]
        )  # fmt: skip
        assert routed.back_at[node] > back[node][-1], node


def comm(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def engine_pids(node):
    """node's Docker engine and everything it runs: dockerd, containerd, the shims (in the node's network namespace)
    and every process under them (the containers, in namespaces of their own). Not its sshd, slurmd or plugins."""
    roots = {p for p in sh("ip", "netns", "pids", f"aicreh-{node[-1]}").stdout.split()
             if comm(p) in ("dockerd", "containerd") or comm(p).startswith("containerd-shim")}  # fmt: skip
    parent = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            parent[stat.parent.name] = stat.read_text().rsplit(")", 1)[1].split()[1]
    found, grew = set(roots), True
    while grew:
        more = {p for p, pp in parent.items() if pp in found} - found
        found |= more
        grew = bool(more)
    return sorted(found, key=int)


def node_pids(node, comm):
    return [p for p in sh("ip", "netns", "pids", f"aicreh-{node[-1]}").stdout.split()
            if pathlib.Path(f"/proc/{p}/comm").read_text().strip() == comm]  # fmt: skip


def start_on_node(node, via, argv, what, ready, timeout):
    """Start a node daemon again as the bed's node init starts it (what the node's service manager does after a
    crash): ``argv`` detached, in the node's network, mount and UTS namespaces (those of its process ``via``), its
    output appended to the node's ``<what>.log``; wait until the shell command ``ready`` succeeds on the node."""
    (pid,) = node_pids(node, via)
    log = open(BED / "nodes" / node / f"{what}.log", "ab")  # noqa: SIM115 - handed to the detached daemon
    subprocess.Popen(
        ["nsenter", "-t", pid, "-n", "-m", "-u", "--", *argv],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    while on_node(node, ready, check=False, timeout=10).returncode != 0:
        assert time.monotonic() < deadline, f"{node}: {what} did not come back within {timeout} s"
        time.sleep(1)


def revive_dockerd(node):
    """Start node's Docker engine again; its containers come back through their restart policies."""
    argv = ["dockerd", "--config-file", str(BED / "daemon.json"), "--pidfile", "/run/docker.pid",
            "--authorization-plugin=aic-pidhost"]  # fmt: skip
    start_on_node(node, "slurmd", argv, "dockerd", "docker info -f '{{.ServerVersion}}'", timeout=60)


def targets_by_node(node="node1"):
    """The job's Prometheus: each scrape target's health, by (job, node)."""
    targets = requests.get(f"http://{IP[node]}:9090/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
    return {(t["labels"].get("job"), t["labels"].get("node")): t["health"] for t in targets}


def wait_targets(nodes, health, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        seen = targets_by_node()
        want = {(job, n): health for job in ("vllm", "lmcache") for n in nodes}
        if all(seen.get(k) == v for k, v in want.items()):
            return time.monotonic()
        assert time.monotonic() < deadline, f"targets of {nodes} not {health} within {timeout} s: {seen}"
        time.sleep(1)


def docker_time(text):
    """Seconds since the epoch of a Docker timestamp (RFC 3339, UTC, up to nanoseconds)."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z", text)
    assert match, text
    whole = datetime.datetime.fromisoformat(match.group(1)).replace(tzinfo=datetime.UTC).timestamp()
    return whole + float("0." + (match.group(2) or "0"))


def wait_alerts(name, want, timeout=30):
    """Wait until the job's Prometheus has alert ``name`` (pending or firing) for every (job, node) of ``want``."""
    deadline = time.monotonic() + timeout
    while True:
        alerts = requests.get(f"http://{IP['node1']}:9090/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        seen = {(a["labels"].get("job"), a["labels"].get("node")) for a in alerts if a["labels"]["alertname"] == name}
        if seen >= want:
            return
        assert time.monotonic() < deadline, f"{name} not pending for {want} within {timeout} s: {alerts}"
        time.sleep(1)


def test_a_node_whose_docker_engine_dies_under_load_is_marked_down_named_by_the_next_deploy_and_comes_back(
    cluster, first_rollout
):
    """node2's Docker engine crashes with its containers (dockerd, containerd, the shims and the containers killed
    with SIGKILL; its sshd and slurmd live on) while clients send requests to the other nodes. node1 and node3 serve every request;
    the job's Prometheus marks node2's vLLM and LMCache targets down (AicTargetDown pending) and the others up; the
    next deploy.yml rolls out node1 and node3 (nothing to change) and fails naming node2 and its engine. The engine
    started again as its service manager would: node2's stack comes back by itself (LMCache, then vLLM), serves, and
    Prometheus marks it up."""
    _dummy, tmp = first_rollout
    image = inspect("node1", "aic-vllm", "{{.Config.Image}}")
    others = started(["node1", "node3"])
    # The clients send to the remaining nodes (a request to node2 would wait for its timeout).
    with Load(["node1", "node3"]) as load:
        time.sleep(3)
        t0 = time.time()
        pids = engine_pids("node2")
        assert {"dockerd", "containerd"} <= {comm(p) for p in pids}, pids
        for pid in pids:  # a short-lived process (a healthcheck's) may be gone already
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        # Prometheus (on node1, scraping every 5 s) sees node2's targets go down; the others stay up.
        wait_targets(["node2"], "down", timeout=60)
        assert {k: v for k, v in targets_by_node().items() if k[1] != "node2" and k[0] in ("vllm", "lmcache")} == {
            (job, n): "up" for job in ("vllm", "lmcache") for n in ("node1", "node3")
        }
        wait_alerts("AicTargetDown", {("vllm", "node2"), ("lmcache", "node2")})
        runner = cluster.deploy(tmp, aic_stack_image=image, aic_rollout_batch_size="100%")
        t1 = time.time()
    assert runner.status == "failed"
    lines = summary(runner)
    for node in ("node1", "node3"):
        assert lines[node] == f"{node}: healthy, unchanged ({image})", lines
    assert lines["node2"].startswith("node2: DROPPED before the rollout (its Docker engine does not answer ("), lines
    messages = " ".join(failures(runner))
    assert "node2: its Docker engine does not answer" in messages and "start it on the node" in messages, messages
    (failure,) = [m for m in failures(runner) if "The rollout did not finish on 1 node(s)" in m]
    assert "node2 dropped out before the rollout (its Docker engine does not answer" in failure, failure
    assert changed_per_host(runner) == {}, changed_per_host(runner)
    assert started(["node1", "node3"]) == others
    # The other nodes answered every request, all along.
    served = [r for r in load.results if r[0] != "node2" and t0 <= r[2] <= t1]
    assert {r[0] for r in served if r[4] == "ok"} == {"node1", "node3"}
    failed = [r for r in served if r[4] != "ok"]
    assert not failed, "node1/node3: " + brief(failed, t0)

    revive_dockerd("node2")
    wait_healthy("node2", timeout=240)
    lmcache = docker_time(inspect("node2", "aic-lmcache", "{{.State.StartedAt}}"))
    vllm = docker_time(inspect("node2", "aic-vllm", "{{.State.StartedAt}}"))
    assert vllm > lmcache, (lmcache, vllm)  # the guard's rule: vLLM started after its LMCache server
    assert inspect("node2", "aic-vllm", "{{.Config.Image}}") == image
    assert complete("node2").status_code == 200
    wait_targets(NODES, "up", timeout=60)


def test_the_cliff_benchmark_runs_as_a_job_on_a_node_of_the_cluster(cluster):
    """`make cliff-spur-l2 INVENTORY=inventories/spur` (+ the overlay and the bed) with a tiny ladder: the controller
    submits a job that asks for a GPU and only follows it; the job runs the benchmark play itself, with the profile's
    nvme arm on the node of the host it runs as (node3, CLIFF_NODE), streams the arm's vLLM and LMCache logs and writes
    CSV, JSON, PNG and HTML. CLIFF_JOB is empty: output, logs and results all land under logs/<Slurm job id>/."""
    inventories = " -i ".join(["inventories/spur", "inventories/rehearsal", str(STATE / "bed.yml")])
    env = {**os.environ, **cluster.env, "VENV": str(REPO / ".venv")}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    proc = subprocess.run(
        ["make", "cliff-spur-l2", f"INVENTORY={inventories}", "CLIFF_CONCURRENCY=1,2", "CLIFF_ITERATIONS=1",
         "CLIFF_NODE=node3"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    match = re.search(r"job (\d+) \(aic-cliff-bench\): exit 0, COMPLETED", proc.stdout)
    assert match, proc.stdout[-4000:]
    job = match.group(1)
    fields = sh("scontrol", "show", "job", "-o", job, env={**os.environ, **cluster.env}).stdout
    # What it asked for: a GPU (standard sbatch on the rehearsal's Slurm), the overlay's partition, the cliff_spur_l2
    # profile's time limit, the node of the host it runs as; SPUR's constraint is empty, so none on Slurm.
    assert "gres/gpu=1" in fields or "gres:gpu:1" in fields or "gres/gpu:1" in fields, fields
    assert "NodeList=node3" in fields and "JobState=COMPLETED" in fields, fields
    assert "Partition=rehearsal" in fields and "TimeLimit=03:00:00" in fields, fields
    assert "--gres=gpu:1" in proc.stdout and "--constraint" not in proc.stdout  # the "Submitting: sbatch ..." line
    # The job ran the benchmark play itself (cliff_bench_where=host there); the controller only submitted and followed.
    job_dir = REPO / "logs" / job
    assert (job_dir / "aic-cliff-bench.exit").read_text() == "0\n"
    out = (job_dir / "aic-cliff-bench.out").read_text(errors="replace")
    assert "TASK [cliff_bench : Run the ladder of the arm (warm-up, drain wait, bursts)]" in out, out[-3000:]
    assert re.search(r"node3\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", out), out[-3000:]
    assert "Run the ladder of the arm" not in proc.stdout and "Deploy LMCache for the arm" not in proc.stdout

    results = job_dir / "results"
    with open(results / "cliff-results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["arm"], int(r["concurrency"])) for r in rows) == [("nvme", 1), ("nvme", 2)], rows
    assert all(int(r["err_count"]) == 0 for r in rows), rows
    assert all(int(float(r["lmcache_requested_tokens"])) > 0 for r in rows), rows  # the arm went through LMCache
    # The arm's vLLM has no container healthcheck (its probes would move the counters): every drain wait settled.
    assert all(r["drained"] == "True" for r in rows), rows
    doc = json.loads((results / "cliff-results.json").read_text())
    assert doc["profile"]["concurrency"] == [1, 2] and doc["profile"]["arms"] == ["nvme"], doc["profile"]
    for name in ("cliff-throughput.png", "cliff-latency.png", "cliff-report.html"):
        assert (results / name).stat().st_size > 0, name
    # The arm's logs, streamed on node3 into the job's directory (the checkout's logs/, shared with the node).
    vllm = (job_dir / "vllm" / "vllm-stream.log").read_text(errors="replace")
    assert "Starting vLLM server" in vllm, vllm[-2000:]
    assert (job_dir / "lmcache" / "lmcache-stream.log").stat().st_size > 0
    # It ran on node3's own engine: its vLLM is the profile's (GPU memory utilisation 0.4, not the deployment's 0.9)
    # and its LMCache has the nvme arm's L2 (NIXL POSIX); node1 still runs the deployment.
    cmd = json.loads(inspect("node3", "aic-vllm", "{{json .Config.Cmd}}"))
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.4", cmd
    assert json.loads(inspect("node3", "aic-vllm", "{{json .Config.Healthcheck.Test}}")) == ["NONE"]
    assert "nixl_store" in inspect("node3", "aic-lmcache", "{{json .Config.Cmd}}")
    cmd = json.loads(inspect("node1", "aic-vllm", "{{json .Config.Cmd}}"))
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.9", cmd


def revive_sshd(node):
    """Start node's sshd again (the node's namespaces are those of its dockerd)."""
    argv = ["/usr/sbin/sshd", "-D", "-e", "-f", str(BED / "sshd_config")]
    start_on_node(node, "dockerd", argv, "sshd", "true", timeout=30)


def test_nodes_whose_slurmd_or_sshd_go_away_mid_rollout_are_named_and_the_others_finish(cluster, first_rollout):
    """Last (the job ends when Slurm takes node3 down). One node per batch: node3's slurmd is killed as the rollout
    starts, node2's sshd as the canary's turn starts. node1 (the canary) finishes; node2's turn finds no connection,
    so node2 is named unreachable and left alone, and the rollout goes on to node3, which Slurm lost: named with
    Slurm's state, untouched. After the last batch (which had no node left) the summary and the job's Prometheus
    check still run, and the run fails naming both. (node2's sshd is started again afterwards.)"""
    _dummy, tmp = first_rollout
    before = started(["node2", "node3"])
    pidfile = STATE / "slurm" / "run" / "slurmd-node3.pid"
    # The release node1 runs (the stand-in, or the good image when the rollout under load ran): nothing to change.
    image = inspect("node1", "aic-vllm", "{{.Config.Image}}")
    killed = threading.Event()

    def lose_node2(event):
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == TURN_STARTS and data.get("host") == "node1":
            sh("kill", "-9", *node_pids("node2", "sshd"))
            killed.set()
        return True

    runs = []
    rollout = threading.Thread(
        target=lambda: runs.append(
            cluster.deploy(tmp, aic_stack_image=image, aic_rollout_batch_size=1, aic_rollout_reach_timeout=5,
                           event_handler=lose_node2)
        )
    )  # fmt: skip
    rollout.start()
    time.sleep(3)  # the inventory has read the job; the canary is being checked
    sh("kill", "-9", pidfile.read_text().strip())
    rollout.join(timeout=1200)
    try:
        (runner,) = runs
        assert killed.is_set(), "the canary's turn never started"
        assert runner.status == "failed"
        lines = summary(runner)
        assert lines["node1"].startswith("node1: healthy"), lines
        assert lines["node2"].startswith("node2: UNREACHABLE when its turn came ("), lines
        assert lines["node3"].startswith("node3: LOST from the job before its turn (Slurm says State="), lines
        assert "NOT_RESPONDING" in lines["node3"] or "DOWN" in lines["node3"], lines
        # Ansible itself never gave up on node2 (the rollout did, by name), and the job's Prometheus was checked.
        assert not runner.stats.get("dark", {}).get("node2"), runner.stats
        assert any("expected targets of 1 nodes (node1) are up" in m for m in debug_messages(runner)), debug_messages(
            runner
        )
        (failure,) = [m for m in failures(runner) if "The rollout did not finish on 2 node(s)" in m]
        assert "node2 could not be reached when its turn came" in failure, failure
        assert "node3 is no longer part of the job (Slurm says State=" in failure, failure
    finally:
        revive_sshd("node2")
    # Neither was touched: both still serve what they ran before.
    assert started(["node2", "node3"]) == before
    assert complete("node2").status_code == 200
