# Copyright: aic.stack contributors
# Apache-2.0
"""Slurm / SPUR batch jobs: validate a job spec, render its sbatch command line and script, parse what Slurm prints.

Pure functions (no I/O): the ``aic.stack`` filters (plugins/filter/slurm.py), the ``slurm_wait`` module and the
``aic.stack.slurm`` inventory plugin call them, and tests/unit/slurm tests them.

Two dialects (FACTS.md section 6):

``slurm``
    standard sbatch: ``--parsable`` gives the job id, ``--no-requeue`` is accepted, GPUs by ``--gres=gpu:N`` and only
    when N > 0 (Slurm 22.05 rejects an empty ``--gres=`` as an invalid TRES specification), ``--constraint`` only
    when one is set. The per-node GPU indices of a running job come from ``scontrol show job -d``.
``spur``
    no ``--parsable``/``--wait``/``--no-requeue``/``--overcommit`` and no script on stdin; the job id is read from
    "Submitted batch job N"; ``--controller <addr>`` on every call; GPUs by ``--gpus=N`` and an empty ``--gres=`` that
    clears a GPU gres a script or site default may carry (SPUR has no GPU gres and cancels such jobs); always a
    ``--constraint`` (``--constraint=`` when empty, as SPUR wants). SPUR has no ``scontrol show job``: a job's GPU ids
    come from a site command (``.slurm/spur-gpu-allocation``, SPUR's GetJob call), parsed by :func:`parse_gpu_ids`.

The job script writes its own output, error and exit-status files under ``<logs_root>/<job id>/`` (SPUR's sacct
reports 141 for jobs that exited 0, and a body's own EXIT trap cannot clobber the status: the body runs in a subshell).
"""

from __future__ import annotations

import posixpath
import re
import shlex

from ansible_collections.aic.stack.plugins.module_utils.coerce import as_bool, as_choice, as_int, as_list, as_str

DIALECTS = ("slurm", "spur")
SPEC_FIELDS = (
    "name",
    "command",
    "dialect",
    "nodes",
    "gpus",
    "time_limit",
    "partition",
    "constraint",
    "nodelist",
    "chdir",
    "controller",
    "extra_args",
    "env",
    "logs_root",
    "requeue",
)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
JOB_ID_RE = re.compile(r"^[0-9]+(?:_[0-9]+)?$")
SPUR_SUBMITTED_RE = re.compile(r"Submitted batch job ([0-9]+)")
# Flags SPUR's sbatch does not support (FACTS.md section 6, SPUR quirks).
SPUR_UNSUPPORTED = ("--parsable", "--wait", "-W", "--no-requeue", "--overcommit", "-O")
# Flags the role sets itself: given again in extra args they would silently win or conflict.
MANAGED_FLAGS = (
    "--job-name",
    "-J",
    "--nodes",
    "-N",
    "--gres",
    "--gpus",
    "-G",
    "--time",
    "-t",
    "--partition",
    "-p",
    "--constraint",
    "-C",
    "--nodelist",
    "-w",
    "--output",
    "-o",
    "--error",
    "-e",
    "--chdir",
    "-D",
    "--controller",
)
# squeue/scontrol states after which a job no longer runs.
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
_SQUEUE_SHORT_STATES = {
    "BF": "BOOT_FAIL",
    "CA": "CANCELLED",
    "CD": "COMPLETED",
    "CG": "COMPLETING",
    "DL": "DEADLINE",
    "F": "FAILED",
    "NF": "NODE_FAIL",
    "OOM": "OUT_OF_MEMORY",
    "PD": "PENDING",
    "PR": "PREEMPTED",
    "R": "RUNNING",
    "RV": "REVOKED",
    "SE": "SPECIAL_EXIT",
    "TO": "TIMEOUT",
}


class SlurmSpecError(ValueError):
    """A job spec that cannot be submitted; the message names the field."""


def _flag_name(arg):
    return arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]


def _int_field(spec, field, minimum):
    # Whatever int() reads from the value's text ("2", " 2 ", 2, "+2"); never a boolean or None.
    return as_int(
        field,
        spec.get(field),
        minimum,
        error=SlurmSpecError,
        parse="str",
        message="{field} must be an integer >= {minimum} (got {value!r})",
        messages={"minimum": "{field} must be an integer >= {minimum} (got {number})"},
    )


