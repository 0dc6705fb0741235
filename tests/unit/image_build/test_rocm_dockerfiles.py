"""Golden and structure tests for roles/image_build/templates/Dockerfile.rocm-base.j2 and Dockerfile.rocm.j2.

Both templates are rendered the way ansible.builtin.template renders them (Ansible's Templar, trim_blocks) and parsed
with BuildKit's own Dockerfile parser (the ``dockerfile`` package). ``UPDATE_GOLDEN=1`` rewrites the golden files.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import dockerfile
import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from rocm_inputs import make_inputs

from ansible_collections.aic.stack.plugins.filter.rocm import rocm_build_args

HERE = pathlib.Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
TEMPLATES = HERE.parents[2] / "roles" / "image_build" / "templates"
TEMPLATE = {"base": "Dockerfile.rocm-base.j2", "stack": "Dockerfile.rocm.j2"}
# The three arch sets of the issue: two on the prebuilt-wheel path, one built from source.
CASES = {"gfx942-gfx950": "gfx942;gfx950", "gfx950": "gfx950", "gfx1151": "gfx1151"}
# Build args the role adds to rocm_build_args(): not hashed (BUILD_JOBS does not change the image, AIC_INPUTS is
# the hash).
ROLE_ARGS = {"BUILD_JOBS", "AIC_INPUTS"}
# ARGs fixed in the template text (covered by the Dockerfile's hash, never passed by the role).
TEMPLATE_ARGS = {
    "base": {"UCX_GIT_URL", "UCX_REF", "NIXL_GIT_URL", "NIXL_BUILD_TOOLS"},
    "stack": {"LMCACHE_GIT_URL"},
}
BAKED_ENV = {"HSA_ENABLE_IPC_MODE_LEGACY": "1", "SAFETENSORS_FAST_GPU": "1", "HIP_FORCE_DEV_KERNARG": "1"}
STACK_LABELS = {
    "ai.aic.version": "AIC_VERSION",
    "ai.aic.rocm": "ROCM_VERSION",
    "ai.aic.vllm": "VLLM_REF",
    "ai.aic.vllm-source": "VLLM_SOURCE",
    "ai.aic.lmcache": "LMCACHE_REF",
    "ai.aic.nixl": "NIXL_REF",
    "ai.aic.arch": "PYTORCH_ROCM_ARCH",
    "ai.aic.inputs": "AIC_INPUTS",
}
BASE_LABELS = {
    "ai.aic.rocm": "ROCM_VERSION",
    "ai.aic.torch": "TORCH_VERSION",
    "ai.aic.nixl": "NIXL_REF",
    "ai.aic.arch": "PYTORCH_ROCM_ARCH",
}
VAR_RE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def render(image, inputs):
    """Render one template as ansible.builtin.template does (trim_blocks, no lstrip_blocks, strict undefined)."""
    templar = Templar(loader=DataLoader(), variables={"_image_build_rocm": inputs})
    source = (TEMPLATES / TEMPLATE[image]).read_text()
    return templar.template(
        trust_as_template(source),
        escape_backslashes=False,
        overrides={"trim_blocks": True, "lstrip_blocks": False, "newline_sequence": "\n"},
    )


def parse(text):
    return dockerfile.parse_string(text)


def instructions(commands, cmd):
    return [c for c in commands if c.cmd == cmd]


def pairs(command):
    """ENV / LABEL key-value pairs, quotes removed."""
    values = command.value
    return {values[i]: values[i + 1].strip('"') for i in range(0, len(values), 2)}


def declared_args(commands):
    """ARG name -> default (None when declared without one), first declaration wins."""
    args = {}
    for command in instructions(commands, "ARG"):
        name, sep, default = command.value[0].partition("=")
        if name not in args or args[name] is None:
            args[name] = default.strip('"') if sep else args.get(name)
    return args


def expand(value, variables):
    return VAR_RE.sub(lambda m: variables[m.group(1)], value)


def runs(commands):
    return [c.value[0] for c in instructions(commands, "RUN")]


@pytest.fixture(params=sorted(CASES))
def case(request):
    return request.param


# -- golden files ------------------------------------------------------------------------------


@pytest.mark.parametrize("image", ["base", "stack"])
def test_rendered_dockerfile_matches_golden(image, case):
    text = render(image, make_inputs(CASES[case]))
    path = GOLDEN / f"{TEMPLATE[image].removesuffix('.j2').removeprefix('Dockerfile.')}.{case}.Dockerfile"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing; run with UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{path.name} differs from the rendered template; UPDATE_GOLDEN=1 rewrites it"


def test_every_golden_file_belongs_to_a_case():
    expected = {
        f"{TEMPLATE[image].removesuffix('.j2').removeprefix('Dockerfile.')}.{case}.Dockerfile"
        for image in TEMPLATE
        for case in CASES
    }
    assert {p.name for p in GOLDEN.iterdir()} == expected


# -- structure -----------------------------------------------------------------------------------


@pytest.mark.parametrize("image", ["base", "stack"])
def test_from_reads_the_base_from_a_build_arg(image, case):
    inputs = make_inputs(CASES[case])
    commands = parse(render(image, inputs))
    arg, ref = (
        ("ROCM_BASE_IMAGE", inputs["base_image"]) if image == "base" else ("AIC_BASE_IMAGE", inputs["deps_image"])
    )
    assert commands[0].cmd == "ARG" and commands[0].value == (f"{arg}={ref}",)
    froms = instructions(commands, "FROM")
    assert [f.value for f in froms] == [(f"${{{arg}}}",)]
    assert commands[1] is froms[0]


@pytest.mark.parametrize("image", ["base", "stack"])
def test_args_are_exactly_the_build_args_with_their_values_as_defaults(image, case):
    inputs = make_inputs(CASES[case])
    args = rocm_build_args(inputs, image)
    declared = declared_args(parse(render(image, inputs)))
    extra = {"VLLM_GIT_URL"} if image == "stack" and inputs["vllm_source"] == "source" else set()
    assert set(declared) == set(args) | ROLE_ARGS | TEMPLATE_ARGS[image] | extra
    for name, value in args.items():
        assert declared[name] == value, name
    assert declared["BUILD_JOBS"] == "" and declared["AIC_INPUTS"] == ""


@pytest.mark.parametrize("image", ["base", "stack"])
def test_variables_in_instructions_are_declared_args(image, case):
    """FROM, COPY, ENV and LABEL only read ARGs declared before them (so build args decide every value)."""
    commands = parse(render(image, make_inputs(CASES[case])))
    global_args, stage_args, env = set(), set(), {"PATH"}
    in_stage = False
    for command in commands:
        if command.cmd == "ARG":
            name = command.value[0].partition("=")[0]
            (stage_args if in_stage else global_args).add(name)
            if in_stage:
                assert "=" in command.value[0] or name in global_args or name in ROLE_ARGS | {"AIC_BASE_IMAGE"}
            continue
        if command.cmd == "FROM":
            assert set(VAR_RE.findall(" ".join(command.value))) <= global_args
            in_stage = True
            continue
        if command.cmd in ("COPY", "ENV", "LABEL"):
            used = set(VAR_RE.findall(" ".join(command.value)))
            assert used <= stage_args | env, (command.original, used - stage_args - env)
        if command.cmd == "ENV":
            env |= set(pairs(command))


def test_stack_labels_every_pin_from_the_build_args(case):
    inputs = make_inputs(CASES[case])
    args = rocm_build_args(inputs)
    labels = {}
    for command in instructions(parse(render("stack", inputs)), "LABEL"):
        labels.update(pairs(command))
    for label, arg in STACK_LABELS.items():
        assert labels[label] == f"${{{arg}}}", label
    resolved = {k: expand(v, dict(args, AIC_INPUTS="0123456789ab")) for k, v in labels.items()}
    assert resolved["ai.aic.version"] == inputs["version"]
    assert resolved["ai.aic.rocm"] == inputs["rocm_version"]
    assert resolved["ai.aic.vllm"] == inputs["vllm_ref"]
    assert resolved["ai.aic.vllm-source"] == inputs["vllm_source"]
    assert resolved["ai.aic.lmcache"] == inputs["lmcache_ref"]
    assert resolved["ai.aic.nixl"] == inputs["nixl_ref"]
    assert resolved["ai.aic.arch"] == inputs["arch_list"]
    assert resolved["ai.aic.base"] == inputs["deps_image"]
    assert resolved["ai.aic.inputs"] == "0123456789ab"


def test_base_labels_its_pins_from_the_build_args(case):
    inputs = make_inputs(CASES[case])
    labels = {}
    for command in instructions(parse(render("base", inputs)), "LABEL"):
        labels.update(pairs(command))
    for label, arg in BASE_LABELS.items():
        assert labels[label] == f"${{{arg}}}", label
    assert "ai.aic.inputs" not in labels  # the stack image's own label must not be inherited with a stale value


def test_stack_version_and_inputs_are_declared_last():
    """A new version or input hash only rebuilds the label layer."""
    commands = parse(render("stack", make_inputs("gfx950")))
    assert [c.cmd for c in commands[-5:]] == ["ARG", "ARG", "ARG", "LABEL", "ENTRYPOINT"]
    assert [c.value[0].partition("=")[0] for c in commands[-5:-2]] == ["AIC_BASE_IMAGE", "AIC_VERSION", "AIC_INPUTS"]
    version_args = [c for c in instructions(commands, "ARG") if c.value[0].startswith(("AIC_VERSION", "AIC_INPUTS"))]
    assert len(version_args) == 2


def test_stack_bakes_the_runtime_env(case):
    env = {}
    for command in instructions(parse(render("stack", make_inputs(CASES[case]))), "ENV"):
        env.update(pairs(command))
    for name, value in BAKED_ENV.items():
        assert env[name] == value


@pytest.mark.parametrize("image", ["base", "stack"])
def test_no_ld_library_path_anywhere(image, case):
    for command in parse(render(image, make_inputs(CASES[case]))):
        assert "LD_LIBRARY_PATH" not in command.original, command.original


@pytest.mark.parametrize("image", ["base", "stack"])
def test_classic_builder_compatible(image, case):
    text = render(image, make_inputs(CASES[case]))
    assert not re.search(r"(?im)^#\s*syntax\s*=", text)
    commands = parse(text)
    assert all(not c.heredocs for c in commands)
    assert all("--mount" not in c.flags and not any(f.startswith("--mount") for f in c.flags) for c in commands)
    assert not any("<<" in run for run in runs(commands))
    assert [c.value for c in instructions(commands, "SHELL")] == [("/bin/bash", "-o", "pipefail", "-c")]


@pytest.mark.parametrize("image", ["base", "stack"])
def test_every_run_is_strict_and_valid_bash(image, case):
    bash = shutil.which("bash")
    for run in runs(parse(render(image, make_inputs(CASES[case])))):
        assert run.startswith("set -eux; "), run[:60]
        assert "|| true" not in run and "||true" not in run
        result = subprocess.run([bash, "-n", "-o", "pipefail", "-c", run], capture_output=True, text=True)
        assert result.returncode == 0, (result.stderr, run[:200])


# Exported by /opt/aic/env.sh (written in the base image); only a RUN that sources it has them.
ENV_SH = {"ROCM_PATH", "ROCM_HOME", "CMAKE_PREFIX_PATH", "CC", "CXX", "AIC_AMD_SMI_DIR"}
ASSIGNED_RE = re.compile(
    r"(?:^|[\s;{(])(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=|\bfor\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\b"
)


@pytest.mark.parametrize("image", ["base", "stack"])
def test_run_variables_are_defined(image, case):
    """Every RUN runs under set -u: each variable it reads must be an ARG/ENV declared before it, exported by
    /opt/aic/env.sh (sourced first) or assigned in the RUN itself."""
    known = {"PATH"}
    for command in parse(render(image, make_inputs(CASES[case]))):
        if command.cmd == "ARG":
            known.add(command.value[0].partition("=")[0])
        elif command.cmd == "ENV":
            known |= set(pairs(command))
        elif command.cmd == "RUN":
            run = re.sub(r"'[^']*'", "''", command.value[0])  # single-quoted text is not expanded
            local = {a or b for a, b in ASSIGNED_RE.findall(run)}
            if ". /opt/aic/env.sh" in run:
                local |= ENV_SH
            used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", run))
            assert used <= known | local, (sorted(used - known - local), run[:80])


def test_wheel_path_installs_the_wheel_and_patches_site_packages():
    for arches in ("gfx942;gfx950", "gfx950"):
        commands = parse(render("stack", make_inputs(arches)))
        text = "\n".join(runs(commands))
        assert "VLLM_GIT_URL" not in "\n".join(c.original for c in commands)
        assert '"$VLLM_REF"' not in text  # nothing fetches vLLM's sources
        assert 'test "$VLLM_SOURCE" = wheel' in text
        assert '--extra-index-url "$VLLM_WHEEL_INDEX_URL" "vllm==${VLLM_REF#v}"' in text
        assert 'aic-apply-patches /opt/aic/patches/vllm "$site"' in text
        assert 'find_spec("vllm").origin' in text
        assert "vllm._rocm_C" in text
        copies = [c.value for c in instructions(commands, "COPY")]
        assert ("patches/vllm/${VLLM_REF}/", "/opt/aic/patches/vllm/") in copies


def test_source_path_clones_patches_and_builds_for_its_arch():
    inputs = make_inputs("gfx1151")
    commands = parse(render("stack", inputs))
    assert declared_args(commands)["PYTORCH_ROCM_ARCH"] == "gfx1151"
    assert declared_args(commands)["VLLM_GIT_URL"] == "https://github.com/vllm-project/vllm.git"
    (build,) = [run for run in runs(commands) if "VLLM_TARGET_DEVICE=rocm" in run]
    assert 'test "$VLLM_SOURCE" = source' in build
    assert 'aic-fetch-src "$VLLM_GIT_URL" "$VLLM_REF" /opt/aic/src/vllm' in build
    assert "aic-apply-patches /opt/aic/patches/vllm /opt/aic/src/vllm" in build
    assert build.index("aic-fetch-src") < build.index("aic-apply-patches") < build.index("pip wheel")
    assert 'jobs="$(aic-jobs)"' in build
    assert 'PYTORCH_ROCM_ARCH="$PYTORCH_ROCM_ARCH" MAX_JOBS="$jobs"' in build
    assert "nproc" not in build  # the bound comes from aic-jobs (BUILD_JOBS or nproc), never inline
    assert "vllm==" not in build
    assert expand("$PYTORCH_ROCM_ARCH", rocm_build_args(inputs)) == "gfx1151"


def test_lmcache_is_built_for_hip_with_its_patches_and_cuda_packages_removed(case):
    commands = parse(render("stack", make_inputs(CASES[case])))
    (build,) = [run for run in runs(commands) if "LMCACHE_GIT_URL" in run]
    assert 'aic-fetch-src "$LMCACHE_GIT_URL" "$LMCACHE_REF" /opt/aic/src/lmcache' in build
    assert "aic-apply-patches /opt/aic/patches/lmcache /opt/aic/src/lmcache" in build
    assert "BUILD_WITH_HIP=1 CXX=hipcc" in build
    assert 'MAX_JOBS="$jobs"' in build
    uninstall = re.search(r"pip uninstall -y ([^;]+);", build).group(1).split()
    assert {"nixl", "nixl-cu12", "nixl-cu13", "cupy-cuda12x", "cufile-python", "cuda-pathfinder"} <= set(uninstall)
    assert build.index("pip install --no-build-isolation") < build.index("pip uninstall -y nixl")
    copies = [c.value for c in instructions(commands, "COPY")]
    assert ("patches/lmcache/${LMCACHE_REF}/", "/opt/aic/patches/lmcache/") in copies


def test_stack_checks_its_pins_against_the_base_image():
    commands = parse(render("stack", make_inputs("gfx950")))
    check = runs(commands)[0]
    for arg in ("PYTORCH_ROCM_ARCH", "ROCM_VERSION", "NIXL_REF"):
        assert f'"{arg}=${arg}"' in check
    assert "/opt/aic/base-pins" in check
    base = "\n".join(runs(parse(render("base", make_inputs("gfx950")))))
    for arg in ("PYTORCH_ROCM_ARCH", "ROCM_VERSION", "NIXL_REF"):
        assert f'"{arg}=${arg}"' in base


def test_stack_entrypoint_is_the_openai_server_through_the_env_script():
    (entrypoint,) = instructions(parse(render("stack", make_inputs("gfx950"))), "ENTRYPOINT")
    assert entrypoint.json
    assert entrypoint.value == ("/opt/aic/bin/aic-env", "python3", "-m", "vllm.entrypoints.openai.api_server")


def test_base_installs_torch_sdk_and_nixl_from_build_args(case):
    inputs = make_inputs(CASES[case])
    commands = parse(render("base", inputs))
    text = "\n".join(runs(commands))
    for package in ("libopenmpi3t64", "libboost-dev", "ccache", "ninja-build", "nvme-cli", "git", "cmake"):
        assert re.search(rf"\s{re.escape(package)}\s", text), package
    assert "rm -rf /var/lib/apt/lists/*" in text
    assert "rm -f /usr/lib/python3*/EXTERNALLY-MANAGED" in text
    assert '--index-url "$TORCH_INDEX_URL"' in text
    assert '"torch[$extras]==$TORCH_VERSION" torchvision' in text
    assert '"rocm-sdk-devel==$ROCM_VERSION"' in text
    for flag in ("--root", "--cmake", "--bin"):
        assert f"rocm-sdk path {flag}" in text
    assert "/etc/profile.d/aic-rocm.sh" in text
    assert '"$site/aic-amd-smi.pth"' in text
    assert "CC='$bin/amdclang'" in text and "CXX='$bin/amdclang++'" in text
    (nixl,) = [run for run in runs(commands) if "NIXL_GIT_URL" in run]
    assert nixl.index('aic-fetch-src "$NIXL_GIT_URL" "$NIXL_REF"') < nixl.index(
        "aic-apply-patches /opt/aic/patches/nixl"
    )
    assert "libplugin_AIS_MT.so" in nixl and "/etc/ld.so.conf.d/" in nixl
    copies = [c.value for c in instructions(commands, "COPY")]
    assert copies == [("patches/nixl/${NIXL_REF}/", "/opt/aic/patches/nixl/")]


def test_base_extra_ca_certs():
    inputs = make_inputs("gfx950", extra_ca_certs=["corp-root.crt", "proxy.crt"])
    commands = parse(render("base", inputs))
    copies = [c.value for c in instructions(commands, "COPY")]
    assert copies[0] == ("certs/corp-root.crt", "certs/proxy.crt", "/usr/local/share/ca-certificates/aic/")
    first_run = runs(commands)[0]
    assert first_run == "set -eux;     update-ca-certificates"
    env = {}
    for command in instructions(commands, "ENV"):
        env.update(pairs(command))
    assert env["PIP_CERT"] == "/etc/ssl/certs/ca-certificates.crt"
    # Certificates come before anything that downloads.
    assert commands.index(instructions(commands, "COPY")[0]) < commands.index(instructions(commands, "RUN")[1])
    without = render("base", make_inputs("gfx950"))
    assert "certs/" not in without and "update-ca-certificates" not in without and "PIP_CERT" not in without


# -- the helper scripts the base image writes (run for real, under a temporary prefix) --------


@pytest.fixture(scope="module")
def helpers(tmp_path_factory):
    """Run the base image's helper RUN with /opt/aic moved to a temporary directory; return that directory."""
    root = tmp_path_factory.mktemp("opt-aic")
    (run,) = [r for r in runs(parse(render("base", make_inputs("gfx950")))) if "> /opt/aic/bin/aic-apply-patches" in r]
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", run.replace("/opt/aic", str(root))], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    for name in ("aic-env", "aic-jobs", "aic-fetch-src", "aic-apply-patches"):
        script = root / "bin" / name
        assert os.access(script, os.X_OK)
        assert script.read_text().startswith("#!/bin/sh\nset -eu\n")
        assert subprocess.run(["sh", "-n", str(script)]).returncode == 0, name
    return root


