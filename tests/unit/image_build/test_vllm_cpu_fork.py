"""roles/image_build/files/vllm_cpu_fork.py: the cpu stand-in image's vLLM forks its engine core."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import types

import pytest
from test_cpu_dockerfiles import commands, render

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "roles" / "image_build" / "files" / "vllm_cpu_fork.py"
spec = importlib.util.spec_from_file_location("vllm_cpu_fork", SCRIPT)
fork = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fork)

# The lines of vLLM 0.32.0 around each edit.
CPU_PY = """        #
        # Environment variables for CPU executor
        #

        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"

        # Note: to avoid the error 'nthreads cannot be larger than environment
        # variable "NUMEXPR_MAX_THREADS" (64)'.
        os.environ["NUMEXPR_MAX_THREADS"] = str(get_max_threads())
"""
DISPATCHER_PY = """def scan(values, lookup):
    found = []
    for value in values:
        wrapper = None
        if hasattr(value, "__dict__"):
            wrapper = lookup(vars(value).get("kernel"))
        found.append(wrapper)
    return found
"""


def package(tmp_path, cpu=CPU_PY, dispatcher=DISPATCHER_PY):
    for name, text in (("platforms/cpu.py", cpu), ("triton_utils/dispatcher.py", dispatcher)):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def method_after(cpu_text, env):
    """Run the (edited) assignment as vLLM does, in environment ``env``; the start method it leaves."""
    line = next(line.strip() for line in cpu_text.splitlines() if "VLLM_WORKER_MULTIPROC_METHOD" in line)
    saved = dict(os.environ)
    try:
        os.environ.pop("VLLM_WORKER_MULTIPROC_METHOD", None)
        os.environ.update(env)
        exec(line, {"os": os})  # noqa: S102 - one line of the edited text above
        return os.environ["VLLM_WORKER_MULTIPROC_METHOD"]
    finally:
        os.environ.clear()
        os.environ.update(saved)


class OddDict:
    """An object whose ``__dict__`` is not a dict (what a forked engine core met among LMCache's objects)."""

    @property
    def __dict__(self):
        return object()


def test_after_the_step_an_explicit_method_wins_and_none_keeps_vllms_spawn(tmp_path):
    assert method_after(CPU_PY, {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}) == "spawn"  # vLLM as shipped
    fork.apply(package(tmp_path))
    edited = (tmp_path / "platforms/cpu.py").read_text()
    assert method_after(edited, {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}) == "fork"
    assert method_after(edited, {}) == "spawn"


def test_after_the_step_the_kernel_scan_skips_an_object_whose_dict_is_not_a_dict(tmp_path):
    kernel = object()
    values = [types.SimpleNamespace(kernel=kernel), OddDict(), 3]
    lookup = {id(kernel): "wrapper"}.get

    def scan(text):
        namespace = {}
        exec(text, namespace)  # noqa: S102 - the (edited) function above
        return namespace["scan"](values, lambda v: lookup(id(v)))

    with pytest.raises(AttributeError):
        scan(DISPATCHER_PY)
    fork.apply(package(tmp_path))
    assert scan((tmp_path / "triton_utils/dispatcher.py").read_text()) == ["wrapper", None, None]


def test_everything_else_is_left_as_it_was(tmp_path):
    fork.apply(package(tmp_path))
    for name, old, new in fork.EDITS:
        assert (tmp_path / name).read_text().replace(new, old) == {"platforms/cpu.py": CPU_PY}.get(name, DISPATCHER_PY)


@pytest.mark.parametrize("cpu", ["", CPU_PY + CPU_PY, CPU_PY.replace('"spawn"', '"fork"')])
def test_a_vllm_that_changed_a_line_fails_the_step_naming_the_file_and_writes_nothing(tmp_path, cpu):
    pkg = package(tmp_path, cpu=cpu)
    with pytest.raises(ValueError, match=r"platforms/cpu.py: expected the line .* once, found it [02] times"):
        fork.apply(pkg)
    assert (pkg / "triton_utils/dispatcher.py").read_text() == DISPATCHER_PY


def test_main_edits_once_and_a_second_run_fails_naming_the_file(tmp_path, capsys):
    pkg = package(tmp_path)
    assert fork.main(["vllm_cpu_fork.py", str(pkg)]) == 0
    assert "edited" in capsys.readouterr().out
    assert fork.main(["vllm_cpu_fork.py", str(pkg)]) == 1
    assert f"vllm_cpu_fork: {pkg}/platforms/cpu.py: expected the line" in capsys.readouterr().err
    assert fork.main(["vllm_cpu_fork.py", str(tmp_path / "missing")]) == 1


def test_the_stack_image_runs_the_step_after_installing_vllm_and_asks_for_fork():
    text = render("Dockerfile.cpu.j2")
    runs = [" ".join(c.value) for c in commands(text, "RUN")]
    install = next(i for i, r in enumerate(runs) if "/tmp/wheels/*.whl" in r)
    assert runs.index("python /opt/aic/bin/vllm_cpu_fork.py") > install
    assert ["VLLM_WORKER_MULTIPROC_METHOD", "fork"] in [list(c.value) for c in commands(text, "ENV")]
