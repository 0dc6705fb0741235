"""Tests for plugins/filter/rocm.py: rocm_build_matrix, rocm_build_args and rocm_image_tag."""

from __future__ import annotations

import copy
import hashlib
import json
import re

import pytest
from ansible.errors import AnsibleFilterError
from rocm_inputs import WHEEL_INDEX, make_inputs

from ansible_collections.aic.stack.plugins.filter.rocm import (
    BUILD_ARGS,
    KNOWN_ARCHES,
    FilterModule,
    rocm_build_args,
    rocm_build_matrix,
    rocm_image_tag,
)

DOCKER_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def test_filter_module_exposes_the_filters():
    assert FilterModule().filters() == {
        "rocm_build_matrix": rocm_build_matrix,
        "rocm_build_args": rocm_build_args,
        "rocm_image_tag": rocm_image_tag,
    }


# -- rocm_build_matrix: the wheel path (aic_vllm_install resolved to wheel by the plan) ------------------------


@pytest.mark.parametrize(
    "arches, expected",
    [
        (["gfx942", "gfx950"], ["gfx942", "gfx950"]),
        (["gfx950"], ["gfx950"]),
        (["gfx942"], ["gfx942"]),
        ("gfx942;gfx950", ["gfx942", "gfx950"]),
        ("gfx950,gfx942", ["gfx942", "gfx950"]),
        (" GFX950 ; gfx942; ", ["gfx942", "gfx950"]),
        (["gfx950", "gfx942", "gfx950"], ["gfx942", "gfx950"]),
        (("gfx950",), ["gfx950"]),
        (["gfx942;gfx950"], ["gfx942", "gfx950"]),
    ],
)
def test_matrix_wheel_set_is_one_wheel_build(arches, expected):
    assert rocm_build_matrix(arches, "wheel") == [
        {
            "arches": expected,
            "arch_list": ";".join(expected),
            "vllm_source": "wheel",
            "suffix": "-".join(expected),
        }
    ]


@pytest.mark.parametrize("split", [True, False])
def test_matrix_wheel_set_ignores_consumer_split(split):
    assert [b["vllm_source"] for b in rocm_build_matrix("gfx942;gfx950", "wheel", consumer_split=split)] == ["wheel"]


@pytest.mark.parametrize("arches", ["gfx1151", "gfx90a", "gfx942;gfx1151", "gfx90a;gfx942;gfx950", "gfx950;gfx1201"])
def test_matrix_wheel_needs_every_arch_inside_the_wheel_arches(arches):
    with pytest.raises(
        AnsibleFilterError, match=r"^aic_vllm_install: wheel needs aic_rocm_arches inside gfx942, gfx950; gfx"
    ):
        rocm_build_matrix(arches, "wheel")


@pytest.mark.parametrize("value", ["auto", "pip", "", None, True])
def test_matrix_takes_a_resolved_install_only(value):
    with pytest.raises(AnsibleFilterError, match=r"^aic_vllm_install: rocm_build_matrix needs wheel or source, got "):
        rocm_build_matrix("gfx950", value)
    if value == "auto":
        with pytest.raises(AnsibleFilterError, match=r"aic_plan\.images\.rocm\.vllm_install"):
            rocm_build_matrix("gfx950", value)


# -- rocm_build_matrix: source builds ----------------------------------------------------------


def _summary(builds):
    return [(b["arch_list"], b["vllm_source"], b["suffix"]) for b in builds]