def _sh(helpers, name, *args, cwd=None, env=None):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        [str(helpers / "bin" / name), *args], capture_output=True, text=True, cwd=cwd, env=full_env, check=False
    )


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _tree(path, content):
    path.mkdir(parents=True, exist_ok=True)
    (path / "pkg").mkdir(exist_ok=True)
    (path / "pkg" / "mod.py").write_text(content)
    return path


PATCH = """--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1 +1 @@
-{old}
+{new}
"""


def _series(path, steps):
    path.mkdir(parents=True, exist_ok=True)
    # Written in reverse so that creation order differs from lexical order.
    for name, old, new in reversed(steps):
        (path / name).write_text(PATCH.format(old=old, new=new))
    (path / "README").write_text("not a patch\n")
    return path


def test_apply_patches_in_lexical_order_to_a_git_checkout(helpers, tmp_path):
    repo = _tree(tmp_path / "src", "value = 1\n")
    _git(repo, "init", "-q")
    series = _series(
        tmp_path / "series",
        [
            ("0001-one.patch", "value = 1", "value = 2"),
            ("0002-two.patch", "value = 2", "value = 3"),
            ("0010-ten.patch", "value = 3", "value = 10"),
        ],
    )
    result = _sh(helpers, "aic-apply-patches", str(series), str(repo))
    assert result.returncode == 0, result.stderr
    assert (repo / "pkg" / "mod.py").read_text() == "value = 10\n"
    applied = re.findall(r"aic-apply-patches: \S+/(\S+\.patch)", result.stdout)
    assert applied == ["0001-one.patch", "0002-two.patch", "0010-ten.patch"]
    assert "3 patch(es) applied" in result.stdout


