#!/usr/bin/env bash
# Prove aic.stack.gpu_check on a machine with a real GPU, without an Ansible controller.
#
# Usage, from the repository root:
#
#   tests/unit/gpu/prove_on_gpu.sh
#
# Environment (all optional):
#   PYTHON=python3             interpreter that runs the module (needs Python >= 3.8)
#   TORCH_PYTHON=$PYTHON       interpreter that tries `import torch` for the torch probe
#   GPU_CHECK_VENDOR=auto       the module's vendor option (auto | amd | nvidia)
#   GPU_CHECK_MIN_DEVICES=1     the module's min_devices option
#   GPU_CHECK_EXPECTED_ARCH=    comma separated expected_arch, e.g. sm_90 (H100/H200) or gfx942
#   AIC_ANSIBLE_WHEEL=         an ansible_core-*.whl (or a folder holding one) to use when $PYTHON
#                              cannot import ansible and pip cannot download (machine without network)
#
# What it does:
#   1. host      runs plugins/modules/gpu_check.py directly (python -m ..., args JSON file as argv[1])
#                with where=host and prints the module's JSON result. If the module fails (fewer
#                than GPU_CHECK_MIN_DEVICES GPUs, wrong arch) or count < 1 the script stops here
#                and exits 1 with the module's message.
#   2. visible   runs it again with CUDA_VISIBLE_DEVICES=0 (ROCR_VISIBLE_DEVICES=0 on AMD) in
#                visible_devices: exactly 1 GPU, physical_index 0, must be reported.
#   3. arch      runs it with expected_arch [gfx000] (no such GPU): the module must fail with its
#                arch message.
#   4. torch     when TORCH_PYTHON can import torch, runs the probe that where=container runs
#                with `docker exec <container> python3 -c ...`, in-process (no docker), parses it
#                with the module's parser and applies the same checks. Without torch it prints a
#                note and skips this step.
#
# The module runs from a temporary folder holding ansible_collections/aic/stack -> the repository.
# When ansible is not importable, ansible-core 2.19.14 (the module side only needs its
# module_utils, so --no-deps) is pip-installed into a temporary venv, else with pip --target.
#
# Exit status: 0 every step held; 1 the host check failed (no GPU seen: the module's message is
# printed); 2 the script could not set up ansible; 3 a later step (visibility, arch, torch) failed.

set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
PYTHON=${PYTHON:-python3}
TORCH_PYTHON=${TORCH_PYTHON:-$PYTHON}
VENDOR=${GPU_CHECK_VENDOR:-auto}
MIN_DEVICES=${GPU_CHECK_MIN_DEVICES:-1}
EXPECTED_ARCH=${GPU_CHECK_EXPECTED_ARCH:-}
ANSIBLE_CORE=ansible-core==2.19.14