@pytest.mark.parametrize(
    "arches, split, expected",
    [
        ("gfx1151", True, [("gfx1151", "source", "gfx1151")]),
        ("gfx90a", True, [("gfx90a", "source", "gfx90a")]),
        # A datacenter arch outside the wheel set makes the whole datacenter group a source build.
        ("gfx90a;gfx942;gfx950", True, [("gfx90a;gfx942;gfx950", "source", "gfx90a-gfx942-gfx950")]),
        # Any set that is not entirely inside {gfx942, gfx950} builds from source, wheel arches included.
        ("gfx942;gfx1151", True, [("gfx942", "source", "gfx942"), ("gfx1151", "source", "gfx1151")]),
        ("gfx942;gfx1151", False, [("gfx942;gfx1151", "source", "gfx942-gfx1151")]),
        # One image per consumer arch, datacenter arches together, in generation order.
        (
            "gfx1201;gfx1151;gfx90a;gfx1100;gfx950;gfx942",
            True,
            [
                ("gfx90a;gfx942;gfx950", "source", "gfx90a-gfx942-gfx950"),
                ("gfx1100", "source", "gfx1100"),
                ("gfx1151", "source", "gfx1151"),
                ("gfx1201", "source", "gfx1201"),
            ],
        ),
        (
            "gfx1201;gfx1151;gfx90a",
            False,
            [("gfx90a;gfx1151;gfx1201", "source", "gfx90a-gfx1151-gfx1201")],
        ),
        ("gfx1100;gfx1101", True, [("gfx1100", "source", "gfx1100"), ("gfx1101", "source", "gfx1101")]),
        ("gfx1100;gfx1101", False, [("gfx1100;gfx1101", "source", "gfx1100-gfx1101")]),
        ("gfx1150", "yes", [("gfx1150", "source", "gfx1150")]),
        ("gfx1150;gfx1200", "no", [("gfx1150;gfx1200", "source", "gfx1150-gfx1200")]),
    ],
)
def test_matrix_source_builds(arches, split, expected):
    assert _summary(rocm_build_matrix(arches, "source", consumer_split=split)) == expected


@pytest.mark.parametrize(
    "arches, expected",
    [
        ("gfx950", [("gfx950", "source", "gfx950")]),  # SPUR
        ("gfx942;gfx950", [("gfx942;gfx950", "source", "gfx942-gfx950")]),
        ("gfx942", [("gfx942", "source", "gfx942")]),
    ],
)
@pytest.mark.parametrize("split", [True, False])
def test_matrix_source_on_the_wheel_arches_is_one_source_build(arches, expected, split):
    assert _summary(rocm_build_matrix(arches, "source", consumer_split=split)) == expected


def test_matrix_default_splits_consumer_arches():
    assert len(rocm_build_matrix("gfx1100;gfx1151", "source")) == 2


def test_matrix_every_known_arch():
    builds = rocm_build_matrix(list(KNOWN_ARCHES), "source")
    assert builds[0]["arches"] == ["gfx90a", "gfx942", "gfx950"]
    assert [b["arch_list"] for b in builds[1:]] == [a for a in KNOWN_ARCHES if a.startswith(("gfx11", "gfx12"))]
    assert {b["vllm_source"] for b in builds} == {"source"}
    for build in builds:
        assert build["arches"] == build["arch_list"].split(";")
        assert build["suffix"] == "-".join(build["arches"])


def test_matrix_does_not_mutate_its_input():
    arches = ["gfx950", "gfx942"]
    rocm_build_matrix(arches, "wheel")
    rocm_build_matrix(arches, "source")
    assert arches == ["gfx950", "gfx942"]


# -- rocm_build_matrix: bad input --------------------------------------------------------------


@pytest.mark.parametrize("arches", ["", "  ", ";", " ; , ", [], (), None, ["", " "]])
def test_matrix_empty_set(arches):
    with pytest.raises(AnsibleFilterError, match=r"^aic_rocm_arches: empty arch set$"):
        rocm_build_matrix(arches, "source")


@pytest.mark.parametrize(
    "arches, named",
    [
        ("gfx908", "'gfx908'"),
        ("gfx942;gfx1030", "'gfx1030'"),
        (["gfx950", "mi300x"], "'mi300x'"),
        ("gfx942:xnack+", "'gfx942:xnack+'"),
        ("gfx9000;gfx1", "'gfx1', 'gfx9000'"),
    ],
)
def test_matrix_unknown_arch_names_it_and_the_known_list(arches, named):
    with pytest.raises(AnsibleFilterError) as excinfo:
        rocm_build_matrix(arches, "source")
    message = str(excinfo.value)
    assert message.startswith(f"aic_rocm_arches: unknown arch {named} ")
    assert f"(known: {', '.join(KNOWN_ARCHES)})" in message


