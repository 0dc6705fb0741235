"""What converge's benchmark left, read as an operator reads it: logs/<job>/results/ has the CSV (one row per arm x
concurrency x iteration, latencies and hit rates filled in), the JSON, two real PNG plots and the HTML report; the
arm's vLLM and LMCache were streamed into logs/<job>/<service>/; the arm's stack is the dram arm's, from the pinned
release, over the inventory's own settings."""

from __future__ import annotations

import csv
import json
import os
import pathlib
import struct

import docker
import matplotlib.image
import pytest

JOB = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "aic", "logs", "molecule-cliff")
RESULTS = JOB / "results"
# converge: arms dram, concurrency 1, iterations 1 (iter counts from 0)
EXPECTED_ROWS = [("dram", 1, 0)]
HIT_RATES = ("l1_hit_rate_pct", "ext_hit_rate_pct", "lmcache_l1_hit_rate_pct", "lmcache_l2_hit_rate_pct")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def rows():
    with open(RESULTS / "cliff-results.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_csv_has_one_row_per_arm_concurrency_and_iteration(rows):
    assert sorted((r["arm"], int(r["concurrency"]), int(r["iter"])) for r in rows) == EXPECTED_ROWS
    for r in rows:
        assert r["profile"] == "cliff_kvd", r
        assert int(r["ok_count"]) == int(r["concurrency"]) and int(r["err_count"]) == 0, r
        assert r["drained"] == "True", r


def test_every_row_has_latencies_throughput_and_hit_rates(rows):
    for r in rows:
        for column in ("wall_s", "p50_latency_s", "p95_latency_s", "throughput_tok_s_prompt", "requests_per_s"):
            assert r[column] != "" and float(r[column]) > 0.0, (column, r)
        assert float(r["p50_latency_s"]) <= float(r["p95_latency_s"]), r
        for column in HIT_RATES:
            assert r[column] != "" and 0.0 <= float(r[column]) <= 100.0, (column, r)
        # The dram arm runs vLLM with the LMCache connector: LMCache was asked for the prompt's tokens.
        assert float(r["lmcache_requested_tokens"]) > 0, r


def test_json_has_the_resolved_profile_rows_and_cliffs():
    doc = json.loads((RESULTS / "cliff-results.json").read_text())
    profile = doc["profile"]
    assert profile["name"] == "cliff_kvd"
    assert (profile["arms"], profile["concurrency"], profile["iterations"]) == (["dram"], [1], 1)
    # The site's overrides (inventories/local) hold, and converge's empty values kept the defaults.
    assert (profile["isl"], profile["prefix_tokens"], profile["max_tokens"]) == (200, 128, 1)
    assert profile["prefix_mode"] == "shared"
    assert sorted(doc["cliffs"]) == ["dram"]
    assert [(r["arm"], r["concurrency"], r["iter"]) for r in doc["rows"]] == EXPECTED_ROWS


@pytest.mark.parametrize("name", ["cliff-throughput.png", "cliff-latency.png"])
def test_plots_are_real_png_images(name):
    path = RESULTS / name
    data = path.read_bytes()
    assert len(data) > 0
    assert data[:8] == PNG_SIGNATURE, data[:8]
    # The first chunk is IHDR: width and height of the plot (PLOT_SIZE_PX).
    length, kind, width, height = struct.unpack(">I4sII", data[8:24])
    assert (kind, width, height) == (b"IHDR", 1000, 600), (length, kind, width, height)
    image = matplotlib.image.imread(path)
    assert image.shape[:2] == (600, 1000)
    assert image.std() > 0  # not a blank canvas


def test_html_report_embeds_both_plots():
    html = (RESULTS / "cliff-report.html").read_text()
    assert html.count("data:image/png;base64,") == 2
    assert "dram" in html


def test_the_arms_logs_were_streamed_into_the_job():
    vllm = (JOB / "vllm" / "vllm-stream.log").read_text(errors="replace")
    # One arm: one vLLM started, streamed from its start.
    assert vllm.count("Starting vLLM server") == 1, vllm[-2000:]
    assert (JOB / "lmcache" / "lmcache-stream.log").stat().st_size > 0


def test_the_stack_runs_the_dram_arm_of_the_pinned_release():
    client = docker.from_env()
    vllm, lmcache = client.containers.get("aicmolcliff-vllm"), client.containers.get("aicmolcliff-lmcache")
    assert vllm.attrs["Config"]["Image"] == os.environ["AIC_STACK_IMAGE"]
    assert lmcache.attrs["Config"]["Image"] == os.environ["AIC_STACK_IMAGE"]
    # The arms run without vLLM's container healthcheck (its probes would land in the measured counters).
    assert vllm.attrs["Config"]["Healthcheck"]["Test"] == ["NONE"]
    # The inventory's L2 (nixl_posix) is replaced by the dram arm's: LMCache L1 only, no L2 adapter.
    command = lmcache.attrs["Config"]["Cmd"]
    assert "--l2-adapter" not in command, command
    assert command[command.index("--l1-size-gb") + 1] == "0.001953125", command
