"""bench/distribute.py reads its times from the playbook's json callback output: transfer, load, and loaded (until
the last node has the image loaded), each from the task spans the callback records."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("bench_distribute", REPO / "bench" / "distribute.py")
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)

START = 1_800_000_000.0


def stamp(offset):
    return bench.datetime.datetime.fromtimestamp(START + offset, bench.datetime.UTC).isoformat().replace("+00:00", "Z")


def task(name, begin, end, hosts):
    return {"task": {"name": name, "duration": {"start": stamp(begin), "end": stamp(end)}}, "hosts": hosts}


def document(*tasks, changed=3):
    return {"plays": [{"tasks": list(tasks)}], "stats": {"node1": {"changed": changed}, "node2": {"changed": 0}}}


def test_broadcast_transfer_ends_at_the_last_verified_node_and_loaded_at_the_end_of_the_load():
    relays = {
        "node1": {"verified_at": START + 40.0},
        "node2": {"verified_at": START + 52.5},
        "node3": {"skipped": True},
    }
    data = document(
        task("Collect each node's result", 53, 54, relays),
        task("Load the received tarball into the engine", 54, 101.25, {}),
    )
    row = bench.timings("broadcast", START, START + 105, data)
    assert row == {"transfer_s": 52.5, "load_s": 47.25, "loaded_s": 101.25, "total_s": 105.0, "changed": 3}


def test_copy_transfer_ends_with_the_copy_task():
    data = document(task("Copy the tarball to the node", 1, 30, {}), task("Load the received tarball", 30, 45, {}))
    row = bench.timings("copy", START, START + 46, data)
    assert (row["transfer_s"], row["load_s"], row["loaded_s"]) == (30.0, 15.0, 45.0)


def test_shared_fs_loads_while_it_reads_so_transfer_and_loaded_are_one():
    data = document(task("Stream it into the engine from the shared file system", 2, 60, {}))
    row = bench.timings("shared_fs", START, START + 61, data)
    assert row["transfer_s"] == row["loaded_s"] == 60.0


def test_a_missing_task_names_it():
    with pytest.raises(SystemExit, match="Load the received tarball"):
        bench.timings("copy", START, START + 1, document(task("Copy the tarball", 0, 1, {})))
