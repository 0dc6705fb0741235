"""A build step of the cpu stand-in image: vLLM's CPU platform forks its engine core, as the GPU platforms do.

vLLM's CPU platform sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` unconditionally, so its API server starts the engine
core in a fresh interpreter that imports torch and vLLM a second time (on two cores, 9 of a start's 16 CPU seconds;
measured with `ps` in the container). The GPU platforms fork the engine core (vLLM's default), as the ROCm image does
on SPUR. Two edits of the installed vLLM make fork work on CPU:

- ``platforms/cpu.py``: the forced assignment becomes a default; the image sets ``fork`` (Dockerfile.cpu.j2) and an
  explicit value in the container's environment still wins;
- ``triton_utils/dispatcher.py``: the kernel-override scan reads each module attribute's instance dict with
  ``vars()`` and calls ``.get`` on it; a forked engine core has every module the API server imported (LMCache's
  connector among them), one of whose objects has a ``__dict__`` that is not a dict, and the scan raised
  AttributeError there. It now skips such an object, as it skips objects without a ``__dict__``.

Usage: python vllm_cpu_fork.py [vllm package directory]  (default: the installed vLLM's). It fails the build, naming
the file, when a line it edits is not there exactly once (a vLLM release that changed it).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

# (file under the vllm package, the line as vLLM 0.32.0 has it, the line this step writes)
EDITS = (
    (
        "platforms/cpu.py",
        'os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"',
        'os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")',
    ),
    (
        "triton_utils/dispatcher.py",
        'wrapper = lookup(vars(value).get("kernel"))',
        'wrapper = lookup(vars(value).get("kernel")) if isinstance(vars(value), dict) else None',
    ),
)


def edit(text: str, old: str, new: str, where: str) -> str:
    """``text`` with line ``old`` replaced by ``new``; ValueError naming ``where`` unless ``old`` is there once."""
    count = text.count(old)
    if count != 1:
        raise ValueError(f"{where}: expected the line {old!r} once, found it {count} times (vLLM changed it)")
    return text.replace(old, new)


def installed_vllm() -> pathlib.Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("vLLM is not installed in this interpreter")
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def apply(package: pathlib.Path) -> list[pathlib.Path]:
    """Edit every file of EDITS under ``package``; nothing is written unless every edit applies."""
    edited = {}
    for name, old, new in EDITS:
        path = package / name
        edited[path] = edit(edited.get(path) or path.read_text(), old, new, str(path))
    for path, text in edited.items():
        path.write_text(text)
    return list(edited)


def main(argv: list[str]) -> int:
    try:
        paths = apply(pathlib.Path(argv[1]) if len(argv) > 1 else installed_vllm())
    except (OSError, ValueError) as exc:
        print(f"vllm_cpu_fork: {exc}", file=sys.stderr)
        return 1
    print("vllm_cpu_fork: edited " + ", ".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