@pytest.mark.parametrize("arches", [942, 9.5, {"gfx942": True}, True])
def test_matrix_rejects_non_list_input(arches):
    with pytest.raises(AnsibleFilterError, match=r"^aic_rocm_arches: expected a list or a ';'/','-separated string"):
        rocm_build_matrix(arches, "source")


@pytest.mark.parametrize("arches", [["gfx942", 950], [None], [["gfx942"]]])
def test_matrix_rejects_non_string_items(arches):
    with pytest.raises(AnsibleFilterError, match=r"^aic_rocm_arches: expected arch names, got "):
        rocm_build_matrix(arches, "source")


@pytest.mark.parametrize("split", ["maybe", None, 2, [True]])
def test_matrix_rejects_a_non_boolean_consumer_split(split):
    with pytest.raises(AnsibleFilterError, match=r"^aic_rocm_arches: consumer_split must be a boolean"):
        rocm_build_matrix("gfx1151", "source", consumer_split=split)


# -- rocm_build_args ---------------------------------------------------------------------------


def test_build_args_of_the_base_image():
    inputs = make_inputs("gfx942;gfx950")
    assert rocm_build_args(inputs, "base") == {
        "ROCM_BASE_IMAGE": "rocm/dev-ubuntu-24.04:7.14.0-full",
        "ROCM_VERSION": "7.14.0",
        "PYTORCH_ROCM_ARCH": "gfx942;gfx950",
        "TORCH_INDEX_URL": "https://repo.amd.com/rocm/whl-multi-arch/",
        "ROCM_SDK_INDEX_URL": "https://repo.amd.com/rocm/whl-multi-arch/",
        "TORCH_VERSION": "2.12.0",
        "NIXL_REF": "v1.3.2",
    }


def test_build_args_of_the_stack_image_on_the_wheel_path():
    inputs = make_inputs("gfx950")
    assert (
        rocm_build_args(inputs)
        == rocm_build_args(inputs, "stack")
        == {
            "AIC_BASE_IMAGE": inputs["deps_image"],
            "AIC_VERSION": "0.1.0",
            "ROCM_VERSION": "7.14.0",
            "PYTORCH_ROCM_ARCH": "gfx950",
            "VLLM_SOURCE": "wheel",
            "VLLM_REF": "v0.26.0",
            "VLLM_WHEEL_INDEX_URL": WHEEL_INDEX,
            "LMCACHE_REF": "v0.5.2",
            "NIXL_REF": "v1.3.2",
        }
    )


def test_build_args_of_the_stack_image_on_the_source_path_have_no_wheel_index():
    inputs = make_inputs("gfx1151")
    args = rocm_build_args(inputs)
    assert args["VLLM_SOURCE"] == "source"
    assert args["PYTORCH_ROCM_ARCH"] == "gfx1151"
    assert "VLLM_WHEEL_INDEX_URL" not in args
    del inputs["vllm_wheel_index_url"]  # not needed on the source path
    assert rocm_build_args(inputs) == args


@pytest.mark.parametrize("image", ["base", "stack"])
def test_build_args_are_the_declared_mapping(image):
    inputs = make_inputs("gfx950")
    args = rocm_build_args(inputs, image)
    assert set(args) == set(BUILD_ARGS[image])
    for arg, key in BUILD_ARGS[image].items():
        assert args[arg] == inputs[key]


def test_build_args_ignore_unrelated_and_other_image_keys():
    inputs = make_inputs("gfx950", unrelated="x")
    base_only = {k: inputs[k] for k in set(BUILD_ARGS["base"].values()) | {"extra_ca_certs"}}
    assert rocm_build_args(base_only, "base") == rocm_build_args(inputs, "base")
    stack_only = {k: inputs[k] for k in BUILD_ARGS["stack"].values()}
    assert rocm_build_args(stack_only) == rocm_build_args(inputs)