def _str_field(spec, field):
    return as_str(
        field, spec.get(field), error=SlurmSpecError, none="", message="{field} must be a string (got {value!r})"
    )


def _word_field(spec, field, what):
    """An optional one-word string field (stripped; empty when unset); names the field when it is not one."""
    return as_str(
        field,
        spec.get(field),
        error=SlurmSpecError,
        none="",
        spaces=False,
        messages={
            "type": f"{{field}} must be {what} (got {{value!r}})",
            "spaces": "{field} must not contain whitespace (got {value!r})",
        },
    )


def job_spec(spec):
    """Validate and normalise a job spec (dict); raise :class:`SlurmSpecError` naming the bad field.

    Keys: ``name``, ``command`` (the script body), ``dialect`` (slurm|spur), ``nodes`` (>= 1), ``gpus`` (>= 0),
    ``time_limit``, ``partition``, ``constraint`` (node features; spur passes it even when empty), ``nodelist`` (the
    nodes the job must run on, a hostlist), ``chdir``,
    ``controller`` (spur only), ``extra_args`` (list of str), ``env`` (dict), ``logs_root`` (absolute), ``requeue``
    (bool; slurm dialect: false adds ``--no-requeue``).
    Empty strings mean "not set" (Slurm's default).
    """
    if not isinstance(spec, dict):
        raise SlurmSpecError(f"the job spec must be a dict (got {type(spec).__name__})")
    dialect = as_choice(
        "dialect",
        _str_field(spec, "dialect") or "slurm",
        DIALECTS,
        error=SlurmSpecError,
        message="{field} must be one of {choices} (got {value!r})",
    )
    name = _str_field(spec, "name")
    if not NAME_RE.match(name):
        raise SlurmSpecError(f"name must be made of letters, digits, '.', '_' and '-' (got {name!r})")
    command = spec.get("command")
    if not isinstance(command, str) or not command.strip():
        raise SlurmSpecError("command must be a non-empty script body (got an empty one)")
    logs_root = _str_field(spec, "logs_root")
    if not logs_root.startswith("/"):
        raise SlurmSpecError(f"logs_root must be an absolute path (got {logs_root!r})")
    controller = _str_field(spec, "controller")
    if controller and dialect != "spur":
        raise SlurmSpecError(f"controller is only used by the spur dialect (dialect is {dialect!r})")
    extra = as_list(
        "extra_args",
        spec.get("extra_args") or [],
        None,
        error=SlurmSpecError,
        item_types=str,
        message="{field} must be a list of strings (got {value!r})",
    )
    for arg in extra:
        flag = _flag_name(arg)
        if flag in MANAGED_FLAGS:
            raise SlurmSpecError(f"extra_args: {arg!r} is set by the role itself; use its own variable instead")
        if dialect == "spur" and flag in SPUR_UNSUPPORTED:
            raise SlurmSpecError(f"extra_args: {arg!r} is not supported by SPUR's sbatch")
    env = spec.get("env") or {}
    if not isinstance(env, dict):
        raise SlurmSpecError(f"env must be a dict of variable names to values (got {env!r})")
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            raise SlurmSpecError(f"env: {key!r} is not a valid environment variable name")
        if value is None or isinstance(value, (dict, list)):
            raise SlurmSpecError(f"env: {key} must be a string or number (got {value!r})")
    time_limit = _str_field(spec, "time_limit")
    if time_limit and not re.match(r"^[0-9][0-9:-]*$|^(?i:unlimited|infinite)$", time_limit):
        raise SlurmSpecError(f"time_limit must be a Slurm time such as 30, 01:00:00 or 1-00:00:00 (got {time_limit!r})")
    constraint = _word_field(spec, "constraint", "a string such as GFX942&NVME")
    nodelist = _word_field(spec, "nodelist", "a Slurm hostlist string such as node[1-2]")
    requeue = as_bool(
        "requeue",
        spec.get("requeue", False),
        error=SlurmSpecError,
        strings=False,
        message="{field} must be a boolean (got {value!r})",
    )
    return {
        "name": name,
        "command": command,
        "dialect": dialect,
        "nodes": _int_field(spec, "nodes", 1) if spec.get("nodes") is not None else 1,
        "gpus": _int_field(spec, "gpus", 0) if spec.get("gpus") is not None else 0,
        "time_limit": time_limit,
        "partition": _str_field(spec, "partition"),
        "constraint": constraint,
        "nodelist": nodelist,
        "chdir": _str_field(spec, "chdir"),
        "controller": controller,
        "extra_args": list(extra),
        "env": {k: str(v) for k, v in env.items()},
        "logs_root": posixpath.normpath(logs_root),
        "requeue": requeue,
    }


