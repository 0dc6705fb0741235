# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Parse what GPU probes print, for aic.stack.gpu_check.

Pure functions over text (or a sysfs directory): amd-smi / rocm-smi JSON, the KFD topology
in sysfs, ``nvidia-smi --query-gpu`` CSV, and the JSON line printed by :data:`TORCH_PROBE`
(a small program run with the Python of a container that imports torch).

Only the Python standard library is used (no ``ansible`` import), so the torch probe can be
checked with a bare interpreter too (see tests/unit/gpu/prove_on_gpu.sh).

Every parser returns a list of device dicts with at least ``index``, ``name`` and ``arch``
(``None`` when unknown), plus ``uuid`` and ``memory_mb`` when the probe reports them.
AMD arches are LLVM target names (``gfx942``); NVIDIA ones are ``sm_<major><minor>``
(``sm_90``) with the compute capability (``9.0``) in ``compute_capability``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re

KFD_NODES_DIR = "/sys/class/kfd/kfd/topology/nodes"
VISIBILITY_VARIABLES = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
NVIDIA_QUERY_FIELDS = ("index", "name", "uuid", "memory.total", "compute_cap")
TORCH_PROBE_MARKER = "AIC_GPU_PROBE "
EXCERPT_CHARS = 300

# KFD mem_banks heap types holding device memory (HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC / _PRIVATE).
_KFD_VRAM_HEAPS = (1, 2)
_NA = ("", "n/a", "[n/a]", "na", "none", "not supported", "[not supported]")

# Runs as ``<python> -c TORCH_PROBE`` inside the container (any Python >= 3.6). It never raises:
# whatever goes wrong is reported in the JSON line it prints after TORCH_PROBE_MARKER.
TORCH_PROBE = r"""
import json, os, sys
out = {"python": sys.version.split()[0], "executable": sys.executable,
       "env": dict((k, os.environ[k]) for k in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                               "CUDA_VISIBLE_DEVICES") if k in os.environ),
       "dev_kfd": os.path.exists("/dev/kfd"), "render_nodes": [], "nvidia_nodes": []}
try:
    if os.path.isdir("/dev/dri"):
        out["render_nodes"] = sorted(n for n in os.listdir("/dev/dri") if n.startswith("renderD"))
    out["nvidia_nodes"] = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit())
except OSError:
    pass
try:
    import torch
except Exception as exc:
    out["error"] = "import torch failed: %s: %s" % (type(exc).__name__, exc)
else:
    out["version"] = str(torch.__version__)
    out["hip"] = getattr(torch.version, "hip", None)
    out["cuda"] = getattr(torch.version, "cuda", None)
    devices = []
    try:
        out["is_available"] = bool(torch.cuda.is_available())
        out["device_count"] = int(torch.cuda.device_count())
        for i in range(out["device_count"] if out["is_available"] else 0):
            dev = {"index": i}
            try:
                p = torch.cuda.get_device_properties(i)
                dev["name"] = str(p.name)
                dev["major"] = int(p.major)
                dev["minor"] = int(p.minor)
                dev["total_memory"] = int(p.total_memory)
                if out["hip"]:
                    dev["gcnArchName"] = getattr(p, "gcnArchName", None)
                uuid = getattr(p, "uuid", None)
                dev["uuid"] = None if uuid is None else str(uuid)
            except Exception as exc:
                dev["error"] = "%s: %s" % (type(exc).__name__, exc)
            devices.append(dev)
    except Exception as exc:
        out["error"] = "torch.cuda failed: %s: %s" % (type(exc).__name__, exc)
    out["devices"] = devices
sys.stdout.write("AIC_GPU_PROBE " + json.dumps(out) + "\n")
"""


class GpuProbeError(Exception):
    """A probe printed something that cannot be understood."""


