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
# Golden case -> (arch set, aic_vllm_install). SPUR (gfx950) builds vLLM from source; a site whose ROCm/torch pair
# has vLLM's wheel index configured installs the prebuilt wheel on gfx942+gfx950; a consumer arch (gfx1151) always
# builds from source, in an image of its own.
CASES = {
    "gfx942-gfx950": ("gfx942;gfx950", "wheel"),
    "gfx950": ("gfx950", "source"),
    "gfx1151": ("gfx1151", "source"),
}
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
    text = render(image, make_inputs(*CASES[case]))
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
    inputs = make_inputs(*CASES[case])
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
    inputs = make_inputs(*CASES[case])
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
    commands = parse(render(image, make_inputs(*CASES[case])))
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
    inputs = make_inputs(*CASES[case])
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
    inputs = make_inputs(*CASES[case])
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
    for command in instructions(parse(render("stack", make_inputs(*CASES[case]))), "ENV"):
        env.update(pairs(command))
    for name, value in BAKED_ENV.items():
        assert env[name] == value


@pytest.mark.parametrize("image", ["base", "stack"])
def test_no_ld_library_path_anywhere(image, case):
    for command in parse(render(image, make_inputs(*CASES[case]))):
        assert "LD_LIBRARY_PATH" not in command.original, command.original


@pytest.mark.parametrize("image", ["base", "stack"])
def test_classic_builder_compatible(image, case):
    text = render(image, make_inputs(*CASES[case]))
    assert not re.search(r"(?im)^#\s*syntax\s*=", text)
    commands = parse(text)
    assert all(not c.heredocs for c in commands)
    assert all("--mount" not in c.flags and not any(f.startswith("--mount") for f in c.flags) for c in commands)
    assert not any("<<" in run for run in runs(commands))
    assert [c.value for c in instructions(commands, "SHELL")] == [("/bin/bash", "-o", "pipefail", "-c")]


@pytest.mark.parametrize("image", ["base", "stack"])
def test_every_run_is_strict_and_valid_bash(image, case):
    bash = shutil.which("bash")
    for run in runs(parse(render(image, make_inputs(*CASES[case])))):
        assert run.startswith("set -eux; "), run[:60]
        assert "|| true" not in run and "||true" not in run
        result = subprocess.run([bash, "-n", "-o", "pipefail", "-c", run], capture_output=True, text=True, check=False)
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
    for command in parse(render(image, make_inputs(*CASES[case]))):
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
        inputs = make_inputs(arches, "wheel")
        commands = parse(render("stack", inputs))
        text = "\n".join(runs(commands))
        assert declared_args(commands)["VLLM_SOURCE"] == "wheel"
        assert declared_args(commands)["VLLM_WHEEL_INDEX_URL"] == inputs["vllm_wheel_index_url"]
        assert "VLLM_GIT_URL" not in "\n".join(c.original for c in commands)
        assert '"$VLLM_REF"' not in text  # nothing fetches vLLM's sources
        assert "setup.py" not in text and "VLLM_TARGET_DEVICE" not in text
        (install,) = [run for run in runs(commands) if "VLLM_WHEEL_INDEX_URL" in run]
        assert 'test "$VLLM_SOURCE" = wheel' in install
        # The base image's torch stays: the wheel is installed under the base image's constraints.
        assert (
            'pip install -c /opt/aic/constraints.txt --extra-index-url "$VLLM_WHEEL_INDEX_URL" "vllm==${VLLM_REF#v}"'
            in install
        )
        # The same vLLM series as a source build, applied (git apply -p1) in the site-packages dir holding vllm/.
        assert 'find_spec("vllm").origin' in install
        assert 'aic-apply-patches /opt/aic/patches/vllm "$site"' in install
        assert install.index("vllm==") < install.index("aic-apply-patches") < install.index("vllm._rocm_C")
        copies = [c.value for c in instructions(commands, "COPY")]
        assert ("patches/vllm/${VLLM_REF}/", "/opt/aic/patches/vllm/") in copies


def _vllm_build(commands):
    (build,) = [run for run in runs(commands) if "VLLM_TARGET_DEVICE=rocm" in run]
    return build


