"""The NIXL patch series (patches/nixl/v1.3.2): the AIS_MT hipFile backend.

NIXL is built in the image from a git checkout of ai-dynamo/nixl at the pinned tag, and CI cannot reach
GitHub, so these tests never need the upstream source. They check the patch itself:

- its structure, parsed as a diff: the files it touches, the plugin list, the HIP detection (whose shell
  fallback is run), the meson options, when the plugin is built, and what the plugin registers;
- its NIXL-independent code (``src/plugins/mt/common/mt_common.h`` and
  ``src/plugins/mt/ais/ais_mt_hipfile.h``), extracted from the patch, compiled with ``-Werror`` and run by
  ``nixl_fake/ais_mt_hipfile_selftest.cpp`` against ``nixl_fake/``: a FAKE hipFile (and the few HIP
  runtime calls it needs), standing in for AMD's hipFile, which needs ROCm and an AMD GPU and cannot
  exist here. Mutated copies of the code show that the self-test fails when the behaviour breaks.

The engine itself (``ais_mt_backend.cpp``) includes NIXL's own headers, Abseil and Taskflow, which are not
vendored here; it was compiled against the real v1.3.2 tree when the patch was written.
"""

from __future__ import annotations

import ast
import pathlib
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import pytest

from ansible_collections.aic.stack.plugins.module_utils import patching
from ansible_collections.aic.stack.plugins.module_utils.plan import DEFAULTS

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
SERIES = REPO_ROOT / "patches" / "nixl" / "v1.3.2"
PATCH = SERIES / "01-ais-mt-hipfile-backend.patch"
FAKE = REPO_ROOT / "tests" / "unit" / "patches" / "nixl_fake"
DOCKERFILE = REPO_ROOT / "roles" / "image_build" / "templates" / "Dockerfile.rocm-base.j2"

MODIFIED = ["meson.build", "meson_options.txt", "src/plugins/meson.build"]
NEW = [
    "src/plugins/mt/ais/ais_mt_backend.cpp",
    "src/plugins/mt/ais/ais_mt_backend.h",
    "src/plugins/mt/ais/ais_mt_hipfile.h",
    "src/plugins/mt/ais/ais_mt_plugin.cpp",
    "src/plugins/mt/ais/meson.build",
    "src/plugins/mt/common/mt_common.h",
]
HIPFILE_CALLS = [
    "hipFileDriverOpen",
    "hipFileDriverClose",
    "hipFileBufRegister",
    "hipFileBufDeregister",
    "hipFileHandleRegister",
    "hipFileHandleDeregister",
    "hipFileRead",
    "hipFileWrite",
]
GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ is not installed")


# -- a small unified-diff parser ---------------------------------------------------------------


@dataclass
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: list[str] = field(default_factory=list)  # with their ' ', '+' or '-' prefix


@dataclass
class FileDiff:
    old_path: str | None  # None for a new file
    new_path: str
    new_file: bool
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def added(self):
        return [line[1:] for h in self.hunks for line in h.lines if line.startswith("+")]

    @property
    def removed(self):
        return [line[1:] for h in self.hunks for line in h.lines if line.startswith("-")]

    def new_text(self):
        """The whole content of a new file (every line of it is an added line)."""
        assert self.new_file, self.new_path
        return "".join(f"{line}\n" for line in self.added)


HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_patch(text):
    """``{path: FileDiff}`` of a git diff (after any format-patch header)."""
    files = {}
    current = None
    hunk = None
    remaining = (0, 0)
    for line in text[text.index("\ndiff --git ") + 1 :].split("\n"):
        if hunk is not None and remaining != (0, 0):
            tag = line[:1]
            old_left, new_left = remaining
            if tag == " ":
                remaining = (old_left - 1, new_left - 1)
            elif tag == "-":
                remaining = (old_left - 1, new_left)
            elif tag == "+":
                remaining = (old_left, new_left - 1)
            elif line.startswith("\\ No newline"):
                continue
            else:
                raise AssertionError(f"{current.new_path}: hunk ends early at {line!r}")
            if min(remaining) < 0:
                raise AssertionError(f"{current.new_path}: hunk longer than its header says")
            hunk.lines.append(line)
            continue
        if line.startswith("diff --git "):
            match = re.fullmatch(r"diff --git a/(\S+) b/(\S+)", line)
            assert match, line
            current = FileDiff(old_path=match.group(1), new_path=match.group(2), new_file=False)
            files[current.new_path] = current
            hunk = None
        elif line.startswith("new file mode "):
            current.new_file = True
            current.old_path = None
        elif line.startswith("@@ "):
            match = HUNK_RE.match(line)
            assert match, line
            old_start, old_count, new_start, new_count = match.groups()
            hunk = Hunk(int(old_start), int(old_count or 1), int(new_start), int(new_count or 1))
            current.hunks.append(hunk)
            remaining = (hunk.old_count, hunk.new_count)
        elif line.startswith("-- ") or line == "--":
            break  # format-patch signature
    assert hunk is None or remaining == (0, 0), "the last hunk is shorter than its header says"
    return files