def excerpt(text, limit=EXCERPT_CHARS):
    """Collapse whitespace and truncate ``text`` for use in messages."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit] + "..."


def _na(value):
    return value is None or (isinstance(value, str) and value.strip().lower() in _NA)


def _clean(value):
    if _na(value):
        return None
    return value.strip() if isinstance(value, str) else value


def _int(value):
    """int() of ints, decimal or 0x-prefixed strings; None for N/A or junk."""
    if isinstance(value, bool) or _na(value):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip(), 0)
    except ValueError:
        return None


def _load_json(text, what):
    """Decode JSON printed by a tool, skipping any warning lines printed before it."""
    text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else (text or "")
    try:
        return json.loads(text)
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for match in re.finditer(r"^[ \t]*[\[{]", text, re.MULTILINE):
        try:
            return decoder.raw_decode(text[match.end() - 1 :])[0]
        except ValueError:
            continue
    raise GpuProbeError(f"{what} did not print JSON: {excerpt(text) or '(nothing)'}")


# -- AMD ------------------------------------------------------------------------------------------


def gfx_from_target_version(value):
    """LLVM target name for a KFD ``gfx_target_version``: 90402 -> gfx942, 90010 -> gfx90a.

    The value is ``major * 10000 + minor * 100 + stepping``; minor and stepping are printed in
    hex as LLVM does. Returns ``None`` for 0 (CPU nodes) and other non-positive values.
    """
    value = _int(value)
    if value is None or value <= 0:
        return None
    major, minor, stepping = value // 10000, (value // 100) % 100, value % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def normalize_gfx(name):
    """``gfx942:sramecc+:xnack-`` -> ``gfx942``; rocm-smi's ``gfx9010`` -> ``gfx90a``; N/A -> None."""
    name = _clean(name)
    if not isinstance(name, str):
        return None
    base = name.split(":", 1)[0].strip().lower()
    # Old rocm-smi prints major, minor and stepping in decimal: gfx9010 is gfx90a (stepping 10).
    old = re.fullmatch(r"gfx9(\d)(\d\d)", base)
    if old and int(old.group(2)) > 9:
        return f"gfx9{int(old.group(1)):x}{int(old.group(2)):x}"
    return base or None


def parse_kfd_properties(text):
    """``key value`` lines of a KFD sysfs properties file -> {key: int}."""
    props = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                props[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return props


def _read(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def parse_kfd_topology(nodes_dir=KFD_NODES_DIR):
    """GPUs of a KFD topology (``/sys/class/kfd/kfd/topology/nodes``), in ROCr enumeration order.

    Nodes with ``simd_count`` 0 are CPUs and skipped; GPU nodes are numbered in node order, which
    is the order the ROCm runtime enumerates agents in. Raises ``OSError`` when ``nodes_dir``
    cannot be listed.
    """
    node_ids = sorted(int(n) for n in os.listdir(nodes_dir) if n.isdigit())
    devices = []
    for node_id in node_ids:
        node_dir = os.path.join(nodes_dir, str(node_id))
        try:
            props = parse_kfd_properties(_read(os.path.join(node_dir, "properties")))
        except OSError:
            continue
        if props.get("simd_count", 0) <= 0:
            continue
        arch = gfx_from_target_version(props.get("gfx_target_version"))
        device_id = props.get("device_id")
        name = None
        with contextlib.suppress(OSError):
            name = _clean(_read(os.path.join(node_dir, "name")))
        if not name or name.lower() == "ip discovery":  # amdgpu's name for IP-discovery ASICs
            name = "AMD GPU {}{}".format(arch or "(unknown arch)", f" [0x{device_id:04x}]" if device_id else "")
        unique_id = props.get("unique_id")
        devices.append(
            {
                "index": len(devices),
                "name": name,
                "arch": arch,
                "uuid": f"GPU-{unique_id:016x}" if unique_id else None,
                "memory_mb": _kfd_vram_mb(os.path.join(node_dir, "mem_banks")),
                "node_id": node_id,
            }
        )
    return devices


def _kfd_vram_mb(banks_dir):
    total = 0
    try:
        banks = sorted(os.listdir(banks_dir))
    except OSError:
        return None
    for bank in banks:
        try:
            props = parse_kfd_properties(_read(os.path.join(banks_dir, bank, "properties")))
        except OSError:
            continue
        if props.get("heap_type") in _KFD_VRAM_HEAPS:
            total += props.get("size_in_bytes", 0)
    return total // (1024 * 1024) if total else None


def _gpu_entries(data, what):
    """amd-smi JSON is a list of per-GPU dicts; amd-smi >= 26 wraps it as {"gpu_data": [...]}."""
    if isinstance(data, dict) and "gpu_data" in data:
        data = data["gpu_data"]
    if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
        raise GpuProbeError(f"{what}: expected a list of GPUs, got {excerpt(json.dumps(data))}")
    return data


def _memory_mb(size):
    """amd-smi vram size: {"value": 196592, "unit": "MB"}, "196592 MB" or a number of MB."""
    if isinstance(size, dict):
        value, unit = size.get("value"), str(size.get("unit") or "MB")
    elif isinstance(size, str):
        match = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]i?B)?\s*", size, re.IGNORECASE)
        if not match:
            return None
        value, unit = match.group(1), match.group(2) or "MB"
    else:
        value, unit = size, "MB"
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}.get(unit.strip()[:1].upper(), 1)
    return int(value * scale)