@pytest.mark.parametrize(
    "image, key",
    [("base", key) for key in sorted(set(BUILD_ARGS["base"].values()))]
    + [("stack", key) for key in sorted(set(BUILD_ARGS["stack"].values()))],
)
def test_build_args_missing_input(image, key):
    inputs = make_inputs("gfx950")
    del inputs[key]
    with pytest.raises(
        AnsibleFilterError, match=rf"^_image_build_rocm: missing build input\(s\) {key} for the {image}"
    ):
        rocm_build_args(inputs, image)
    inputs[key] = None
    with pytest.raises(AnsibleFilterError, match=r"missing build input"):
        rocm_build_args(inputs, image)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("torch_version", 2.12, r"^aic_torch_version: expected a string, got float 2\.12 \(quote it in YAML\)$"),
        ("version", 1, r"^_image_build_rocm\.version: expected a string, got int 1 \(quote it in YAML\)$"),
        ("vllm_ref", True, r"^aic_vllm_ref: expected a string, got bool True$"),
        ("lmcache_ref", ["v0.5.2"], r"^aic_lmcache_ref: expected a string, got list"),
        ("nixl_ref", "", r"^aic_nixl_ref: must not be empty$"),
        ("nixl_ref", " v1.3.2", r"^aic_nixl_ref: ' v1\.3\.2' has leading or trailing whitespace$"),
        ("vllm_ref", "v0.26.0; rm -rf /", r"^aic_vllm_ref: 'v0\.26\.0; rm -rf /' is not a git ref"),
        ("vllm_ref", "-v0.26.0", r"is not a git ref"),
        ("lmcache_ref", "a..b", r"^aic_lmcache_ref: 'a\.\.b' is not a git ref"),
        ("lmcache_ref", "dev/", r"is not a git ref"),
        ("lmcache_ref", "x.lock", r"is not a git ref"),
        ("torch_index_url", "ftp://x/", r"^aic_torch_index_url: 'ftp://x/' is not an http\(s\) URL"),
        ("torch_index_url", "https://a b/", r"is not an http\(s\) URL"),
        ("sdk_index_url", 'https://x/"', r"^aic_rocm_sdk_index_url: .* is not an http\(s\) URL"),
        ("vllm_wheel_index_url", "https://x/$HOME", r"^aic_vllm_wheel_index_url: .* is not an http\(s\) URL"),
        ("base_image", "rocm/dev ubuntu", r"^aic_rocm_base_image: 'rocm/dev ubuntu' is not an image reference$"),
        ("deps_image", "a:b'c", r"^_image_build_rocm\.deps_image: .* is not an image reference$"),
        ("rocm_version", "7.14 0", r"^aic_rocm_version: '7\.14 0' is not a version$"),
        ("vllm_source", "pip", r"^_image_build_rocm\.vllm_source: 'pip' is not one of wheel, source$"),
    ],
)
def test_build_args_reject_bad_values(key, value, message):
    inputs = make_inputs("gfx950")
    inputs[key] = value
    image = "base" if key in ("torch_version", "torch_index_url", "sdk_index_url", "base_image") else "stack"
    with pytest.raises(AnsibleFilterError, match=message):
        rocm_build_args(inputs, image)


def test_build_args_wheel_path_only_for_wheel_arches():
    inputs = make_inputs("gfx1151", vllm_source="wheel")
    with pytest.raises(
        AnsibleFilterError, match=r"^aic_rocm_arches: the prebuilt vLLM wheel covers only gfx942, gfx950; "
    ):
        rocm_build_args(inputs)


@pytest.mark.parametrize("ref", ["main", "8a3f2c1d", "releases/v0.26"])
def test_build_args_wheel_path_needs_a_release(ref):
    inputs = make_inputs("gfx950", vllm_ref=ref)
    with pytest.raises(AnsibleFilterError, match=r"^aic_vllm_ref: .* is not a release \(like v0\.26\.0\)"):
        rocm_build_args(inputs)
    inputs["vllm_source"] = "source"
    assert rocm_build_args(inputs)["VLLM_REF"] == ref


@pytest.mark.parametrize("arch_list", ["gfx950;gfx942", "GFX950", "gfx942,gfx950", ["gfx950"], "gfx950;"])
def test_build_args_need_the_canonical_arch_list(arch_list):
    inputs = make_inputs("gfx942;gfx950", arch_list=arch_list)
    with pytest.raises(AnsibleFilterError, match=r"^aic_rocm_arches: arch_list must be the canonical form"):
        rocm_build_args(inputs, "base")