def sbatch_argv(spec, script_path, sbatch="sbatch"):
    """The sbatch command line (list) that submits ``script_path`` for a spec (validated here too)."""
    spec = job_spec(spec)
    spur = spec["dialect"] == "spur"
    argv = [sbatch]
    if spur:
        if spec["controller"]:
            argv += ["--controller", spec["controller"]]
    else:
        argv.append("--parsable")
    argv += [f"--job-name={spec['name']}", f"--nodes={spec['nodes']}"]
    if spur:
        if spec["gpus"] > 0:
            argv.append(f"--gpus={spec['gpus']}")
        # Clears any GPU gres of the script or the site: SPUR has none and cancels jobs that ask for it.
        argv.append("--gres=")
    elif spec["gpus"] > 0:
        argv.append(f"--gres=gpu:{spec['gpus']}")
    if spec["time_limit"]:
        argv.append(f"--time={spec['time_limit']}")
    if spec["partition"]:
        argv.append(f"--partition={spec['partition']}")
    # SPUR wants --constraint passed, empty too (FACTS.md section 6); standard Slurm only gets a non-empty one.
    if spur or spec["constraint"]:
        argv.append(f"--constraint={spec['constraint']}")
    # Both dialects (SPUR too: FACTS.md section 6): the job runs on these nodes only.
    if spec["nodelist"]:
        argv.append(f"--nodelist={spec['nodelist']}")
    if spec["chdir"]:
        argv.append(f"--chdir={spec['chdir']}")
    if not spur and not spec["requeue"]:
        argv.append("--no-requeue")
    # The script writes logs/<job id>/<name>.{out,err,exit} itself (the directory cannot exist before the job id).
    argv += ["--output=/dev/null", "--error=/dev/null"]
    argv += spec["extra_args"]
    argv.append(script_path)
    return argv


def job_files(spec, job_id):
    """Paths of a job's directory and of its output, error and exit-status files."""
    spec = job_spec(spec)
    job_dir = posixpath.join(spec["logs_root"], str(job_id))
    base = posixpath.join(job_dir, spec["name"])
    return {"dir": job_dir, "out": base + ".out", "err": base + ".err", "exit": base + ".exit"}


def job_script(spec, sbatch="sbatch"):
    """The batch script: logs into <logs_root>/<job id>/, the body in a subshell, then the exit-status file."""
    spec = job_spec(spec)
    name = spec["name"]
    q = shlex.quote
    submit = shlex.join(sbatch_argv(spec, "<this script>", sbatch=sbatch))
    lines = [
        "#!/bin/bash",
        f"# aic.stack slurm_job {name} ({spec['dialect']} dialect), rendered by aic.stack.slurm_job_script.",
        f"# Submitted with: {submit}",
        "# Options are on the sbatch command line, not in #SBATCH lines, so nothing here overrides them.",
        "_aic_job_id=${SLURM_JOB_ID:?not running under Slurm}",
        f"_aic_dir={q(spec['logs_root'])}/$_aic_job_id",
        'mkdir -p -- "$_aic_dir" || exit 1',
        f'exec >>"$_aic_dir"/{q(name + ".out")} 2>>"$_aic_dir"/{q(name + ".err")}',
        f'echo "aic.stack slurm_job {name}: job $_aic_job_id on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2',
    ]
    lines += [f"export {key}={q(value)}" for key, value in sorted(spec["env"].items())]
    lines += [
        "# The body runs in a subshell: its own EXIT trap or `exit` cannot skip the exit-status file below.",
        "(",
        spec["command"].rstrip("\n"),
        ")",
        "_aic_rc=$?",
        f'printf \'%s\\n\' "$_aic_rc" >"$_aic_dir"/{q(name + ".exit.tmp")}',
        f'mv -f -- "$_aic_dir"/{q(name + ".exit.tmp")} "$_aic_dir"/{q(name + ".exit")}',
        'exit "$_aic_rc"',
    ]
    return "\n".join(lines) + "\n"


