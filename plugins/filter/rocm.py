# Copyright: aic.stack contributors
# Apache-2.0
"""Pure filters for the rocm flavour of roles/image_build: the arch build matrix, the build args and the image tag.

The templates Dockerfile.rocm-base.j2 and Dockerfile.rocm.j2 read one dict (``_image_build_rocm``, the "build
inputs"); :func:`rocm_build_args` turns that dict into the exact ``--build-arg`` set each image is built with, and
:func:`rocm_image_tag` derives the tag from that same set. A value that is not passed as a build arg therefore cannot
change the tag (upstream's VLLM_REF changed the tag but was never passed, so the tag described an image that was not
built).
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.filter.stack import content_tag
from ansible_collections.aic.stack.plugins.module_utils.coerce import (
    ANSIBLE_FALSE,
    ANSIBLE_TRUE,
    as_bool,
    as_choice,
    as_list,
    as_str,
)
from ansible_collections.aic.stack.plugins.module_utils.plan import INDEX_URL_RE, VLLM_RELEASE_RE, VLLM_WHEEL_ARCHES

ARCH_VAR = "aic_rocm_arches"
# Every arch the rocm flavour knows, in generation order (also the order builds list their arches in).
KNOWN_ARCHES = (
    "gfx90a",
    "gfx942",
    "gfx950",
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1150",
    "gfx1151",
    "gfx1200",
    "gfx1201",
)
# vLLM's prebuilt ROCm wheel covers only these arches: a wheel build's arch set must lie inside it. Whether a build
# uses the wheel is the plan's decision (aic_vllm_install, resolved to aic_plan.images.rocm.vllm_install by
# plugins/module_utils/plan.py's vllm_install_for); the matrix carries it as each build's vllm_source.
WHEEL_ARCHES = frozenset(VLLM_WHEEL_ARCHES)
VLLM_SOURCES = ("wheel", "source")
INSTALL_VAR = "aic_vllm_install"

# Build inputs (keys of _image_build_rocm) -> the public variable an error should name.
INPUT_VARS = {
    "version": "_image_build_rocm.version",
    "base_image": "aic_rocm_base_image",
    "rocm_version": "aic_rocm_version",
    "arch_list": ARCH_VAR,
    "vllm_source": "_image_build_rocm.vllm_source",
    "vllm_ref": "aic_vllm_ref",
    "vllm_wheel_index_url": "aic_vllm_wheel_index_url",
    "lmcache_ref": "aic_lmcache_ref",
    "nixl_ref": "aic_nixl_ref",
    "torch_index_url": "aic_torch_index_url",
    "sdk_index_url": "aic_rocm_sdk_index_url",
    "torch_version": "aic_torch_version",
    "extra_ca_certs": "aic_extra_ca_certs",
    "deps_image": "_image_build_rocm.deps_image",
}

# Build args of each image -> the build input they come from. Dockerfile.rocm-base.j2 / Dockerfile.rocm.j2 declare
# exactly these ARGs (plus BUILD_JOBS and AIC_INPUTS, which the role adds and which are deliberately not hashed:
# BUILD_JOBS does not change the image, AIC_INPUTS is the hash itself).
BUILD_ARGS = {
    "base": {
        "ROCM_BASE_IMAGE": "base_image",
        "ROCM_VERSION": "rocm_version",
        "PYTORCH_ROCM_ARCH": "arch_list",
        "TORCH_INDEX_URL": "torch_index_url",
        "ROCM_SDK_INDEX_URL": "sdk_index_url",
        "TORCH_VERSION": "torch_version",
        "NIXL_REF": "nixl_ref",
    },
    "stack": {
        "AIC_BASE_IMAGE": "deps_image",
        "AIC_VERSION": "version",
        "ROCM_VERSION": "rocm_version",
        "PYTORCH_ROCM_ARCH": "arch_list",
        "VLLM_SOURCE": "vllm_source",
        "VLLM_REF": "vllm_ref",
        "VLLM_WHEEL_INDEX_URL": "vllm_wheel_index_url",  # only on the wheel path
        "LMCACHE_REF": "lmcache_ref",
        "NIXL_REF": "nixl_ref",
    },
}
# Readable tag prefix: build arg -> label written before its value ("" = the value alone).
TAG_LABELS = {
    "AIC_VERSION": "",
    "ROCM_VERSION": "rocm",
    "TORCH_VERSION": "torch",
    "VLLM_REF": "vllm",
    "VLLM_SOURCE": "",
    "LMCACHE_REF": "lmcache",
    "NIXL_REF": "nixl",
    "PYTORCH_ROCM_ARCH": "",
}
DEFAULT_PREFIX_FIELDS = {
    "base": ("ROCM_VERSION", "TORCH_VERSION", "NIXL_REF", "PYTORCH_ROCM_ARCH"),
    # VLLM_SOURCE shows how vLLM got in (wheel or source): two images of one arch set and pins differ by it.
    "stack": ("AIC_VERSION", "ROCM_VERSION", "VLLM_REF", "VLLM_SOURCE", "LMCACHE_REF", "NIXL_REF", "PYTORCH_ROCM_ARCH"),
}
TAG_MAX = 128  # Docker's limit for a tag

_REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/+-]{0,199}$")
_RELEASE_RE = VLLM_RELEASE_RE
_URL_RE = INDEX_URL_RE
_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")
_VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}$")
_CERT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.crt$")
_HEX_RE = re.compile(r"^[0-9a-f]{8,128}$")
_SEPARATORS = ";, "  # between arch names: ';', ',' or any whitespace (coerce.split_text)

_KINDS = {
    "ref": (_REF_RE, "is not a git ref (tag, branch or commit)"),
    "url": (_URL_RE, "is not an http(s) URL without spaces, quotes or '$'"),
    "image": (_IMAGE_RE, "is not an image reference"),
    "version": (_VERSION_RE, "is not a version"),
}
INPUT_KINDS = {
    "version": "version",
    "base_image": "image",
    "rocm_version": "version",
    "vllm_ref": "ref",
    "vllm_wheel_index_url": "url",
    "lmcache_ref": "ref",
    "nixl_ref": "ref",
    "torch_index_url": "url",
    "sdk_index_url": "url",
    "torch_version": "version",
    "deps_image": "image",
}


def _is_consumer(arch):
    """Consumer (Radeon / Ryzen AI) arches: gfx11xx and gfx12xx."""
    return arch.startswith(("gfx11", "gfx12"))


def _parse_arches(arches, var=ARCH_VAR):
    """The arch set as a deduplicated list in KNOWN_ARCHES order; AnsibleFilterError on bad input."""
    names = as_list(
        var,
        arches,
        _SEPARATORS,
        error=AnsibleFilterError,
        types=(list, tuple, set, frozenset),
        none_empty=True,
        item_types=str,
        split_items=True,
        empty=False,
        messages={
            "type": "{field}: expected a list or a ';'/','-separated string of arches, got {type} {value!r}",
            "item": "{field}: expected arch names, got {type} {item!r}",
            "empty": "{field}: empty arch set",
        },
    )
    names = [name.lower() for name in names]
    unknown = sorted({name for name in names if name not in KNOWN_ARCHES})
    if unknown:
        raise AnsibleFilterError(
            f"{var}: unknown arch {', '.join(repr(n) for n in unknown)} (known: {', '.join(KNOWN_ARCHES)})"
        )
    return [arch for arch in KNOWN_ARCHES if arch in names]


def _build(arches, vllm_source):
    return {
        "arches": list(arches),
        "arch_list": ";".join(arches),
        "vllm_source": vllm_source,
        "suffix": "-".join(arches),
    }


def rocm_build_matrix(arches, vllm_install, consumer_split=True):
    """The list of rocm images to build for an arch set.

    ``arches`` is a list or a ';'/','-separated string ("gfx942;gfx950"). ``vllm_install`` is how vLLM gets into
    the images, as the plan resolved aic_vllm_install for this set (``aic_plan.images.rocm.vllm_install``):
    ``wheel`` gives ONE build that installs vLLM's prebuilt ROCm wheel (the set must lie inside {gfx942, gfx950});
    ``source`` builds vLLM from source: with ``consumer_split`` every consumer arch (gfx11xx, gfx12xx) gets its own
    image and the datacenter arches share one; without it the whole set is one image. ``auto`` is refused: the
    plan decides it (it needs the wheel index and the vLLM ref). Each build is ``{arches, arch_list, vllm_source,
    suffix}``, arches in generation order (gfx90a, gfx942, gfx950, gfx1100, ... gfx1201).
    """
    # Ansible's strict boolean(): y/yes/on/1/true/t, n/no/off/0/false/f, 1 and 0.
    split = as_bool(
        "consumer_split",
        consumer_split,
        error=AnsibleFilterError,
        binary=True,
        numbers=True,
        true=ANSIBLE_TRUE,
        false=ANSIBLE_FALSE,
        message=f"{ARCH_VAR}: {{field}} must be a boolean, got {{value!r}}",
    )
    hint = " (auto is resolved by the plan: pass aic_plan.images.rocm.vllm_install)" if vllm_install == "auto" else ""
    as_choice(
        INSTALL_VAR,
        vllm_install,
        VLLM_SOURCES,
        error=AnsibleFilterError,
        message=f"{{field}}: rocm_build_matrix needs {' or '.join(VLLM_SOURCES)}, got {{value!r}}{hint}",
    )
    selected = _parse_arches(arches)
    if vllm_install == "wheel":
        outside = [arch for arch in selected if arch not in WHEEL_ARCHES]
        if outside:
            raise AnsibleFilterError(
                f"{INSTALL_VAR}: wheel needs {ARCH_VAR} inside {', '.join(sorted(WHEEL_ARCHES))}; "
                f"{', '.join(outside)} must be built from source"
            )
        return [_build(selected, "wheel")]
    if not split:
        return [_build(selected, "source")]
    datacenter = [arch for arch in selected if not _is_consumer(arch)]
    builds = [_build(datacenter, "source")] if datacenter else []
    builds.extend(_build([arch], "source") for arch in selected if _is_consumer(arch))
    return builds


def _text(key, value):
    var = INPUT_VARS.get(key, f"_image_build_rocm.{key}")
    hint = " (quote it in YAML)" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
    value = as_str(
        var,
        value,
        error=AnsibleFilterError,
        strip="reject",
        empty=False,
        messages={"type": f"{{field}}: expected a string, got {{type}} {{value!r}}{hint}"},
    )
    kind = INPUT_KINDS.get(key)
    if kind:
        pattern, problem = _KINDS[kind]
        if not pattern.match(value) or (kind == "ref" and (".." in value or value.endswith(("/", ".lock")))):
            raise AnsibleFilterError(f"{var}: {value!r} {problem}")
    return value


def _validate(inputs, image):
    """The build-input values ``image`` uses, validated; AnsibleFilterError naming the variable otherwise."""
    if image not in BUILD_ARGS:
        raise AnsibleFilterError(f"rocm image must be one of {', '.join(BUILD_ARGS)}, got {image!r}")
    if not isinstance(inputs, dict):
        raise AnsibleFilterError(f"_image_build_rocm: expected a dict of build inputs, got {type(inputs).__name__}")
    keys = set(BUILD_ARGS[image].values())
    if image == "stack" and inputs.get("vllm_source") != "wheel":
        keys.discard("vllm_wheel_index_url")
    missing = sorted(key for key in keys if key not in inputs or inputs[key] is None)
    if missing:
        raise AnsibleFilterError(
            f"_image_build_rocm: missing build input(s) {', '.join(missing)} for the {image} image"
        )
    values = {}
    for key in sorted(keys):
        if key == "arch_list":
            canonical = ";".join(_parse_arches(inputs[key]))
            if inputs[key] != canonical:
                raise AnsibleFilterError(
                    f"{ARCH_VAR}: arch_list must be the canonical form {canonical!r} (use rocm_build_matrix's "
                    f"arch_list), got {inputs[key]!r}"
                )
            values[key] = canonical
        else:
            values[key] = _text(key, inputs[key])
    if "vllm_source" in values:
        as_choice("_image_build_rocm.vllm_source", values["vllm_source"], VLLM_SOURCES, error=AnsibleFilterError)
        if values["vllm_source"] == "wheel":
            outside = [a for a in values["arch_list"].split(";") if a not in WHEEL_ARCHES]
            if outside:
                raise AnsibleFilterError(
                    f"{ARCH_VAR}: the prebuilt vLLM wheel covers only {', '.join(sorted(WHEEL_ARCHES))}; "
                    f"{', '.join(outside)} must be built from source"
                )
            if not _RELEASE_RE.match(values["vllm_ref"]):
                raise AnsibleFilterError(
                    f"aic_vllm_ref: {values['vllm_ref']!r} is not a release (like v0.26.0); "
                    "the prebuilt wheel exists only for releases, build from source instead"
                )
    if image == "base":
        certs = inputs.get("extra_ca_certs", [])
        if not isinstance(certs, (list, tuple)) or not all(isinstance(c, str) and _CERT_RE.match(c) for c in certs):
            raise AnsibleFilterError(f"aic_extra_ca_certs: expected a list of .crt file basenames, got {certs!r}")
    return values


def rocm_build_args(inputs, image="stack"):
    """The ``--build-arg`` dict (name -> string) for the ``base`` or ``stack`` image, from the build inputs.

    Both templates declare one ARG per key (their defaults rendered from the same inputs) and read every pin from
    those ARGs, labels included. BUILD_JOBS and AIC_INPUTS are not part of it (see BUILD_ARGS).
    """
    values = _validate(inputs, image)
    return {arg: values[key] for arg, key in BUILD_ARGS[image].items() if key in values}


def _tag_part(arg, value):
    if arg == "PYTORCH_ROCM_ARCH":
        return value.replace(";", "-")
    if arg.endswith("_REF") and re.match(r"^v[0-9]", value):
        value = value[1:]
    value = re.sub(r"[^A-Za-z0-9_.]+", "_", value)
    label = TAG_LABELS[arg]
    if label and not value[:1].isdigit():
        label += "_"
    return label + value


def rocm_image_tag(build_inputs, prefix_fields=None, image="stack", length=12):
    """``<readable prefix>-<hash>`` for the ``base`` or ``stack`` image.

    The hash covers exactly :func:`rocm_build_args` of ``build_inputs`` plus three optional content inputs:
    ``files`` ({context path: sha256} of every file copied into the build context: patch series, CA certs),
    ``dockerfile`` (sha256 of the rendered Dockerfile) and ``base_image_id`` (the id of the FROM image). Any other key
    is ignored. ``prefix_fields`` lists build-arg names (default: the pins of that image); each must be one of its
    build args, so the readable part cannot describe something that was not passed either.
    """
    args = rocm_build_args(build_inputs, image)
    files = build_inputs.get("files") or {}
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and _HEX_RE.match(v) for k, v in files.items()
    ):
        raise AnsibleFilterError("_image_build_rocm.files: expected a dict of context path -> sha256 hex digest")
    dockerfile = build_inputs.get("dockerfile")
    if dockerfile is not None and not (isinstance(dockerfile, str) and _HEX_RE.match(dockerfile)):
        raise AnsibleFilterError("_image_build_rocm.dockerfile: expected the sha256 hex digest of the rendered file")
    base_image_id = build_inputs.get("base_image_id")
    if base_image_id is not None and not isinstance(base_image_id, str):
        raise AnsibleFilterError("_image_build_rocm.base_image_id: expected the image id string")
    digest = content_tag(
        {"image": image, "args": args, "files": files, "dockerfile": dockerfile, "base_image_id": base_image_id},
        length,
    )
    fields = DEFAULT_PREFIX_FIELDS[image] if prefix_fields is None else prefix_fields
    if isinstance(fields, str) or not isinstance(fields, (list, tuple)):
        raise AnsibleFilterError(f"rocm_image_tag: prefix_fields must be a list of build-arg names, got {fields!r}")
    parts = []
    for field in fields:
        if field not in args or field not in TAG_LABELS:
            usable = ", ".join(a for a in args if a in TAG_LABELS)
            raise AnsibleFilterError(
                f"rocm_image_tag: {field!r} is not a build arg of the {image} image that a tag can show (use {usable})"
            )
        parts.append(_tag_part(field, args[field]))
    prefix = "-".join(parts)[: TAG_MAX - len(digest) - 1].rstrip("-._")
    return f"{prefix}-{digest}" if prefix else digest


class FilterModule:
    def filters(self):
        return {
            "rocm_build_matrix": rocm_build_matrix,
            "rocm_build_args": rocm_build_args,
            "rocm_image_tag": rocm_image_tag,
        }
