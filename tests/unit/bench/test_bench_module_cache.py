"""bench/module_cache.py: the default playbook runs every module of MODULES --tasks times on localhost through this
venv's interpreter; the summary is the medians per arm and their on/off ratios."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("bench_module_cache", REPO / "bench" / "module_cache.py")
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def test_the_default_playbook_runs_each_module_tasks_times_through_this_interpreter():
    (play,) = json.loads(bench.default_playbook(3))
    assert play["hosts"] == "localhost" and play["connection"] == "local" and play["gather_facts"] is False
    assert play["vars"]["ansible_python_interpreter"] == sys.executable
    modules = [next(k for k in task if k not in ("name", "changed_when")) for task in play["tasks"]]
    assert len(modules) == 3 * len(bench.MODULES)
    assert {m: modules.count(m) for m in modules} == {m: 3 for m, _args in bench.MODULES}
    assert all(task["changed_when"] is False for task in play["tasks"])


def test_the_summary_is_medians_and_on_over_off():
    runs = {"off": [(10.0, 8.0), (12.0, 9.0), (30.0, 20.0)], "on": [(6.0, 6.0), (9.0, 7.0), (7.0, 6.5)]}
    summary = bench.summarize(runs)
    assert summary == {
        "off_wall_s": 12.0, "off_cpu_s": 9.0, "on_wall_s": 7.0, "on_cpu_s": 6.5,
        "wall_ratio": round(7.0 / 12.0, 3), "cpu_ratio": round(6.5 / 9.0, 3),
    }  # fmt: skip
    text = bench.table(summary, 3, "20 module runs")
    assert "| wall s | 12.0 | 7.0 | 0.583 |" in text
    assert "| 0.722 |" in text.splitlines()[-1]