def inner_playbook_command(ansible_playbook, inventories, playbook, limit, extra_vars=()):
    """The shell command a batch job runs to play ``playbook`` on its own node with a local connection, as inventory
    host ``limit``: every inventory source of the controller's run (``-i`` each, in order, so overlays keep their
    precedence), then ``extra_vars`` (each one ``-e`` value, JSON or ``key=value``; the last win)."""
    if not inventories or isinstance(inventories, str):
        raise SlurmSpecError(f"inventories must be a non-empty list of inventory sources (got {inventories!r})")
    if not str(limit or "").strip():
        raise SlurmSpecError("limit must name the inventory host the job runs as (got an empty one)")
    argv = [str(ansible_playbook)]
    for source in inventories:
        argv += ["-i", str(source)]
    argv += [str(playbook), "--limit", str(limit)]
    for value in extra_vars:
        argv += ["-e", str(value)]
    return " ".join(shlex.quote(a) for a in argv)


def parse_job_id(stdout, dialect="slurm"):
    """The job id sbatch printed: ``--parsable`` output (``N`` or ``N;cluster``) or SPUR's "Submitted batch job N"."""
    text = (stdout or "").strip()
    if dialect == "spur" or text.startswith("Submitted"):
        match = SPUR_SUBMITTED_RE.search(text)
        if not match:
            raise SlurmSpecError(f"no 'Submitted batch job N' in the sbatch output: {text!r}")
        return match.group(1)
    first = text.splitlines()[-1].split(";", 1)[0].strip() if text else ""
    if not JOB_ID_RE.match(first):
        raise SlurmSpecError(f"sbatch --parsable printed no job id: {text!r}")
    return first


def squeue_argv(dialect="slurm", controller="", squeue="squeue"):
    """squeue command listing jobs: exact ``%i|%T`` on Slurm; SPUR's default table (it ignores ``-j``)."""
    if dialect == "spur":
        return [squeue] + (["--controller", controller] if controller else [])
    return [squeue, "--noheader", "--format=%i|%T"]


def parse_squeue_state(output, job_id, dialect="slurm"):
    """State of ``job_id`` in squeue output (long name such as RUNNING), or None when it is not listed.

    Slurm: ``id|STATE`` lines. SPUR: the default table; the row whose first column is the id, state from the
    ST/STATE column of the header (a job name never holds spaces here: names are validated).
    """
    job_id = str(job_id)
    lines = [line for line in (output or "").splitlines() if line.strip()]
    if dialect != "spur":
        for line in lines:
            jid, _sep, state = line.strip().partition("|")
            if jid.strip() == job_id:
                return _long_state(state)
        return None
    header = None
    for line in lines:
        cols = line.split()
        if cols and cols[0].upper() == "JOBID":
            header = [c.upper() for c in cols]
            continue
        if cols and cols[0] == job_id:
            idx = None
            if header:
                for key in ("ST", "STATE"):
                    if key in header:
                        idx = header.index(key)
                        break
            if idx is None:
                idx = 4  # JOBID PARTITION NAME USER ST ...
            return _long_state(cols[idx]) if idx < len(cols) else "UNKNOWN"
    return None


def long_state(state):
    """A job state as its long name (``R`` -> ``RUNNING``, ``COMPLETED+`` -> ``COMPLETED``); UNKNOWN when empty."""
    return _long_state(state or "")


def _long_state(state):
    state = state.strip().upper().split()[0] if state.strip() else "UNKNOWN"
    state = state.rstrip("+")
    return _SQUEUE_SHORT_STATES.get(state, state)


def parse_scontrol_job(output):
    """``scontrol show job -o N`` as a dict of its ``Key=Value`` fields (values without spaces)."""
    fields = {}
    for match in re.finditer(r"(?:^|\s)([A-Za-z/:]+)=(\S*)", output or ""):
        fields.setdefault(match.group(1), match.group(2))
    return fields


