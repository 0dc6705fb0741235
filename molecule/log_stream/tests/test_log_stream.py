"""The log_stream role on its own: the service's log is streamed, with Docker's timestamps, to
logs/<job-id>/<service>/<service>-stream.log; it keeps growing, also across a restart of the container, and the
idempotence run joined the running streamer (same job id, the same file)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import time

import docker

WORK = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "aic")


def stream_file():
    record = json.loads((WORK / "log-stream.json").read_text())
    path = pathlib.Path(record["files"]["talker"])
    assert path == WORK / "logs" / record["job_id"] / "talker" / "talker-stream.log"
    assert re.fullmatch(r"manual-\d{8}T\d{6}Z", record["job_id"]), record
    return path


def lines_after(path, seconds):
    time.sleep(seconds)
    return path.read_text().splitlines()


def test_the_log_is_streamed_with_timestamps_and_keeps_growing():
    path = stream_file()
    first = lines_after(path, 0)
    later = lines_after(path, 3)
    assert len(later) >= len(first) + 3, (len(first), len(later))
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z line \d+$", later[-1]), later[-1]


def test_only_one_streamer_follows_the_container():
    # Two streamers would write every line twice.
    numbers = [line.rsplit(" ", 1)[1] for line in stream_file().read_text().splitlines() if " line " in line]
    assert numbers and len(numbers) == len(set(numbers)), numbers


def test_a_restarted_container_is_followed_again():
    path = stream_file()
    docker.from_env().containers.get("aicmollog-talker").restart(timeout=1)
    # The restarted shell counts from 1 again: "line 1" appears a second time in the same file.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (
            path.read_text().splitlines().count("line 1")
            or sum(line.endswith(" line 1") for line in path.read_text().splitlines()) >= 2
        ):
            break
        time.sleep(1)
    assert sum(line.endswith(" line 1") for line in path.read_text().splitlines()) >= 2
