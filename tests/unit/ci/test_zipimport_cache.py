"""scripts/venv/aic_zipimport_cache.py: code imported from a zip archive compiles once per source; a hit is the same
code under the file name of this import; a broken or unwritable cache only costs the compile; real Ansible modules
(AnsiballZ payloads) go through it."""

from __future__ import annotations

import importlib.util
import marshal
import os
import pathlib
import subprocess
import sys
import textwrap
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
HOOK = REPO / "scripts" / "venv" / "aic_zipimport_cache.py"
SPEC = importlib.util.spec_from_file_location("aic_zipimport_cache_under_test", HOOK)
cache = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cache)

SOURCE = textwrap.dedent(
    """
    def outer():
        def inner():
            raise RuntimeError("from inside the zip")
        return inner

    VALUE = 42
    """
).encode()


class CountingCompile:
    def __init__(self):
        self.calls = []

    def __call__(self, pathname, source):
        self.calls.append(pathname)
        return compile(source, pathname, "exec", dont_inherit=True)


def run(code):
    namespace = {}
    exec(code, namespace)  # noqa: S102 - the code under test
    with pytest.raises(RuntimeError) as raised:
        namespace["outer"]()()
    return namespace["VALUE"], raised.value.__traceback__.tb_next.tb_frame.f_code.co_filename


def test_the_directory_is_per_bytecode_version_and_can_be_moved_or_turned_off(tmp_path):
    tag = f"{sys.implementation.cache_tag}-O{sys.flags.optimize}"
    assert cache.cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == str(tmp_path / "aic-stack" / "zipimport" / tag)
    assert cache.cache_dir({cache.ENV: str(tmp_path / "here")}) == str(tmp_path / "here" / tag)
    home = os.path.join(os.path.expanduser("~"), ".cache", "aic-stack", "zipimport", tag)
    assert cache.cache_dir({}) == home
    assert cache.cache_dir({cache.ENV: "off"}) is None
    assert cache.cache_dir({cache.ENV: "OFF"}) is None


def test_a_source_compiles_once_and_a_hit_names_the_file_it_was_imported_from(tmp_path):
    counting = CountingCompile()
    compile_cached = cache.cached_compile(counting, str(tmp_path / "c"))
    first = compile_cached("/tmp/one.zip/pkg/mod.py", SOURCE)
    second = compile_cached("/tmp/two.zip/pkg/mod.py", SOURCE)
    assert counting.calls == ["/tmp/one.zip/pkg/mod.py"]
    assert run(first) == (42, "/tmp/one.zip/pkg/mod.py")
    # The nested function's frame too: every code object carries this import's file name.
    assert run(second) == (42, "/tmp/two.zip/pkg/mod.py")
    # Another source is another entry.
    compile_cached("/tmp/one.zip/pkg/other.py", SOURCE + b"\nOTHER = 1\n")
    assert len(counting.calls) == 2
    assert len(list((tmp_path / "c").iterdir())) == 2


def test_a_broken_entry_is_compiled_again_and_rewritten(tmp_path):
    counting = CountingCompile()
    compile_cached = cache.cached_compile(counting, str(tmp_path))
    compile_cached("/a.zip/m.py", SOURCE)
    (entry,) = tmp_path.iterdir()
    entry.write_bytes(b"\x00not marshal")
    assert run(compile_cached("/b.zip/m.py", SOURCE))[0] == 42
    assert counting.calls == ["/a.zip/m.py", "/b.zip/m.py"]
    magic = importlib.util.MAGIC_NUMBER
    assert entry.read_bytes()[: len(magic)] == magic
    assert marshal.loads(entry.read_bytes()[len(magic) :]).co_filename == "/b.zip/m.py"
    # An entry holding something that is not code (marshal reads it) is no hit either.
    entry.write_bytes(magic + marshal.dumps(("not", "code")))
    assert run(compile_cached("/c.zip/m.py", SOURCE))[0] == 42
    assert len(counting.calls) == 3
    # Nor is code of another bytecode version (another magic number).
    entry.write_bytes(b"\x00\x00\r\n" + marshal.dumps(compile(SOURCE, "/old.zip/m.py", "exec")))
    assert run(compile_cached("/d.zip/m.py", SOURCE)) == (42, "/d.zip/m.py")
    assert len(counting.calls) == 4