def test_build_args_arch_list_errors_come_from_the_matrix_parser():
    with pytest.raises(AnsibleFilterError, match=r"^aic_rocm_arches: unknown arch 'gfx908'"):
        rocm_build_args(make_inputs("gfx950", arch_list="gfx908"), "base")
    with pytest.raises(AnsibleFilterError, match=r"^aic_rocm_arches: empty arch set$"):
        rocm_build_args(make_inputs("gfx950", arch_list=""), "base")


@pytest.mark.parametrize(
    "certs", [["corp.pem"], ["/etc/ssl/corp.crt"], "corp.crt", None, [1], ["../x.crt"], ["a b.crt"]]
)
def test_build_args_reject_bad_ca_cert_names(certs):
    with pytest.raises(AnsibleFilterError, match=r"^aic_extra_ca_certs: expected a list of \.crt file basenames"):
        rocm_build_args(make_inputs("gfx950", extra_ca_certs=certs), "base")


def test_build_args_accept_ca_cert_basenames():
    assert rocm_build_args(make_inputs("gfx950", extra_ca_certs=["corp-root.crt", "proxy_2.crt"]), "base")


def test_build_args_reject_bad_image_and_inputs():
    with pytest.raises(AnsibleFilterError, match=r"^rocm image must be one of base, stack, got 'runtime'$"):
        rocm_build_args(make_inputs("gfx950"), "runtime")
    with pytest.raises(AnsibleFilterError, match=r"^_image_build_rocm: expected a dict of build inputs, got list$"):
        rocm_build_args([], "base")


# -- rocm_image_tag ----------------------------------------------------------------------------


def test_tag_format_of_the_stack_image():
    tag = rocm_image_tag(make_inputs("gfx950"), None)
    assert re.fullmatch(
        r"0\.1\.0-rocm7\.14\.0-vllm0\.26\.0-wheel-lmcache0\.5\.2-nixl1\.3\.2-gfx950-[0-9a-f]{12}", tag
    ), tag
    tag = rocm_image_tag(make_inputs("gfx950", "source"), None)
    assert re.fullmatch(
        r"0\.1\.0-rocm7\.14\.0-vllm0\.26\.0-source-lmcache0\.5\.2-nixl1\.3\.2-gfx950-[0-9a-f]{12}", tag
    ), tag


def test_tag_format_of_the_base_image():
    tag = rocm_image_tag(make_inputs("gfx942;gfx950"), image="base")
    assert re.fullmatch(r"rocm7\.14\.0-torch2\.12\.0-nixl1\.3\.2-gfx942-gfx950-[0-9a-f]{12}", tag), tag