def test_apply_patches_to_a_plain_tree_like_site_packages(helpers, tmp_path):
    site = _tree(tmp_path / "site-packages", "value = 1\n")
    series = _series(tmp_path / "series", [("0001-one.patch", "value = 1", "value = 2")])
    result = _sh(helpers, "aic-apply-patches", str(series), str(site))
    assert result.returncode == 0, result.stderr
    assert (site / "pkg" / "mod.py").read_text() == "value = 2\n"


def test_apply_patches_fails_on_a_patch_that_does_not_apply(helpers, tmp_path):
    site = _tree(tmp_path / "site-packages", "value = 1\n")
    series = _series(
        tmp_path / "series",
        [
            ("0001-bad.patch", "value = 7", "value = 8"),
            ("0002-good.patch", "value = 1", "value = 2"),
        ],
    )
    result = _sh(helpers, "aic-apply-patches", str(series), str(site))
    assert result.returncode != 0
    assert (site / "pkg" / "mod.py").read_text() == "value = 1\n"  # stopped at the first failure
    assert "0002-good.patch" not in result.stdout


@pytest.mark.parametrize("series", ["empty", "missing"])
def test_apply_patches_fails_on_an_empty_series(helpers, tmp_path, series):
    site = _tree(tmp_path / "site-packages", "value = 1\n")
    directory = tmp_path / "series"
    if series == "empty":
        directory.mkdir()
        (directory / "README").write_text("x\n")
    result = _sh(helpers, "aic-apply-patches", str(directory), str(site))
    assert result.returncode == 1
    assert f"aic-apply-patches: no *.patch in {directory}" in result.stderr