def test_a_cache_that_cannot_be_written_only_costs_the_compile(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory would be")
    counting = CountingCompile()
    compile_cached = cache.cached_compile(counting, str(blocker / "c"))
    assert run(compile_cached("/a.zip/m.py", SOURCE))[0] == 42
    assert run(compile_cached("/a.zip/m.py", SOURCE))[0] == 42
    assert len(counting.calls) == 2


def test_an_interpreter_start_imports_nothing_more():
    """Every interpreter of the venv loads the hook: it imports no module beyond what Python's start already has
    (with -S, os is imported first, as the site module does)."""
    hook_dir = str(HOOK.parent)
    code = (
        f"import os, sys; before = set(sys.modules); sys.path.insert(0, {hook_dir!r}); import aic_zipimport_cache; "
        "print(sorted(set(sys.modules) - before - {'aic_zipimport_cache'}))"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_off_installs_nothing():
    import zipimport

    before = zipimport._compile_source
    assert cache.install({cache.ENV: "off"}) is None
    assert zipimport._compile_source is before


ZIP_IMPORT = """
import sys, zipimport
{prelude}
sys.path.insert(0, {hook_dir!r})
import aic_zipimport_cache
sys.path.insert(0, {archive!r})
import zipped
print(zipped.VALUE)
try:
    zipped.outer()()
except RuntimeError as exc:
    tb = exc.__traceback__
    while tb.tb_next:
        tb = tb.tb_next
    print(tb.tb_frame.f_code.co_filename)
"""


def zip_import(tmp_path, archive, prelude=""):
    code = ZIP_IMPORT.format(prelude=prelude, hook_dir=str(HOOK.parent), archive=str(archive))
    env = {**os.environ, cache.ENV: str(tmp_path / "cache")}
    # -S: no site (this venv's own .pth would install the hook before the prelude runs).
    return subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, check=False)


def test_an_interpreter_imports_from_a_zip_through_the_cache(tmp_path):
    first, second = tmp_path / "first.zip", tmp_path / "second.zip"
    for archive in (first, second):
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("zipped.py", SOURCE)
    out = zip_import(tmp_path, first)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["42", f"{first}/zipped.py"]
    assert len(list((tmp_path / "cache").rglob("*"))) == 2  # the version directory and one entry
    # A second interpreter whose own compile would fail imports the module from the cache alone.
    refuse = "def refuse(*a):\n    raise SystemExit('compiled again')\nzipimport._compile_source = refuse"
    out = zip_import(tmp_path, second, prelude=refuse)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["42", f"{second}/zipped.py"]


def test_real_ansible_modules_fill_the_cache_and_then_read_it(tmp_path):
    """Two ad-hoc module runs through this venv's Ansible on the local connection: the first fills the cache with the
    payload's module_utils, the second adds nothing (every source a hit) and its result is the same."""
    ansible = pathlib.Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip("needs the venv's ansible (make setup)")
    if not (pathlib.Path(cache.__file__).parent / "aic_zipimport_cache.pth").exists():
        pytest.skip("no .pth next to the hook")
    site = subprocess.run(
        [sys.executable, "-c", "import aic_zipimport_cache, sys; print(aic_zipimport_cache.__file__)"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if site.returncode != 0:
        pytest.skip("the hook is not installed in this venv (scripts/setup-venv.sh installs it)")
    env = {**os.environ, cache.ENV: str(tmp_path / "cache"), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    argv = [str(ansible), "localhost", "-c", "local", "-i", "localhost,", "-m", "ansible.builtin.stat", "-a", "path=/",
            "-e", f"ansible_python_interpreter={sys.executable}"]  # fmt: skip
    first = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, cwd=REPO)
    assert first.returncode == 0, first.stdout + first.stderr
    entries = sorted(p.name for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert len(entries) > 10, entries  # basic.py and the module_utils it imports
    second = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, cwd=REPO)
    assert second.returncode == 0, second.stdout + second.stderr
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()) == entries
    assert "isdir: true" in second.stdout