@pytest.mark.parametrize("arches", ["gfx950", "gfx942;gfx950", "gfx1151", "gfx90a;gfx942"])
def test_source_path_clones_forces_hip_patches_and_builds_for_its_arches(arches):
    inputs = make_inputs(arches, "source")
    commands = parse(render("stack", inputs))
    args = declared_args(commands)
    assert args["PYTORCH_ROCM_ARCH"] == inputs["arch_list"]
    assert args["VLLM_SOURCE"] == "source"
    assert args["VLLM_GIT_URL"] == "https://github.com/vllm-project/vllm.git"
    assert "VLLM_WHEEL_INDEX_URL" not in args
    build = _vllm_build(commands)
    assert 'test "$VLLM_SOURCE" = source' in build
    assert 'aic-fetch-src "$VLLM_GIT_URL" "$VLLM_REF" /opt/aic/src/vllm' in build
    assert "aic-apply-patches /opt/aic/patches/vllm /opt/aic/src/vllm" in build
    # FACTS build-stage order: shallow clone, HIP detection forced, patches, requirements, build.
    order = [
        "aic-fetch-src",
        "def _is_hip() -> bool:",
        "aic-apply-patches",
        "-c /opt/aic/constraints.txt -r requirements/rocm.txt",
        "pip wheel",
        "pip install --no-deps /tmp/vllm-dist/vllm-*.whl",
    ]
    positions = [build.index(part) for part in order]
    assert positions == sorted(positions), order
    assert 'jobs="$(aic-jobs)"' in build
    assert 'PYTORCH_ROCM_ARCH="$PYTORCH_ROCM_ARCH"' in build and 'MAX_JOBS="$jobs"' in build
    assert "nproc" not in build  # the bound comes from aic-jobs (BUILD_JOBS, or cores and memory), never inline
    assert "vllm==" not in build
    assert "command -v ccache" in build and "CCACHE_DIR=/tmp/aic-ccache" in build
    assert "rm -rf /opt/aic/src /tmp/vllm-dist /tmp/aic-ccache" in build  # no sources or cache left in the image
    assert expand("$PYTORCH_ROCM_ARCH", rocm_build_args(inputs)) == inputs["arch_list"]


def _sed_and_check(build):
    """The setup.py edit of the source build and its check, as two shell commands."""
    sed = re.search(r"sed -i '[^']*' setup\.py", build).group(0)
    check = re.search(r"grep -A1 '\^def _is_hip\(\) -> bool:\$' setup\.py .*?exit 1; \}", build).group(0)
    return sed, check


SETUP_PY = """VLLM_TARGET_DEVICE = envs.VLLM_TARGET_DEVICE


def _is_hip() -> bool:
    return (
        VLLM_TARGET_DEVICE == "cuda" or VLLM_TARGET_DEVICE == "rocm"
    ) and torch.version.hip is not None


def _is_tpu() -> bool:
    return VLLM_TARGET_DEVICE == "tpu"
"""


def test_source_path_forces_hip_detection_in_setup_py(tmp_path):
    """Run the template's sed and its check on a setup.py shaped like vLLM's: _is_hip() returns True for rocm."""
    sed, check = _sed_and_check(_vllm_build(parse(render("stack", make_inputs("gfx950", "source")))))
    (tmp_path / "setup.py").write_text(SETUP_PY)
    script = f"set -eu -o pipefail; {sed}; {check}"
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    namespace = {}
    source = (tmp_path / "setup.py").read_text()
    assert source.count('if VLLM_TARGET_DEVICE == "rocm":') == 1
    for device, hip in (("rocm", True), ("cuda", None)):
        namespace = {"envs": type("envs", (), {"VLLM_TARGET_DEVICE": device}), "torch": _no_hip_torch()}
        exec(compile(source, "setup.py", "exec"), namespace)
        # Even with torch.version.hip unset, VLLM_TARGET_DEVICE=rocm is a HIP build; other targets are unchanged.
        assert namespace["_is_hip"]() is bool(hip)


def _no_hip_torch():
    version = type("version", (), {"hip": None})
    return type("torch", (), {"version": version})


def test_source_path_fails_when_setup_py_has_no_is_hip(tmp_path):
    sed, check = _sed_and_check(_vllm_build(parse(render("stack", make_inputs("gfx950", "source")))))
    (tmp_path / "setup.py").write_text("def _is_cuda() -> bool:\n    return True\n")
    script = f"set -eu -o pipefail; VLLM_REF=v9; {sed}; {check}"
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "vLLM v9: no def _is_hip() in setup.py to force HIP detection" in result.stderr


def test_spur_render_builds_vllm_from_source_with_every_patch_series():
    """The SPUR render (gfx950, source): both vLLM patches and the whole LMCache series reach the build, each as its
    series directory (globbed by aic-apply-patches, no patch named in the Dockerfile)."""
    inputs = make_inputs("gfx950", "source")
    commands = parse(render("stack", inputs))
    args = dict(declared_args(commands), **rocm_build_args(inputs))
    assert args["VLLM_SOURCE"] == "source"
    text = "\n".join(runs(commands))
    assert "aic-apply-patches /opt/aic/patches/vllm /opt/aic/src/vllm" in text
    assert "aic-apply-patches /opt/aic/patches/lmcache /opt/aic/src/lmcache" in text
    copies = {expand(src, args): dest for src, dest in (c.value for c in instructions(commands, "COPY"))}
    assert copies == {
        "patches/vllm/v0.26.0/": "/opt/aic/patches/vllm/",
        "patches/lmcache/v0.5.2/": "/opt/aic/patches/lmcache/",
    }
    repo = HERE.parents[2]
    vllm = sorted(p.name for p in (repo / "patches/vllm/v0.26.0").glob("*.patch"))
    assert [name[:3] for name in vllm][:2] == ["01-", "02-"]
    assert sorted((repo / "patches/lmcache/v0.5.2").glob("*.patch"))
    assert not re.search(r"\d\d-[\w-]+\.patch", render("stack", inputs))  # series are globbed, never listed