@pytest.fixture(scope="module")
def diff():
    return parse_patch(PATCH.read_text())


def _strip_cpp_comments(code):
    code = re.sub(r"/\*.*?\*/", "", code, flags=re.S)
    return re.sub(r"//[^\n]*", "", code)


def _new_code(diff, *paths):
    return "\n".join(_strip_cpp_comments(diff[p].new_text()) for p in paths)


# -- (1) structure -------------------------------------------------------------------------------


def test_series_is_the_one_patch():
    assert patching.list_patches(str(SERIES)) == [str(PATCH)]


def test_patch_touches_exactly_the_listed_files(diff):
    # git's own reading of the patch (this also rejects a malformed one) and the parser's agree.
    assert patching.touched_paths(str(PATCH)) == sorted(MODIFIED + NEW)
    assert sorted(p for p, f in diff.items() if not f.new_file) == sorted(MODIFIED)
    assert sorted(p for p, f in diff.items() if f.new_file) == sorted(NEW)
    for path in MODIFIED:
        assert diff[path].old_path == path  # no renames


def test_patch_has_a_format_patch_header():
    text = PATCH.read_text()
    header = text[: text.index("\ndiff --git ")]
    assert header.startswith("From 0000000000000000000000000000000000000000 ")
    assert "\nSubject: [PATCH] " in header and "AIS_MT" in header
    explanation = header.split("\n\n", 1)[1].split("\n---\n")[0]
    assert len(explanation.split()) > 100
    assert "HIPFILE_ALLOW_COMPAT_MODE" in explanation and "thread_count" in explanation


def test_upstream_code_is_only_added_to(diff):
    """The only upstream line replaced is the plugin list; everything else is additions."""
    assert diff["meson.build"].removed == [line for line in diff["meson.build"].removed if "all_plugins" in line]
    assert len(diff["meson.build"].removed) == 1
    assert diff["meson_options.txt"].removed == []
    assert diff["src/plugins/meson.build"].removed == []


def _plugin_list(line):
    match = re.fullmatch(r"all_plugins = (\[.*\])", line.strip())
    assert match, line
    return ast.literal_eval(match.group(1))


def test_ais_mt_joins_the_plugin_list_after_gds_mt(diff):
    (old,) = [_plugin_list(line) for line in diff["meson.build"].removed]
    (new,) = [_plugin_list(line) for line in diff["meson.build"].added if line.startswith("all_plugins")]
    assert "AIS_MT" not in old and "GDS_MT" in old
    expected = list(old)
    expected.insert(old.index("GDS_MT") + 1, "AIS_MT")
    assert new == expected