def test_tag_hash_is_sha256_of_exactly_the_build_args_and_content_inputs():
    inputs = make_inputs("gfx950", files={"patches/vllm/v0.26.0/0001-a.patch": "ab" * 32}, dockerfile="cd" * 32)
    inputs["base_image_id"] = "sha256:" + "ef" * 32
    payload = {
        "image": "stack",
        "args": rocm_build_args(inputs),
        "files": inputs["files"],
        "dockerfile": inputs["dockerfile"],
        "base_image_id": inputs["base_image_id"],
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    assert rocm_image_tag(inputs).endswith("-" + hashlib.sha256(blob).hexdigest()[:12])
    assert rocm_image_tag(inputs, length=20).endswith("-" + hashlib.sha256(blob).hexdigest()[:20])


def test_tag_is_deterministic_and_differs_per_image():
    inputs = make_inputs("gfx950")
    assert rocm_image_tag(inputs) == rocm_image_tag(copy.deepcopy(inputs))
    assert rocm_image_tag(inputs, image="base").rsplit("-", 1)[1] != rocm_image_tag(inputs).rsplit("-", 1)[1]


def _changed(value):
    if value.startswith("https://"):
        return value + "other/"
    if value.startswith("v"):
        return value + ".1"
    if value in ("wheel", "source"):
        return "source" if value == "wheel" else "wheel"
    return value + "1"


@pytest.mark.parametrize("image", ["base", "stack"])
@pytest.mark.parametrize("arches", ["gfx950", "gfx1151"])
def test_tag_changes_when_any_build_arg_changes(image, arches):
    inputs = make_inputs(arches)
    tag = rocm_image_tag(inputs, image=image)
    keys = {key for arg, key in BUILD_ARGS[image].items() if arg in rocm_build_args(inputs, image)}
    assert keys
    for key in sorted(keys):
        changed = copy.deepcopy(inputs)
        if key == "arch_list":
            changed["arch_list"] = "gfx942;gfx950" if arches == "gfx950" else "gfx1100"
        elif key == "vllm_source":
            changed = make_inputs("gfx950", vllm_source="source")
            assert rocm_image_tag(changed, image=image) != rocm_image_tag(make_inputs("gfx950"), image=image)
            continue
        else:
            changed[key] = _changed(inputs[key])
        assert rocm_build_args(changed, image) != rocm_build_args(inputs, image), key
        assert rocm_image_tag(changed, image=image) != tag, key


@pytest.mark.parametrize("image", ["base", "stack"])
def test_tag_cannot_be_influenced_by_a_value_that_is_not_a_build_arg(image):
    """The upstream bug: VLLM_REF changed the tag but was never passed as a build arg."""
    inputs = make_inputs("gfx950")
    tag = rocm_image_tag(inputs, image=image)
    used = set(BUILD_ARGS[image].values())
    unused = [key for key in inputs if key not in used]
    assert unused  # the other image's inputs at least
    for key in unused:
        changed = copy.deepcopy(inputs)
        changed[key] = ["x.crt"] if key == "extra_ca_certs" else _changed(str(inputs[key]))
        assert rocm_image_tag(changed, image=image) == tag, key
    # Nor can keys nobody reads, and the tag of the dict equals the tag of its build-arg inputs alone.
    assert rocm_image_tag(dict(inputs, VLLM_REF="v9.9.9", vllm_version="9.9.9"), image=image) == tag
    only_args = {key: inputs[key] for key in used if key in inputs}
    assert rocm_image_tag(only_args, image=image) == tag


def test_tag_on_the_source_path_ignores_the_wheel_index():
    inputs = make_inputs("gfx1151")
    changed = dict(inputs, vllm_wheel_index_url="https://elsewhere.example/")
    assert rocm_image_tag(changed) == rocm_image_tag(inputs)


@pytest.mark.parametrize(
    "extra",
    [
        {"files": {"patches/vllm/v0.26.0/0001-a.patch": "ab" * 32}},
        {"dockerfile": "cd" * 32},
        {"base_image_id": "sha256:" + "ef" * 32},
    ],
)
def test_tag_changes_with_content_inputs(extra):
    inputs = make_inputs("gfx950")
    assert rocm_image_tag(dict(inputs, **extra)) != rocm_image_tag(inputs)


def test_tag_changes_when_a_patch_changes_or_is_added():
    files = {"patches/vllm/v0.26.0/0001-a.patch": "ab" * 32}
    inputs = make_inputs("gfx950", files=files)
    tag = rocm_image_tag(inputs)
    assert rocm_image_tag(dict(inputs, files={"patches/vllm/v0.26.0/0001-a.patch": "ac" * 32})) != tag
    assert rocm_image_tag(dict(inputs, files=dict(files, **{"patches/vllm/v0.26.0/0002-b.patch": "ab" * 32}))) != tag
    assert rocm_image_tag(dict(inputs, files=None)) == rocm_image_tag(dict(inputs, files={}))


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"files": ["0001-a.patch"]}, r"^_image_build_rocm\.files: expected a dict"),
        ({"files": {"a.patch": "not-hex"}}, r"^_image_build_rocm\.files: expected a dict"),
        ({"files": {1: "ab" * 32}}, r"^_image_build_rocm\.files: expected a dict"),
        ({"dockerfile": "FROM x"}, r"^_image_build_rocm\.dockerfile: expected the sha256"),
        ({"base_image_id": 5}, r"^_image_build_rocm\.base_image_id: expected the image id"),
    ],
)
def test_tag_rejects_bad_content_inputs(extra, message):
    with pytest.raises(AnsibleFilterError, match=message):
        rocm_image_tag(dict(make_inputs("gfx950"), **extra))