def parse_amd_smi_json(static_text, list_text=None):
    """Devices from ``amd-smi static --asic [--vram] --json`` (and optionally ``amd-smi list --json``).

    ``list`` adds ``uuid``, ``bdf`` and the KFD ``node_id`` (used to fill in the arch from the
    KFD topology when an old amd-smi does not report ``target_graphics_version``).
    """
    entries = _gpu_entries(_load_json(static_text, "amd-smi static"), "amd-smi static")
    listed = {}
    if list_text:
        for entry in _gpu_entries(_load_json(list_text, "amd-smi list"), "amd-smi list"):
            if _int(entry.get("gpu")) is not None:
                listed[_int(entry["gpu"])] = entry
    devices = []
    for position, entry in enumerate(entries):
        index = _int(entry.get("gpu"))
        index = position if index is None else index
        asic = entry.get("asic") if isinstance(entry.get("asic"), dict) else {}
        vram = entry.get("vram") if isinstance(entry.get("vram"), dict) else {}
        extra = listed.get(index, {})
        device = {
            "index": index,
            "name": _clean(asic.get("market_name")),
            "arch": normalize_gfx(asic.get("target_graphics_version")),
            "uuid": _clean(extra.get("uuid")),
            "memory_mb": _memory_mb(vram.get("size")) if not _na(vram.get("size")) else None,
        }
        if device["name"] is None:
            device_id = _clean(asic.get("device_id"))
            device["name"] = f"AMD GPU [{device_id}]" if device_id else "AMD GPU"
        if _clean(extra.get("bdf")):
            device["bdf"] = extra["bdf"]
        if _int(extra.get("node_id")) is not None:
            device["node_id"] = _int(extra["node_id"])
        devices.append(device)
    return sorted(devices, key=lambda d: d["index"])


def parse_rocm_smi_json(text):
    """Devices from ``rocm-smi --showproductname --json`` ({"card0": {...}, ...})."""
    data = _load_json(text, "rocm-smi")
    if not isinstance(data, dict):
        raise GpuProbeError(f"rocm-smi: expected a JSON object, got {excerpt(text)}")
    devices = []
    for key, card in data.items():
        match = re.fullmatch(r"card(\d+)", key)
        if not match or not isinstance(card, dict):
            continue  # "system" and other non-card entries
        name = _clean(card.get("Card Series")) or _clean(card.get("Card Model")) or "AMD GPU"
        devices.append(
            {
                "index": int(match.group(1)),
                "name": name,
                "arch": normalize_gfx(card.get("GFX Version")),
                "uuid": None,
                "memory_mb": None,
            }
        )
    return sorted(devices, key=lambda d: d["index"])


# -- NVIDIA ---------------------------------------------------------------------------------------


def parse_nvidia_smi_csv(text):
    """Devices from ``nvidia-smi --query-gpu=index,name,uuid,memory.total[,compute_cap]
    --format=csv,noheader,nounits``."""
    devices = []
    lines = [line for line in (text or "").splitlines() if line.strip()]
    for row in csv.reader(lines, skipinitialspace=True):
        row = [field.strip() for field in row]
        if len(row) not in (4, 5) or _int(row[0]) is None:
            raise GpuProbeError(f"nvidia-smi: unexpected CSV line {excerpt(','.join(row))!r}")
        capability = _clean(row[4]) if len(row) == 5 else None
        arch = None
        if capability:
            match = re.fullmatch(r"(\d+)\.(\d+)", capability)
            if not match:
                raise GpuProbeError(f"nvidia-smi: unexpected compute capability {capability!r}")
            arch = f"sm_{match.group(1)}{match.group(2)}"
        devices.append(
            {
                "index": _int(row[0]),
                "name": row[1],
                "arch": arch,
                "compute_capability": capability,
                "uuid": _clean(row[2]),
                "memory_mb": _int(row[3]),
            }
        )
    return devices