note() { printf '==> %s\n' "$*"; }
fail() {
    local code=$1
    shift
    printf '==> FAILED: %s\n' "$*"
    exit "$code"
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/prove-gpu-check.XXXXXX") || fail 2 "mktemp failed"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/ansible_collections/aic"
ln -s "$REPO" "$WORK/ansible_collections/aic/stack"
SITE=""

command -v "$PYTHON" >/dev/null 2>&1 || fail 2 "no $PYTHON on PATH (set PYTHON=...)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 8))' ||
    fail 2 "$PYTHON is Python $("$PYTHON" -c 'import platform; print(platform.python_version())'); the module needs >= 3.8"
note "repository: $REPO"
note "python: $(command -v "$PYTHON") ($("$PYTHON" -c 'import platform; print(platform.python_version())'))"

# -- ansible-core ---------------------------------------------------------------------------------

if "$PYTHON" -c 'import ansible.module_utils.basic' >/dev/null 2>&1; then
    note "ansible-core $("$PYTHON" -c 'import ansible.release as r; print(r.__version__)') is importable"
elif [ -n "${AIC_ANSIBLE_WHEEL:-}" ]; then
    wheel=$AIC_ANSIBLE_WHEEL
    [ -d "$wheel" ] && wheel=$(ls "$wheel"/ansible_core-*.whl 2>/dev/null | sort | tail -n 1)
    [ -f "$wheel" ] || fail 2 "AIC_ANSIBLE_WHEEL=$AIC_ANSIBLE_WHEEL is not an ansible_core wheel (or a folder with one)"
    note "ansible is not importable; unpacking $wheel"
    "$PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$wheel" "$WORK/site" ||
        fail 2 "cannot unpack $wheel"
    SITE="$WORK/site"
else
    note "ansible is not importable by $PYTHON; installing $ANSIBLE_CORE (--no-deps) into a temporary venv"
    # --ignore-requires-python: ansible-core 2.19 needs Python >= 3.11 on the controller, but its
    # module side (all that runs here) supports Python >= 3.8.
    if "$PYTHON" -m venv --system-site-packages "$WORK/venv" >/dev/null 2>&1 &&
        "$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
            --ignore-requires-python "$ANSIBLE_CORE"; then
        PYTHON="$WORK/venv/bin/python"
    else
        note "no venv (python3-venv missing?) or pip failed in it; trying pip install --target"
        "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --ignore-requires-python \
            --target "$WORK/site" "$ANSIBLE_CORE" ||
            fail 2 "cannot install $ANSIBLE_CORE (no network?). Download it elsewhere with" \
                "\`pip download --no-deps $ANSIBLE_CORE -d wheels\` and rerun with AIC_ANSIBLE_WHEEL=wheels"
        SITE="$WORK/site"
    fi
    "$PYTHON" -c 'import ansible.module_utils.basic' >/dev/null 2>&1 ||
        PYTHONPATH="$SITE" "$PYTHON" -c 'import ansible.module_utils.basic' ||
        fail 2 "ansible-core was installed but cannot be imported"
fi
export PYTHONPATH="$WORK${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}"

# -- helpers --------------------------------------------------------------------------------------

# run_module NAME ARGS_JSON: run gpu_check with {"ANSIBLE_MODULE_ARGS": ARGS_JSON}; the result goes
# to $WORK/NAME.json, the exit status is returned.
run_module() {
    local name=$1 args=$2
    printf '{"ANSIBLE_MODULE_ARGS": %s}\n' "$args" >"$WORK/$name.args.json"
    "$PYTHON" -m ansible_collections.aic.stack.plugins.modules.gpu_check "$WORK/$name.args.json" \
        >"$WORK/$name.json" 2>"$WORK/$name.stderr"
    local rc=$?
    if [ -s "$WORK/$name.stderr" ]; then
        sed 's/^/    stderr: /' "$WORK/$name.stderr"
    fi
    return $rc
}

# field NAME EXPR: evaluate a Python expression over the result `r` of run NAME.
field() {
    "$PYTHON" -c 'import json, sys; r = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$WORK/$1.json" "$2"
}

show() {
    "$PYTHON" -m json.tool "$WORK/$1.json" 2>/dev/null || cat "$WORK/$1.json"
}

arch_json() {
    "$PYTHON" -c 'import json, sys; print(json.dumps([a.strip() for a in sys.argv[1].split(",") if a.strip()] or None))' "$1"
}

# -- 1. host ----------------------------------------------------------------------------------------

note "1. host: gpu_check where=host vendor=$VENDOR min_devices=$MIN_DEVICES expected_arch=${EXPECTED_ARCH:-(any)}"
args=$(printf '{"where": "host", "vendor": "%s", "min_devices": %s, "expected_arch": %s}' \
    "$VENDOR" "$MIN_DEVICES" "$(arch_json "$EXPECTED_ARCH")")
run_module host "$args"
rc=$?
show host
if [ $rc -ne 0 ] || ! [ -s "$WORK/host.json" ]; then
    msg=$(field host 'r.get("msg")' 2>/dev/null || echo "the module printed no JSON (exit $rc)")
    fail 1 "host check (module exit $rc): $msg"
fi
count=$(field host 'r["count"]')
vendor=$(field host 'r["vendor"]')
source=$(field host 'r["source"]')
if [ "$count" -lt 1 ]; then
    fail 1 "host check: count=$count (min_devices=$MIN_DEVICES let it pass, but no GPU was seen)"
fi
note "host: $count $vendor GPU(s) from $source: $(field host '", ".join(sorted({"%s %s" % (d["name"], d["arch"]) for d in r["devices"]}))')"
status=0

# -- 2. visibility ---------------------------------------------------------------------------------

if [ "$vendor" = amd ]; then var=ROCR_VISIBLE_DEVICES; else var=CUDA_VISIBLE_DEVICES; fi
note "2. visible: gpu_check with visible_devices {$var: \"0\"} must report exactly 1 GPU (physical_index 0)"
run_module visible "{\"where\": \"host\", \"vendor\": \"$vendor\", \"visible_devices\": {\"$var\": \"0\"}}"
rc=$?
got=$(field visible '(r.get("count"), r.get("total_count"), [d.get("physical_index") for d in r.get("devices", [])])' 2>/dev/null)
if [ $rc -eq 0 ] && [ "$got" = "(1, $count, [0])" ]; then
    note "visible: ok (count, total_count, physical_index) = $got"
else
    show visible
    note "visible: NOT ok: module exit $rc, (count, total_count, physical_index) = $got, expected (1, $count, [0])"
    status=3
fi

# -- 3. arch mismatch -----------------------------------------------------------------------------

note "3. arch: gpu_check with expected_arch [gfx000] must fail naming the arch of GPU 0"
run_module arch "{\"where\": \"host\", \"vendor\": \"$vendor\", \"expected_arch\": [\"gfx000\"]}"
rc=$?
msg=$(field arch 'r.get("msg", "")' 2>/dev/null)
if [ $rc -eq 1 ] && [[ "$msg" == *"expected one of: gfx000"* ]]; then
    note "arch: ok, the module failed with: ${msg%%. Probed:*}"
else
    show arch
    note "arch: NOT ok: module exit $rc, msg: $msg"
    status=3
fi

# -- 4. torch probe, in-process -------------------------------------------------------------------

if ! command -v "$TORCH_PYTHON" >/dev/null 2>&1 || ! "$TORCH_PYTHON" -c 'import torch' >/dev/null 2>&1; then
    note "4. torch: SKIPPED - $TORCH_PYTHON cannot import torch (set TORCH_PYTHON=... to an interpreter that can)"
else
    note "4. torch: running the container probe (gpu.TORCH_PROBE) in-process with $TORCH_PYTHON, no docker"
    PYTHONPATH="$WORK${PYTHONPATH:+:$PYTHONPATH}" "$TORCH_PYTHON" - "$MIN_DEVICES" "$(arch_json "$EXPECTED_ARCH")" <<'PY'
import contextlib
import io
import json
import sys

from ansible_collections.aic.stack.plugins.module_utils import gpu

min_devices, expected_arch = int(sys.argv[1]), json.loads(sys.argv[2])
buffer = io.StringIO()
with contextlib.redirect_stdout(buffer):
    exec(compile(gpu.TORCH_PROBE, "<torch probe>", "exec"), {"__name__": "__torch_probe__"})
report = gpu.parse_torch_probe(buffer.getvalue())
result = {"source": "torch", "vendor": report["vendor"], "count": len(report["devices"]),
          "devices": report["devices"], "torch": report["torch"]}
print(json.dumps(result, indent=4))
problems = gpu.check_devices(report["devices"], min_devices, expected_arch)
if report["torch"].get("error") and not report["torch"].get("version"):
    problems.insert(0, "cannot import torch")
if problems or result["count"] < 1:
    problems = problems or ["0 GPU(s) seen"]
    print("==> torch: NOT ok: %s. Probed: %s" % ("; ".join(problems), gpu.describe_torch(report["torch"])))
    sys.exit(3)
print("==> torch: ok, %s" % gpu.describe_torch(report["torch"]))
PY
    [ $? -eq 0 ] || status=3
fi

if [ $status -eq 0 ]; then
    note "PASSED: gpu_check sees $count $vendor GPU(s) from $source"
else
    note "FAILED: the host check passed ($count GPU(s)) but a later step did not (see above)"
fi
exit $status