@pytest.mark.parametrize("value", ["4", "1", "128", "", None])
def test_jobs(helpers, value):
    env = dict(os.environ)
    env.pop("BUILD_JOBS", None)
    if value is not None:
        env["BUILD_JOBS"] = value
    result = subprocess.run([str(helpers / "bin" / "aic-jobs")], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (value or subprocess.check_output(["nproc"], text=True).strip()) + "\n"


@pytest.mark.parametrize("value", ["0", "08", "-1", "1.5", "abc", "4 ", "$(nproc)"])
def test_jobs_rejects_anything_but_a_positive_integer(helpers, value):
    result = _sh(helpers, "aic-jobs", env={"BUILD_JOBS": value})
    assert result.returncode == 1
    assert "aic-jobs: BUILD_JOBS must be a positive integer" in result.stderr


@pytest.mark.parametrize("url", ["http://github.com/x/y.git", "git@github.com:x/y.git", "/srv/git/y"])
def test_fetch_src_accepts_https_only(helpers, tmp_path, url):
    result = _sh(helpers, "aic-fetch-src", url, "v1", str(tmp_path / "src"))
    assert result.returncode == 1
    assert "is not an https URL" in result.stderr
    assert not (tmp_path / "src").exists()


def test_env_sources_the_env_script_and_passes_arguments(helpers):
    (helpers / "env.sh").write_text("export ROCM_PATH='/sdk root'\n")
    result = _sh(helpers, "aic-env", "sh", "-c", 'printf "%s|%s" "$ROCM_PATH" "$1"', "arg0", "one arg")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "/sdk root|one arg"