# -- torch (container) ----------------------------------------------------------------------------


def parse_torch_probe(text):
    """Interpret what :data:`TORCH_PROBE` printed.

    ``text`` is the probe's stdout (the marker line is searched for, anything else is ignored)
    or the decoded JSON object. Returns ``{"vendor", "devices", "torch"}``: ``vendor`` is
    ``amd`` for a ROCm build of torch, ``nvidia`` for a CUDA build and ``none`` otherwise (a CPU
    build, or torch could not be imported); ``torch`` holds the facts the probe collected.
    """
    if isinstance(text, dict):
        data = text
    else:
        text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else (text or "")
        lines = [line for line in text.splitlines() if line.startswith(TORCH_PROBE_MARKER)]
        if not lines:
            raise GpuProbeError(
                f"the torch probe printed no {TORCH_PROBE_MARKER.strip()} line: {excerpt(text) or '(nothing)'}"
            )
        try:
            data = json.loads(lines[-1][len(TORCH_PROBE_MARKER) :])
        except ValueError as exc:
            raise GpuProbeError(f"the torch probe printed invalid JSON ({exc}): {excerpt(lines[-1])}")
        if not isinstance(data, dict):
            raise GpuProbeError(f"the torch probe printed {excerpt(lines[-1])}")
    facts = {
        "version": data.get("version"),
        "hip": data.get("hip"),
        "cuda": data.get("cuda"),
        "is_available": data.get("is_available"),
        "device_count": data.get("device_count"),
        "python": data.get("python"),
        "executable": data.get("executable"),
        "env": data.get("env") or {},
        "dev_kfd": data.get("dev_kfd"),
        "render_nodes": data.get("render_nodes") or [],
        "nvidia_nodes": data.get("nvidia_nodes") or [],
        "error": data.get("error"),
    }
    vendor = "amd" if facts["hip"] else "nvidia" if facts["cuda"] else "none"
    devices = []
    for entry in data.get("devices") or []:
        device = {"index": entry.get("index", len(devices)), "name": entry.get("name"), "arch": None}
        if vendor == "amd":
            device["gcn_arch_name"] = entry.get("gcnArchName")
            device["arch"] = normalize_gfx(entry.get("gcnArchName"))
        elif entry.get("major") is not None and entry.get("minor") is not None:
            device["compute_capability"] = "{}.{}".format(entry["major"], entry["minor"])
            device["arch"] = "sm_{}{}".format(entry["major"], entry["minor"])
        uuid = _clean(entry.get("uuid"))
        if uuid and vendor == "nvidia" and not uuid.upper().startswith(("GPU-", "MIG-")):
            uuid = "GPU-" + uuid  # torch prints the bare UUID, nvidia-smi and CUDA_VISIBLE_DEVICES use GPU-...
        device["uuid"] = uuid
        if entry.get("total_memory") is not None:
            device["memory_mb"] = int(entry["total_memory"]) // (1024 * 1024)
        if entry.get("error"):
            device["error"] = entry["error"]
        devices.append(device)
    return {"vendor": vendor, "devices": devices, "torch": facts}


def describe_torch(facts):
    """One line summing up what the torch probe saw, for failure messages."""
    if facts.get("error") and not facts.get("version"):
        parts = [facts["error"]]
    else:
        build = (
            f"hip {facts['hip']}"
            if facts.get("hip")
            else f"cuda {facts['cuda']}"
            if facts.get("cuda")
            else "CPU-only build"
        )
        parts = [
            f"torch {facts.get('version')} ({build})",
            f"torch.cuda.is_available()={facts.get('is_available')}",
            f"torch.cuda.device_count()={facts.get('device_count')}",
        ]
        if facts.get("error"):
            parts.append(facts["error"])
    if facts.get("python"):
        parts.append(f"python {facts['python']}")
    parts.append("/dev/kfd present" if facts.get("dev_kfd") else "no /dev/kfd")
    parts.append("render nodes: " + (", ".join(facts.get("render_nodes") or []) or "none"))
    parts.append("/dev/nvidia*: " + (", ".join(facts.get("nvidia_nodes") or []) or "none"))
    for key, value in sorted((facts.get("env") or {}).items()):
        parts.append(f"{key}={value!r}")
    return "; ".join(parts)


