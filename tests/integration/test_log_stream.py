"""The log_stream role on the real Docker engine: a throwaway ticking container streamed into logs/<job>/.

The streamer must keep the file growing across a restart and a recreation of the container without writing a line
twice, a rerun must not start a second streamer, and the stop entry point must end it with the file complete.
Only the test's own container (aic-test-logstream-1), job directory and state directory are touched.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import os
import re
import shutil
import signal
import time
import uuid

import docker
import pytest

from .conftest import REPO, changed_tasks, failures, run_playbook

pytestmark = pytest.mark.integration

CONTAINER = "aic-test-logstream-1"
SERVICE = "ticker"
TICKER = "i=0; while true; do echo {word} $i; i=$((i+1)); sleep 0.2; done"
PLAYBOOK = "tests/integration/playbooks/log_stream.yml"
STOP_PLAYBOOK = "tests/integration/playbooks/log_stream_stop.yml"
START_TASK = (
    "log_stream",
    "Start a detached streamer per service (one already streaming the container into its file is kept)",
)
LINE_RE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?Z) (.*)$")


def pid_alive(pid):
    """A live process (a zombie waiting for a reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def ns(stamp):
    """Nanoseconds of a docker (UTC, RFC3339Nano) timestamp: comparable even with trimmed fractions."""
    whole, _dummy, fraction = stamp.rstrip("Z").partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds * 10**9 + int(fraction.ljust(9, "0"))


def read_lines(path):
    """(timestamp ns, text) of every line; fails on a line without an RFC3339 timestamp or an incomplete last line."""
    data = path.read_text()
    assert data.endswith("\n"), f"{path} ends with an incomplete line: {data[-80:]!r}"
    out = []
    for line in data.splitlines():
        match = LINE_RE.match(line)
        assert match, f"line without an RFC3339 timestamp in {path}: {line!r}"
        out.append((ns(match.group(1)), match.group(2)))
    return out


def assert_no_duplicates(lines):
    stamps = [ts for ts, _dummy in lines]
    assert all(a < b for a, b in zip(stamps, stamps[1:], strict=False)), "timestamps are not strictly increasing"


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def texts(path):
    return [text for _dummy, text in read_lines(path)] if path.exists() and path.stat().st_size else []


@pytest.fixture
def ticker(tmp_path):
    client = docker.from_env()
    tags = [tag for image in client.images.list(name="aic-base") for tag in image.tags]
    if not tags:
        pytest.skip("no aic-base image on this Docker engine (make deploy builds it)")
    image = sorted(tags)[0]

    def run(word):
        return client.containers.run(image, ["sh", "-c", TICKER.format(word=word)], name=CONTAINER, detach=True)

    def remove():
        with contextlib.suppress(docker.errors.NotFound):
            client.containers.get(CONTAINER).remove(force=True)

    remove()
    job = f"test-{uuid.uuid4().hex[:12]}"
    state_dir = tmp_path / "state"
    log_dir = REPO / "logs" / job
    ctx = {
        "job": job,
        "run": run,
        "remove": remove,
        "state_dir": state_dir,
        "log": log_dir / SERVICE / f"{SERVICE}-stream.log",
        "extravars": {
            "log_stream_services": [{"service": SERVICE, "container": CONTAINER}],
            "log_stream_job_id": job,
            "log_stream_state_dir": str(state_dir),
        },
    }
    run("tick")
    try:
        yield ctx
    finally:
        # Our streamer only: the pid its metadata names, when that process still runs our script for our container.
        try:
            pid = json.loads((state_dir / f"{CONTAINER}.json").read_text())["pid"]
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().split(b"\0")
            if b"run" in cmdline and CONTAINER.encode() in cmdline and pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass
        remove()
        shutil.rmtree(log_dir, ignore_errors=True)


def streamer_pid(ctx):
    return json.loads((ctx["state_dir"] / f"{CONTAINER}.json").read_text())["pid"]


def test_stream_survives_restart_and_recreate_then_stops(ticker, tmp_path):
    log = ticker["log"]

    runner = run_playbook(PLAYBOOK, tmp_path, extravars=ticker["extravars"])
    assert runner.status == "successful", failures(runner)
    assert START_TASK in changed_tasks(runner)
    pid = streamer_pid(ticker)
    assert pid_alive(pid)

    # The file starts at the container's start and grows while the play is long gone.
    wait_for(lambda: "tick 1" in texts(log), 10, "the first lines")
    assert texts(log)[0] == "tick 0"
    size = log.stat().st_size
    time.sleep(2)
    assert log.stat().st_size > size, "the stream file does not grow"
    assert_no_duplicates(read_lines(log))

    # A rerun keeps the streamer: changed=0, same pid.
    runner = run_playbook(PLAYBOOK, tmp_path, extravars=ticker["extravars"])
    assert runner.status == "successful", failures(runner)
    assert changed_tasks(runner) == []
    assert all(count == 0 for count in runner.stats["changed"].values()), runner.stats
    assert streamer_pid(ticker) == pid and pid_alive(pid)

    # docker restart: the ticker counts from 0 again; its first run is not written twice.
    docker.from_env().containers.get(CONTAINER).restart(timeout=0)
    wait_for(lambda: texts(log).count("tick 2") == 2, 15, "lines after the restart")
    lines = read_lines(log)
    assert_no_duplicates(lines)
    assert len(lines) == len(set(lines))

    # Removed and run again under the same name: the new container is followed too.
    ticker["remove"]()
    ticker["run"]("tock")
    wait_for(lambda: "tock 2" in texts(log), 15, "lines of the recreated container")
    assert_no_duplicates(read_lines(log))
    assert streamer_pid(ticker) == pid

    # The stop entry point (what teardown includes) ends the streamer; the file is complete and stays as it is.
    runner = run_playbook(STOP_PLAYBOOK, tmp_path, extravars=ticker["extravars"])
    assert runner.status == "successful", failures(runner)
    assert ("log_stream", "Stop the log streamers (SIGTERM, wait for them to flush and exit)") in changed_tasks(runner)
    assert not pid_alive(pid)
    assert not (ticker["state_dir"] / f"{CONTAINER}.pid").exists()
    size = log.stat().st_size
    final = read_lines(log)
    assert_no_duplicates(final)
    assert [text for _dummy, text in final].count("tock 0") == 1
    time.sleep(1)
    assert log.stat().st_size == size, "the file still grows after stop"
    stopped = [
        e["event_data"]["res"]
        for e in runner.events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Report the stream files"
    ]
    assert stopped and stopped[0]["msg"] == [f"{SERVICE}: {log} ({size} bytes; stopped)"]