def test_tag_prefix_fields_choose_the_readable_part():
    inputs = make_inputs("gfx942;gfx950")
    tag = rocm_image_tag(inputs, ["VLLM_SOURCE", "PYTORCH_ROCM_ARCH"])
    assert re.fullmatch(r"wheel-gfx942-gfx950-[0-9a-f]{12}", tag)
    assert tag.endswith(rocm_image_tag(inputs).rsplit("-", 1)[1])  # the prefix is not part of the hash
    assert re.fullmatch(r"[0-9a-f]{12}", rocm_image_tag(inputs, []))


@pytest.mark.parametrize(
    "image, field",
    [
        ("stack", "TORCH_VERSION"),  # a base-image build arg: the stack image is not built with it
        ("base", "VLLM_REF"),
        ("stack", "BUILD_JOBS"),
        ("stack", "AIC_INPUTS"),
        ("stack", "vllm_ref"),
        ("stack", "AIC_BASE_IMAGE"),  # a build arg, but not one a tag can show readably
    ],
)
def test_tag_prefix_fields_must_be_build_args(image, field):
    with pytest.raises(
        AnsibleFilterError, match=rf"^rocm_image_tag: '{field}' is not a build arg of the {image} image"
    ):
        rocm_image_tag(make_inputs("gfx950"), [field], image=image)


def test_tag_prefix_on_the_source_path_rejects_the_wheel_index():
    with pytest.raises(AnsibleFilterError, match=r"'VLLM_WHEEL_INDEX_URL' is not a build arg"):
        rocm_image_tag(make_inputs("gfx1151"), ["VLLM_WHEEL_INDEX_URL"])


@pytest.mark.parametrize("fields", ["AIC_VERSION", {"AIC_VERSION": 1}, 5])
def test_tag_prefix_fields_must_be_a_list(fields):
    with pytest.raises(AnsibleFilterError, match=r"^rocm_image_tag: prefix_fields must be a list"):
        rocm_image_tag(make_inputs("gfx950"), fields)


@pytest.mark.parametrize(
    "overrides, part",
    [
        ({"vllm_ref": "releases/v0.26", "vllm_source": "source"}, "-vllm_releases_v0.26-"),
        ({"vllm_ref": "8a3f2c1d", "vllm_source": "source"}, "-vllm8a3f2c1d-"),
        ({"vllm_ref": "main", "vllm_source": "source"}, "-vllm_main-"),
        ({"lmcache_ref": "v0.5.2+aic.1"}, "-lmcache0.5.2_aic.1-"),
        ({"nixl_ref": "1.3.2"}, "-nixl1.3.2-"),
        ({"rocm_version": "7.14.0rc1"}, "-rocm7.14.0rc1-"),
    ],
)
def test_tag_prefix_is_sanitised(overrides, part):
    tag = rocm_image_tag(make_inputs("gfx950", **overrides))
    assert part in tag
    assert DOCKER_TAG_RE.match(tag)


def test_tag_never_exceeds_docker_limits():
    long_ref = "feature/" + "x" * 190
    inputs = make_inputs("gfx950", vllm_source="source", vllm_ref=long_ref, lmcache_ref=long_ref)
    tag = rocm_image_tag(inputs)
    assert len(tag) <= 128
    assert DOCKER_TAG_RE.match(tag)
    assert re.search(r"[^-._]-[0-9a-f]{12}$", tag)
    assert rocm_image_tag(inputs) != rocm_image_tag(dict(inputs, lmcache_ref=long_ref + "y"))


def test_tag_of_every_build_of_a_matrix_is_distinct():
    tags = set()
    source = rocm_build_matrix(list(KNOWN_ARCHES), "source") + rocm_build_matrix("gfx942;gfx950", "source")
    for build in source + rocm_build_matrix("gfx942;gfx950", "wheel"):
        inputs = make_inputs("gfx950", arch_list=build["arch_list"], vllm_source=build["vllm_source"])
        tag = rocm_image_tag(inputs)
        assert tag.rsplit("-", 1)[0].endswith(build["suffix"])
        tags.add(tag)
    assert len(tags) == len(source) + 1  # gfx942;gfx950 from source and from the wheel differ