# Node states (base or flag) in which the job cannot count on the node: Slurm lost it or takes it away.
LOST_NODE_STATES = frozenset({"DOWN", "FAIL", "FAILING", "DRAIN", "DRAINING", "DRAINED", "NOT_RESPONDING", "POWERED_DOWN",
                              "POWERING_DOWN", "UNKNOWN"})  # fmt: skip


def node_lost(output):
    """Why Slurm no longer counts on a node, from ``scontrol show node -o NAME``; empty when the node is fine.

    The state is a base state and flags joined by ``+`` (``MIXED+NOT_RESPONDING``, ``DOWN+DRAIN``); a trailing ``*``
    (``IDLE*``) also means the node does not respond (its slurmd is gone). Output without a node record (the node is
    unknown to Slurm) is lost too."""
    fields = parse_scontrol_job(output)
    if "NodeName" not in fields:
        return f"Slurm does not know the node ({(output or '').strip()[:120] or 'no output'})"
    state = fields.get("State", "")
    parts = [p for p in state.upper().split("+") if p]
    not_responding = any(p.endswith("*") for p in parts)
    parts = [p.rstrip("*") for p in parts]
    bad = [p for p in parts if p in LOST_NODE_STATES]
    if not_responding and "NOT_RESPONDING" not in bad:
        bad.append("NOT_RESPONDING")
    if not bad:
        return ""
    reason = re.search(r"(?:^|\s)Reason=(.*?)(?:\s+[A-Za-z]+=|$)", output or "")
    why = f", Reason={reason.group(1).strip()}" if reason and reason.group(1).strip() else ""
    return f"Slurm says State={state}{why}"


def exit_code_from_scontrol(fields):
    """(state, exit code) from parsed ``scontrol show job`` fields; exit code None when unknown."""
    state = _long_state(fields.get("JobState", "UNKNOWN"))
    code = fields.get("ExitCode", "")
    match = re.match(r"^([0-9]+):([0-9]+)$", code)
    if not match:
        return state, None
    rc, signal = int(match.group(1)), int(match.group(2))
    return state, (128 + signal if rc == 0 and signal else rc)


def parse_sacct(output, job_id):
    """(state, exit code) from ``sacct -n -P -X -j N -o JobID,State,ExitCode``; (None, None) when absent."""
    for line in (output or "").splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[0] == str(job_id):
            state = _long_state(parts[1]) if parts[1].strip() else "UNKNOWN"
            match = re.match(r"^([0-9]+):([0-9]+)$", parts[2].strip())
            if not match:
                return state, None
            rc, signal = int(match.group(1)), int(match.group(2))
            return state, (128 + signal if rc == 0 and signal else rc)
    return None, None


def gpus_per_node(fields):
    """GPUs per node of a job from ``scontrol show job`` fields (TresPerNode, else TRES / nodes); None if unknown."""
    per_node = fields.get("TresPerNode", "")
    match = re.search(r"gres[:/]gpu(?::[^:,=]+)?[:=]([0-9]+)", per_node)
    if match:
        return int(match.group(1))
    tres = fields.get("TRES", "") or fields.get("ReqTRES", "")
    match = re.search(r"gres/gpu=([0-9]+)", tres)
    if match:
        nodes = int(fields.get("NumNodes", "1").split("-")[0] or 1)
        return int(match.group(1)) // max(nodes, 1)
    per_job = fields.get("TresPerJob", "")
    match = re.search(r"gres[:/]gpu(?::[^:,=]+)?[:=]([0-9]+)", per_job)
    if match:
        nodes = int(fields.get("NumNodes", "1").split("-")[0] or 1)
        return int(match.group(1)) // max(nodes, 1)
    return None


def expand_hostlist(hostlist):
    """Expand a Slurm hostlist (``n[01-03,7],gpu-a[1-2]x``) in Python, for hosts without ``scontrol``."""
    hosts = []
    for part in _split_top_level(hostlist or ""):
        hosts.extend(_expand_one(part))
    return hosts


def _split_top_level(text):
    parts, depth, current = [], 0, ""
    for char in text.strip():
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise SlurmSpecError(f"unbalanced ']' in hostlist {text!r}")
        if char == "," and depth == 0:
            if current:
                parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise SlurmSpecError(f"unbalanced '[' in hostlist {text!r}")
    if current:
        parts.append(current)
    return parts


