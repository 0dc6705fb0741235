# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Rolling rollout helpers: the batch plan (canary, then batches) and the per-node summary."""

from __future__ import annotations

import re

PERCENT_RE = re.compile(r"^\s*([0-9]{1,3}(?:\.[0-9]+)?)\s*%\s*$")
STATES = ("started", "healthy", "rolled_back", "failed", "lost", "unreachable", "dropped")
# The states of a node whose turn ran to its end and that serves: healthy, or rolled back to its last healthy release.
SERVING_STATES = ("healthy", "rolled_back")
# The states of a node that was skipped, untouched: Slurm lost it, it could not be reached when its turn came, or it
# dropped out of this run before the rollout (failed or unreachable in an earlier play: its Docker engine down, ...).
SKIPPED_STATES = ("lost", "unreachable", "dropped")


# Why a node dropped out, when nothing more precise was recorded (an earlier play failed it or could not reach it).
DROPPED_CAUSE = "it failed or could not be reached earlier in this run: its error is above"


def dropped_outcome(host, hostvars, target):
    """The outcome of a node that dropped out of this run before the rollout: the reason a role recorded on it
    (``docker_host_error``: its Docker engine does not answer), else the generic one."""
    facts = hostvars.get(host) or {}
    return {
        "state": "dropped",
        "before": "",
        "target": target,
        "cause": facts.get("docker_host_error") or DROPPED_CAUSE,
    }


class RolloutError(ValueError):
    """Invalid rollout input; the message names the variable."""


def _is_default(value):
    return value is None or (isinstance(value, str) and not value.strip())


def batch_size(value, name="aic_rollout_batch_size", default="25%"):
    """A batch size as Ansible's ``serial`` takes it: a positive int or a percentage string ``"1%".."100%"``."""
    if _is_default(value):
        value = default
    if isinstance(value, bool):
        raise RolloutError(f"{name}: expected a node count or a percentage like 25%, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise RolloutError(f"{name}: {value} must be at least 1 node")
        return value
    text = str(value).strip()
    if text.isdigit():
        return batch_size(int(text), name, default)
    match = PERCENT_RE.match(text)
    if not match or not 0 < float(match.group(1)) <= 100:
        raise RolloutError(f"{name}: expected a node count or a percentage in (0, 100]%, got {value!r}")
    return f"{match.group(1)}%"


def serial(canary=None, size=None):
    """The play's ``serial``: ``[canary, size]`` (the canary batch first), or ``[size]`` without a canary."""
    if _is_default(canary):
        canary = 1
    if isinstance(canary, bool) or not str(canary).strip().isdigit():
        raise RolloutError(f"aic_rollout_canary: expected a node count (0 = no canary batch), got {canary!r}")
    canary = int(str(canary).strip())
    size = batch_size(size)
    return [canary, size] if canary > 0 else [size]


def max_fail_percentage(value):
    if _is_default(value):
        return 0
    if isinstance(value, bool) or not str(value).strip().isdigit() or not 0 <= int(str(value).strip()) <= 100:
        raise RolloutError(f"aic_rollout_max_fail_percentage: expected 0..100, got {value!r}")
    return int(str(value).strip())


def node_line(host, outcome, reached):
    """One summary line for ``host``; ``outcome`` is what the node recorded (None when it never started)."""
    if not outcome:
        return f"{host}: not reached (untouched)"
    before = outcome.get("before") or "none"
    after = outcome.get("after") or before
    state = outcome.get("state", "started")
    if state == "started" and not reached:
        return f"{host}: UNREACHABLE or lost during the rollout ({before} -> {outcome.get('target') or '?'})"
    if state == "healthy":
        return f"{host}: healthy, unchanged ({after})" if before == after else f"{host}: healthy, {before} -> {after}"
    if state == "rolled_back":
        return f"{host}: FAILED on {outcome.get('target')} ({outcome.get('cause')}); rolled back to {after}, healthy"
    if state == "lost":
        return f"{host}: LOST from the job before its turn ({outcome.get('cause')}); untouched ({before})"
    if state == "unreachable":
        return f"{host}: UNREACHABLE when its turn came ({outcome.get('cause')}); untouched ({before})"
    if state == "dropped":
        return f"{host}: DROPPED before the rollout ({outcome.get('cause')}); untouched"
    if state == "failed":
        return f"{host}: FAILED on {outcome.get('target')} ({outcome.get('cause')}); {outcome.get('restore') or 'not restored'}"
    return f"{host}: {state}"


def summary(hosts_all, outcomes, reached):
    """Per-node lines and counts. ``outcomes`` maps host -> recorded outcome; ``reached`` the hosts still in the play."""
    lines, counts = [], {}
    for host in hosts_all:
        outcome = outcomes.get(host) or None
        line = node_line(host, outcome, host in reached)
        lines.append(line)
        if not outcome:
            key = "not_reached"
        elif outcome.get("state", "started") == "started" and host not in reached:
            key = "unreachable"
        else:
            key = outcome.get("state", "started")
        counts[key] = counts.get(key, 0) + 1
    return {"lines": lines, "counts": counts}


def unfinished_nodes(hosts, outcomes):
    """One line per host that the rollout did not finish, asked after the last batch: Slurm lost it (with Slurm's
    reason) or it could not be reached when its turn came (both untouched), or it went away during its turn."""
    out = []
    for host in hosts:
        outcome = outcomes.get(host) or {}
        if outcome.get("state") == "lost":
            out.append(f"{host} is no longer part of the job ({outcome.get('cause') or 'Slurm lost it'})")
        elif outcome.get("state") == "unreachable":
            out.append(f"{host} could not be reached when its turn came ({outcome.get('cause') or 'no connection'})")
        elif outcome.get("state") == "dropped":
            out.append(f"{host} dropped out before the rollout ({outcome.get('cause') or DROPPED_CAUSE})")
        elif outcome.get("state") == "started":
            # Its turn started and never ended: the connection went away during it (asked after the last batch).
            out.append(
                f"{host} went away during its turn (its containers may be half replaced: check it, deploy again)"
            )
    return out


def serving_nodes(hosts, outcomes):
    """The hosts whose turn ran to its end and that serve (healthy or rolled back), in ``hosts`` order."""
    return [h for h in hosts if (outcomes.get(h) or {}).get("state") in SERVING_STATES]
