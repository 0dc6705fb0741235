"""make cliff-kvd with a tiny ladder, for real on the local stack: the vram and dram arms are deployed in turn, warmed
up, drained and measured; CSV, JSON, PNG plots and the HTML report land in logs/<job id>/results/. The nvme arm (NIXL
POSIX L2) runs once in CI, as a Slurm job on the rehearsal cluster (test_rehearsal, make cliff-spur-l2): a third arm
here cost four more minutes of a vLLM restart and its ladder for no path that job does not already drive."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time

import matplotlib.image
import pytest

from .conftest import REPO, failures, run_playbook

pytestmark = pytest.mark.integration

ARMS = ["vram", "dram"]
LADDER = [1, 2, 4]


@pytest.fixture(scope="module")
def results():
    job = f"test-cliff-{time.time_ns()}"
    env = {**os.environ, "VENV": str(REPO / ".venv")}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    proc = subprocess.run(
        [
            "make",
            "cliff-kvd",
            "CLIFF_CONCURRENCY=1,2,4",
            "CLIFF_ITERATIONS=1",
            "CLIFF_ARMS=" + ",".join(ARMS),
            f"CLIFF_JOB={job}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return REPO / "logs" / job / "results"


def test_every_arm_streams_its_vllm_and_lmcache_logs_into_the_job(results):
    job = results.parent
    vllm = (job / "vllm" / "vllm-stream.log").read_text(errors="replace")
    # One vLLM per arm, each streamed from its start: three server starts in the one file.
    assert vllm.count("Starting vLLM server") == len(ARMS), vllm[-2000:]
    lmcache = job / "lmcache" / "lmcache-stream.log"
    assert lmcache.stat().st_size > 0


def test_csv_has_one_row_per_arm_concurrency_and_iteration_with_hit_rates(results):
    with open(results / "cliff-results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["arm"], int(r["concurrency"]), int(r["iter"])) for r in rows) == sorted(
        (arm, c, 0) for arm in ARMS for c in LADDER
    )
    for column in ("l1_hit_rate_pct", "ext_hit_rate_pct", "lmcache_l1_hit_rate_pct", "lmcache_l2_hit_rate_pct"):
        assert all(0.0 <= float(r[column]) <= 100.0 for r in rows), column
    assert all(int(r["err_count"]) == 0 and int(r["ok_count"]) == int(r["concurrency"]) for r in rows)
    # The vram arm runs vLLM without LMCache: LMCache is never asked.
    assert all(int(float(r["lmcache_requested_tokens"])) == 0 for r in rows if r["arm"] == "vram")
    assert any(int(float(r["lmcache_requested_tokens"])) > 0 for r in rows if r["arm"] == "dram")


def test_every_drain_settles_and_every_burst_counts_only_its_own_prompts(results):
    """The arms run without the vLLM container healthcheck (profile key vllm_healthcheck_interval): its 1-token
    completion every 3 s kept the prefix-cache counters moving, so every drain wait ran to its bound (60 s a
    concurrency level, six of the fixture's seven minutes) and a probe could land inside a measured burst."""
    with open(results / "cliff-results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    isl = json.loads((results / "cliff-results.json").read_text())["profile"]["isl"]
    for r in rows:
        assert r["drained"] == "True", r
        assert float(r["drain_wait_s"]) < 60.0, r
        assert int(float(r["l1_cache_queries"])) == int(r["concurrency"]) * isl, r


def test_json_and_html_report(results):
    doc = json.loads((results / "cliff-results.json").read_text())
    assert sorted(doc["cliffs"]) == sorted(ARMS)
    assert doc["profile"]["concurrency"] == LADDER
    html = (results / "cliff-report.html").read_text()
    assert html.count("data:image/png;base64,") == 2


@pytest.mark.parametrize("name", ["cliff-throughput.png", "cliff-latency.png"])
def test_plots_are_real_images_of_the_expected_size(results, name):
    image = matplotlib.image.imread(results / name)
    assert image.shape[:2] == (600, 1000)
    assert image.std() > 0  # not a blank canvas


def test_bad_profile_input_fails_before_any_container_is_touched(session_tmp):
    runner = run_playbook(
        "playbooks/bench.yml", session_tmp, extravars={"cliff_bench_overrides": {"concurrency": "1,x"}}
    )
    assert runner.status == "failed"
    assert any("cliff_bench: concurrency" in f for f in failures(runner)), failures(runner)