def _expand_one(pattern):
    match = re.search(r"\[([^\]]*)\]", pattern)
    if not match:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    out = []
    for item in match.group(1).split(","):
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise SlurmSpecError(f"bad range {item!r} in hostlist {pattern!r}")
        width = len(lo)
        for number in range(int(lo), int(hi if sep else lo) + 1):
            out.extend(_expand_one(f"{head}{number:0{width}d}{tail}"))
    return out


# -- GPU ids of a job's nodes -----------------------------------------------------------------------------------------
# Keys of one detail record of ``scontrol show job -d``: "Nodes=n[1-2] CPU_IDs=0-1 Mem=0 GRES=gpu:2(IDX:0-1)"
# (GRES_IDX= before Slurm 17.11). A key outside these ends the record.
_DETAIL_KEYS = ("CPU_IDs", "Mem", "GRES", "GRES_IDX")
_GRES_ENTRY_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9_/-]+)(?::(?P<type>[^:(]+))?(?::(?P<count>[0-9]+))?"
    r"(?:\((?P<kind>IDX|CNT):(?P<list>[^)]*)\))?$"
)
_GPU_ID_RE = re.compile(r"^(?:[0-9]+|GPU-[0-9A-Fa-f-]+)$")
_GPU_RANGE_RE = re.compile(r"^([0-9]+)-([0-9]+)$")
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
GPU_IDS_PLACEHOLDERS = ("job_id", "controller")


def expand_index_list(text):
    """Slurm's index list (``0,2-3``, the IDX of a gres) as a list of strings: ``["0", "2", "3"]``."""
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item or item.upper() == "N/A":
            continue
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()) or (sep and int(hi) < int(lo)):
            raise SlurmSpecError(f"bad GPU index range {item!r} in {text!r}")
        out.extend(str(n) for n in range(int(lo), int(hi if sep else lo) + 1))
    return out


def _split_outside_parens(text):
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def gres_gpu_ids(gres):
    """GPU indices in one node's GRES of ``scontrol show job -d`` (``gpu:2(IDX:0-1)``, ``gpu:mi355x:2(IDX:0,2)``,
    ``gpu:a:1(IDX:0),gpu:b:1(IDX:3),nic:1(IDX:0)``): a list of strings, [] without a gpu gres, None when a gpu gres
    has a count but no indices (``gpu(CNT:2)``: gres without device files)."""
    ids = []
    for entry in _split_outside_parens(gres or ""):
        if entry in ("(null)", "N/A"):
            continue
        match = _GRES_ENTRY_RE.match(entry)
        if not match:
            raise SlurmSpecError(f"unrecognised GRES entry {entry!r} in {gres!r}")
        if match.group("name") != "gpu":
            continue
        count = match.group("count")
        if count is None and (match.group("type") or "").isdigit():
            count = match.group("type")  # gpu:2(...): the count, not a type
        if match.group("kind") != "IDX":
            if count == "0":
                continue
            return None
        for index in expand_index_list(match.group("list")):
            if index not in ids:
                ids.append(index)
    return ids


def parse_job_details(output):
    """The detail records of ``scontrol show job -d [-o] N``: a list of ``{"nodes": hostlist, "gres": str}``.

    Works on the multi-line form (one ``Nodes=...`` line per set of nodes with the same allocation) and on the one-line
    form (``-o``, the records inline). Empty when there are none (a pending job, or no ``-d``).
    """
    records, current = [], None
    for match in re.finditer(r"(?:^|\s)([A-Za-z_/:]+)=(\S*)", output or ""):
        key, value = match.group(1), match.group(2)
        if key == "Nodes":
            current = {"nodes": value, "gres": ""}
            records.append(current)
        elif current is not None and key in _DETAIL_KEYS:
            if key.startswith("GRES"):
                current["gres"] = value
        else:
            current = None
    return records