def test_lmcache_is_built_for_hip_with_its_patches_and_cuda_packages_removed(case):
    commands = parse(render("stack", make_inputs(*CASES[case])))
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
    inputs = make_inputs(*CASES[case])
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
        ["bash", "-o", "pipefail", "-c", run.replace("/opt/aic", str(root))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in ("aic-env", "aic-jobs", "aic-fetch-src", "aic-apply-patches"):
        script = root / "bin" / name
        assert os.access(script, os.X_OK)
        assert script.read_text().startswith("#!/bin/sh\nset -eu\n")
        assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0, name
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


# The vllm 0.26.0 wheel unpacked by tests/unit/patches (when that ran here; nothing is downloaded for this test).
VLLM_WHEEL_TREE = HERE.parents[2] / ".work" / "test-cache" / "sources" / "vllm-0.26.0"


@pytest.mark.skipif(not (VLLM_WHEEL_TREE / "vllm").is_dir(), reason="no unpacked vllm 0.26.0 wheel in .work/test-cache")
def test_wheel_path_applies_the_whole_vllm_series_to_site_packages(helpers, tmp_path):
    """What the wheel path's RUN does after pip: the repository's vLLM series (01, 02, ...) applied with
    aic-apply-patches in the directory that holds the installed vllm/ package; none is skipped."""
    site = tmp_path / "site-packages"
    shutil.copytree(VLLM_WHEEL_TREE / "vllm" / "platforms", site / "vllm" / "platforms")
    series = HERE.parents[2] / "patches" / "vllm" / "v0.26.0"
    result = _sh(helpers, "aic-apply-patches", str(series), str(site))
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in series.glob("*.patch"))
    assert re.findall(r"aic-apply-patches: \S+/(\S+\.patch)", result.stdout) == names
    assert f"{len(names)} patch(es) applied" in result.stdout
    assert names[:2] and names[0].startswith("01-") and names[1].startswith("02-")
    for name in ("__init__.py", "rocm.py"):  # 01 and 02 changed the installed files
        original = (VLLM_WHEEL_TREE / "vllm" / "platforms" / name).read_text()
        assert (site / "vllm" / "platforms" / name).read_text() != original, name


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


@pytest.mark.parametrize("value", ["4", "1", "128"])
def test_jobs(helpers, value):
    result = _sh(helpers, "aic-jobs", env={"BUILD_JOBS": value, "AIC_JOBS_MEMINFO": "/nonexistent"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == value + "\n"  # an explicit BUILD_JOBS is used as given


NPROC = int(subprocess.check_output(["nproc"], text=True))


@pytest.mark.parametrize(
    "available_gib, expected",
    [
        (1024, NPROC),  # plenty of memory: one job per core
        (8, min(NPROC, 2)),  # one job per 4 GiB of available memory
        (4, 1),
        (1, 1),  # never below one job
        (None, NPROC),  # no MemAvailable line: the core count
    ],
)
@pytest.mark.parametrize("value", ["", None])
def test_jobs_default_is_bounded_by_cores_and_memory(helpers, tmp_path, value, available_gib, expected):
    meminfo = tmp_path / "meminfo"
    lines = ["MemTotal:       2113301244 kB"]
    if available_gib is not None:
        lines.append(f"MemAvailable:   {available_gib * 1024 * 1024} kB")
    meminfo.write_text("\n".join(lines + ["Buffers:          123456 kB"]) + "\n")
    env = dict(os.environ, AIC_JOBS_MEMINFO=str(meminfo))
    env.pop("BUILD_JOBS", None)
    if value is not None:
        env["BUILD_JOBS"] = value
    result = subprocess.run([str(helpers / "bin" / "aic-jobs")], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{expected}\n"
    assert f"aic-jobs: BUILD_JOBS unset: {expected} job(s)" in result.stderr


def test_jobs_default_reads_this_host(helpers):
    env = dict(os.environ)
    env.pop("BUILD_JOBS", None)
    result = subprocess.run([str(helpers / "bin" / "aic-jobs")], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert 1 <= int(result.stdout) <= NPROC


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