def _rocm_root_command(diff):
    (line,) = [line for line in diff["meson.build"].added if "ROCM_PATH" in line and "run_command" in line]
    match = re.search(r"run_command\('sh', '-c', '([^']*)'", line)
    assert match, line
    return match.group(1)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ROCM_PATH": "/rocm/path", "ROCM_HOME": "/rocm/home"}, "/rocm/path"),
        ({"ROCM_HOME": "/rocm/home"}, "/rocm/home"),
        ({"ROCM_PATH": "", "ROCM_HOME": "/rocm/home"}, "/rocm/home"),
        ({}, "/opt/rocm"),
    ],
)
def test_hip_root_is_rocm_path_then_rocm_home_then_opt_rocm(diff, env, expected):
    proc = subprocess.run(
        ["sh", "-c", _rocm_root_command(diff)],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout == expected


def test_have_hip_is_defined_only_when_hip_is_found(diff):
    added = diff["meson.build"].added
    (define,) = [i for i, line in enumerate(added) if "-DHAVE_HIP" in line]
    assert "add_project_arguments('-DHAVE_HIP', language: 'cpp')" in added[define]
    guard = next(line for line in reversed(added[:define]) if line.strip().startswith("if "))
    assert "hip_lib.found()" in guard and "has_header('hip/hip_runtime_api.h'" in guard
    assert any("find_library('amdhip64'" in line for line in added[:define])
    assert any("-D__HIP_PLATFORM_AMD__" in line for line in added[:define])


OPTION_RE = re.compile(r"option\('(\w+)', type\s*:\s*'(\w+)', value\s*:\s*([^,]+), description\s*:\s*'[^']+'\)")


def test_meson_options(diff):
    options = {}
    for line in diff["meson_options.txt"].added:
        match = OPTION_RE.fullmatch(line.strip())
        assert match, line
        options[match.group(1)] = (match.group(2), match.group(3).strip())
    assert options == {
        "disable_rocm_ais_backend": ("boolean", "false"),
        "rocm_ais_path": ("string", "'/opt/rocm'"),
    }


def test_plugin_is_built_only_when_hipfile_is_found_and_not_disabled(diff):
    added = diff["src/plugins/meson.build"].added
    text = "\n".join(added)
    assert "get_option('disable_rocm_ais_backend')" in text and "get_option('rocm_ais_path')" in text
    assert re.search(r"find_library\('hipfile', dirs: hipfile_lib_dirs", text)
    assert "has_header('hipfile.h'" in text
    (build,) = [i for i, line in enumerate(added) if "subdir('mt/ais')" in line]
    condition = added[build - 1].strip()
    assert condition.startswith("elif ")
    for needed in ("not disable_rocm_ais_backend", "hipfile_dep.found()", "taskflow_proj.found()"):
        assert needed in condition
    assert any("enabled_plugins.get('AIS_MT')" in line for line in added[:build])
    # hipfile_dep is only declared after both the library and the header were found.
    (declare,) = [i for i, line in enumerate(added) if line.strip().startswith("hipfile_dep = declare_dependency")]
    guard = added[declare - 1]
    assert "hipfile_lib.found()" in guard and "has_header('hipfile.h'" in guard


def test_plugin_meson_builds_a_shared_ais_mt_plugin(diff):
    text = diff["src/plugins/mt/ais/meson.build"].new_text()
    assert "shared_library('AIS_MT'" in text and "name_prefix: 'libplugin_'" in text
    assert "install_dir: plugin_install_dir" in text
    deps = re.search(r"dependencies: \[([^\]]*)\]", text).group(1).split(", ")
    assert {"hip_dep", "hipfile_dep", "taskflow_proj", "file_utils_interface"} <= set(deps)
    assert deps.index("hip_dep") < deps.index("hipfile_dep")
    assert re.findall(r"'([\w./]+\.(?:cpp|h))'", text) == [
        "ais_mt_backend.cpp",
        "ais_mt_backend.h",
        "ais_mt_hipfile.h",
        "ais_mt_plugin.cpp",
        "../common/mt_common.h",
    ]


def test_plugin_registers_ais_mt_for_dram_vram_and_file(diff):
    plugin = _new_code(diff, "src/plugins/mt/ais/ais_mt_plugin.cpp")
    created = re.findall(
        r"create\(\s*NIXL_PLUGIN_API_VERSION,\s*\"(\w+)\",\s*\"[\d.]+\",\s*\{\},\s*\{([^}]*)\}\)", plugin
    )
    assert [(name, mems.replace(" ", "")) for name, mems in created] == [("AIS_MT", "DRAM_SEG,VRAM_SEG,FILE_SEG")]
    backend = _new_code(diff, "src/plugins/mt/ais/ais_mt_backend.h")
    assert re.search(r"getSupportedMems\(\) const override \{\s*return \{DRAM_SEG, VRAM_SEG, FILE_SEG\};", backend)


def test_code_calls_the_hipfile_api_and_taskflow(diff):
    code = _new_code(diff, *[p for p in NEW if p.endswith((".cpp", ".h"))])
    for name in HIPFILE_CALLS:
        assert re.search(rf"\b{name}\(", code), name
    assert "std::make_unique<tf::Executor>(thread_count_)" in code
    assert "executor_->run(" in code
    assert "#include <hipfile.h>" in code


def test_compat_mode_env_and_thread_count_default_in_code(diff):
    hipfile = _new_code(diff, "src/plugins/mt/ais/ais_mt_hipfile.h")
    common = _new_code(diff, "src/plugins/mt/common/mt_common.h")
    assert 'compat_mode_env = "HIPFILE_ALLOW_COMPAT_MODE"' in hipfile
    assert re.search(r"if \(!compatModeAllowed\(\)\) \{\s*throw std::runtime_error", hipfile)
    assert 'return value == "1" || value == "true" || value == "yes";' in common
    assert "std::tolower" in common
    assert "std::max<size_t>(1, hardware_threads / 2)" in common
    assert "defaultThreadCount(unsigned hardware_threads = std::thread::hardware_concurrency())" in common
    backend = _new_code(diff, "src/plugins/mt/ais/ais_mt_backend.cpp")
    assert "nixl::mt::threadCountParam(init_params->customParams)" in backend


def test_dockerfile_applies_the_series_of_the_default_nixl_ref():
    """The rocm base image applies patches/nixl/<nixl_ref>/ and needs the AIS_MT plugin; the default ref has it."""
    assert SERIES.name == DEFAULTS["aic_nixl_ref"]
    text = DOCKERFILE.read_text()
    assert "COPY patches/nixl/${NIXL_REF}/ /opt/aic/patches/nixl/" in text
    assert "aic-apply-patches /opt/aic/patches/nixl /opt/aic/src/nixl" in text
    assert "-Drocm_ais_path=/opt/rocm" in text
    assert "libplugin_AIS_MT.so" in text


# -- (2) the patch's code against the FAKE hipFile ------------------------------------------------


def _extract(diff, dest):
    """Writes the patch's new files under dest (as in the patched tree) and returns dest/src/plugins."""
    for path in NEW:
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(diff[path].new_text())
    return dest / "src" / "plugins"


def _build_and_run_selftest(plugins, tmp_path):
    binary = tmp_path / "ais_mt_hipfile_selftest"
    compile_cmd = [GXX, "-std=c++20", "-Wall", "-Wextra", "-Werror", f"-I{FAKE}", f"-I{plugins}"]
    compile_cmd += [str(FAKE / "ais_mt_hipfile_selftest.cpp"), str(FAKE / "fake_hipfile.cpp"), "-o", str(binary)]
    built = subprocess.run(compile_cmd, capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr
    return subprocess.run([str(binary)], capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)


@needs_gxx
def test_hipfile_code_passes_its_selftest_against_the_fake(diff, tmp_path):
    run = _build_and_run_selftest(_extract(diff, tmp_path / "nixl"), tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[-1] == "ALL OK"
    assert not [line for line in lines if line.startswith("FAIL")]
    for name in (
        "ok host buffer registration fails without compat mode",
        "ok compat mode 'Yes' continues unregistered",
        "ok compat mode 'false' still fails",
        "ok default threads of 16 cores is 8",
        "ok VRAM write through hipFileWrite (base + offset)",
        "ok DRAM read through pread",
        "ok a short read is an error",
    ):
        assert name in lines
    assert len([line for line in lines if line.startswith("ok ")]) >= 50


MUTATIONS = {
    "compat mode always allowed": (
        "src/plugins/mt/ais/ais_mt_hipfile.h",
        "if (!compatModeAllowed()) {",
        "if (false) {",
        "FAIL host buffer registration fails without compat mode",
    ),
    "compat mode case-sensitive": (
        "src/plugins/mt/common/mt_common.h",
        "std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) {",
        "std::transform(value.begin(), value.begin(), value.begin(), [](unsigned char c) {",
        "FAIL env true: 'TRUE'",
    ),
    "a third of the cores": (
        "src/plugins/mt/common/mt_common.h",
        "hardware_threads / 2",
        "hardware_threads / 3",
        "FAIL default threads of 16 cores is 8",
    ),
    "buffer offset ignored": (
        "src/plugins/mt/ais/ais_mt_hipfile.h",
        "static_cast<hoff_t>(buffer_offset));\n        } else {\n"
        "            rc = hipFileWrite(file.get(), buffer_base, size, static_cast<hoff_t>(file_offset),\n"
        "                              static_cast<hoff_t>(buffer_offset));",
        "static_cast<hoff_t>(buffer_offset));\n        } else {\n"
        "            rc = hipFileWrite(file.get(), buffer_base, size, static_cast<hoff_t>(file_offset),\n"
        "                              0);",
        "FAIL the bytes are in the file at the file offset",
    ),
    "short transfers accepted": (
        "src/plugins/mt/ais/ais_mt_hipfile.h",
        "if (static_cast<size_t>(rc) != size) {",
        "if (static_cast<size_t>(rc) > size) {",
        "FAIL a short read is an error",
    ),
}


@needs_gxx
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_selftest_fails_when_the_behaviour_breaks(diff, tmp_path, mutation):
    path, old, new, failure = MUTATIONS[mutation]
    plugins = _extract(diff, tmp_path / "nixl")
    target = tmp_path / "nixl" / path
    text = target.read_text()
    assert text.count(old) == 1, f"the mutation no longer matches {path}"
    target.write_text(text.replace(old, new))

    run = _build_and_run_selftest(plugins, tmp_path)

    assert run.returncode == 1, run.stdout
    assert run.stdout.splitlines()[-1].startswith(failure), run.stdout