def job_gpu_ids(output, expand=None):
    """Per-node GPU ids of a running job from ``scontrol show job -d [-o] N``: ``{host: ["0", "1"]}``.

    Each detail record's node set is expanded with ``expand`` (default :func:`expand_hostlist`). A node whose gpu gres
    has no indices (``CNT:``) maps to None (unknown); a node of a record without a gpu gres to []. Nodes of the job
    without a record are absent, and so is every node when the output has no detail records.
    """
    expand = expand or expand_hostlist
    out = {}
    for record in parse_job_details(output):
        ids = gres_gpu_ids(record["gres"])
        for host in expand(record["nodes"]):
            out[host] = None if ids is None else list(ids)
    return out


def gpu_ids_argv(template, job_id, controller=""):
    """The argv of a ``gpu_ids_command`` template such as ``spur-gpu-allocation {job_id}``.

    The template is split like a shell would (no shell runs it); ``{job_id}`` and ``{controller}`` are replaced in each
    word, any other ``{name}`` is refused (other braces are kept).
    """
    try:
        words = shlex.split(template or "")
    except ValueError as exc:
        raise SlurmSpecError(f"gpu_ids_command: {exc} in {template!r}")
    if not words:
        raise SlurmSpecError("gpu_ids_command is empty")
    values = {"job_id": str(job_id), "controller": controller or ""}
    for word in words:
        for name in _PLACEHOLDER_RE.findall(word):
            if name not in values:
                raise SlurmSpecError(
                    f"gpu_ids_command: unknown placeholder {{{name}}} in {template!r} "
                    f"(use {', '.join('{' + p + '}' for p in GPU_IDS_PLACEHOLDERS)})"
                )
    return [_PLACEHOLDER_RE.sub(lambda m: values.get(m.group(1), m.group(0)), word) for word in words]


def _gpu_id_list(text, where):
    ids = []
    for token in re.split(r"[\s,]+", text.strip()):
        if not token:
            continue
        match = _GPU_RANGE_RE.match(token)
        if match:
            new = expand_index_list(token)
        elif _GPU_ID_RE.match(token):
            new = [token]
        else:
            raise SlurmSpecError(f"{where}: {token!r} is not a GPU index, range (0-3) or UUID (GPU-...)")
        ids.extend(i for i in new if i not in ids)
    return ids


def parse_gpu_ids(output, hosts, expand=None):
    """Per-node GPU ids from the output of a ``gpu_ids_command``: ``{host: [ids]}`` for every host of ``hosts``.

    Two forms (blank lines and ``#`` comments ignored):

    - one line of ids for every node of the job: ``0,1`` (commas and/or spaces; ranges ``0-3``; UUIDs ``GPU-...``),
      what ``.slurm/spur-gpu-allocation`` prints; empty output means the job has no GPUs;
    - ``NODES: IDS`` lines, NODES a host name or hostlist (``node[1-2]: 0,1``, expanded with ``expand``), IDS possibly
      empty; a node of the job without a line has no GPUs, a node that is not in the job is an error.
    """
    expand = expand or expand_hostlist
    hosts = list(hosts)
    lines = [ln.strip() for ln in (output or "").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    per_node = [ln for ln in lines if ":" in ln]
    plain = [ln for ln in lines if ":" not in ln]
    if per_node and plain:
        raise SlurmSpecError(
            f"gpu_ids_command: mixes 'NODE: IDS' lines with a plain id line ({plain[0]!r}); print one form only"
        )
    if not per_node:
        if len(plain) > 1:
            raise SlurmSpecError(
                f"gpu_ids_command: {len(plain)} lines of ids without node names; print one line for the job or "
                "'NODE: IDS' lines"
            )
        ids = _gpu_id_list(plain[0], "gpu_ids_command") if plain else []
        return {host: list(ids) for host in hosts}
    out = {host: [] for host in hosts}
    seen = set()
    for line in per_node:
        nodes, _sep, ids_text = line.partition(":")
        nodes = nodes.strip()
        if not nodes:
            raise SlurmSpecError(f"gpu_ids_command: no node name before ':' in {line!r}")
        ids = _gpu_id_list(ids_text, f"gpu_ids_command ({nodes})")
        for node in expand(nodes):
            if node not in out:
                raise SlurmSpecError(
                    f"gpu_ids_command: node {node!r} is not a node of the job ({', '.join(hosts) or 'none'})"
                )
            if node in seen:
                raise SlurmSpecError(f"gpu_ids_command: node {node!r} is listed twice")
            seen.add(node)
            out[node] = list(ids)
    return out