# -- visibility variables -------------------------------------------------------------------------


def _select(tokens, devices):
    """CUDA/HIP semantics: indices or (prefixes of) UUIDs into ``devices``; stop at the first
    entry that is invalid, out of range, ambiguous or a repeat."""
    chosen = []
    for token in tokens:
        token = token.strip()
        if re.fullmatch(r"-?\d+", token):
            position = int(token)
            match = devices[position] if 0 <= position < len(devices) else None
        else:
            hits = [d for d in devices if token and d.get("uuid") and d["uuid"].lower().startswith(token.lower())]
            match = hits[0] if len(hits) == 1 else None
        if match is None or any(match is c for c in chosen):
            break
        chosen.append(match)
    return chosen


def apply_visibility(devices, vendor, variables):
    """The devices a process would see with the visibility ``variables`` set.

    AMD: ROCR_VISIBLE_DEVICES selects among all GPUs, then HIP_VISIBLE_DEVICES (or, when that is
    not set, CUDA_VISIBLE_DEVICES) among those. NVIDIA: CUDA_VISIBLE_DEVICES only. A variable set
    to the empty string hides every device. Visible devices are renumbered from 0, in the order
    the variables list them, with the probe's numbering kept as ``physical_index``.
    Returns ``(visible_devices, applied)``, ``applied`` being the variables that had an effect
    on this vendor.
    """
    variables = {k: v for k, v in (variables or {}).items() if v is not None}
    if vendor == "amd":
        order = ["ROCR_VISIBLE_DEVICES"]
        order.append("HIP_VISIBLE_DEVICES" if "HIP_VISIBLE_DEVICES" in variables else "CUDA_VISIBLE_DEVICES")
    elif vendor == "nvidia":
        order = ["CUDA_VISIBLE_DEVICES"]
    else:
        order = []
    visible = [dict(d, physical_index=d["index"]) for d in devices]
    applied = {}
    for name in order:
        if name in variables:
            value = str(variables[name])
            applied[name] = value
            visible = _select(value.split(",") if value.strip() else [], visible)
    return [dict(d, index=i) for i, d in enumerate(visible)], applied


# -- checks ---------------------------------------------------------------------------------------


def arch_matches(device, expected):
    """Whether ``device`` has one of the ``expected`` arches.

    ``gfx942`` matches ``gfx942:sramecc+:xnack-`` (a name with features must match exactly);
    NVIDIA devices match their ``sm_90`` arch or their ``9.0`` compute capability.
    """
    names = {str(e).strip().lower() for e in expected}
    candidates = {device.get("arch"), device.get("compute_capability"), device.get("gcn_arch_name")}
    return any(c is not None and str(c).lower() in names for c in candidates)


def check_devices(devices, min_devices=1, expected_arch=None):
    """Failure reasons for ``devices`` (empty list when every check holds)."""
    problems = []
    if len(devices) < min_devices:
        problems.append(f"{len(devices)} GPU(s) seen, expected at least {min_devices}")
    if expected_arch:
        wanted = ", ".join(str(e) for e in expected_arch)
        groups = {}  # (name, arch) -> indices, in device order
        for device in devices:
            if not arch_matches(device, expected_arch):
                key = (device.get("name") or "unnamed", device.get("arch") or "unknown")
                groups.setdefault(key, []).append(str(device.get("index")))
        for (name, arch), indices in groups.items():
            if len(indices) == 1:
                problems.append(f"device {indices[0]} ({name}) has arch {arch}, expected one of: {wanted}")
            else:
                problems.append(f"devices {', '.join(indices)} ({name}) have arch {arch}, expected one of: {wanted}")
    return problems
