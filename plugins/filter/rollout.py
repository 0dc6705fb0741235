# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the rolling rollout (playbooks/stack.yml): its batches and its per-node summary."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.module_utils import release, rollout


def rollout_serial(canary, batch_size=None):
    """``serial`` of the rollout play: the canary batch, then batches of ``batch_size`` (count or percentage)."""
    try:
        return rollout.serial(canary, batch_size)
    except rollout.RolloutError as exc:
        raise AnsibleFilterError(f"Invalid input: {exc}") from exc


def rollout_max_fail(value):
    try:
        return rollout.max_fail_percentage(value)
    except rollout.RolloutError as exc:
        raise AnsibleFilterError(f"Invalid input: {exc}") from exc


def deploy_every_node(hostvars, hosts, fact, key=None):
    """True when every host of ``hosts`` has the fact ``fact`` (its ``key`` when given) set to true; False for no host,
    or one that has no such fact (it failed or was not reached before setting it)."""
    hosts = list(hosts)
    if not hosts:
        return False
    for host in hosts:
        value = hostvars[host].get(fact) if host in hostvars else None
        if key is not None:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not True:
            return False
    return True


def rollout_summary(hosts_all, hostvars, reached, fact="aic_rollout_outcome"):
    """Summary lines of every node of the play from the outcome fact each node recorded."""
    outcomes = {h: (hostvars[h].get(fact) if h in hostvars else None) for h in hosts_all}
    return rollout.summary(list(hosts_all), outcomes, set(reached))


def rollout_unfinished(hosts, hostvars, fact="aic_rollout_outcome"):
    """The nodes the rollout did not finish: lost by Slurm or not reachable (untouched), or gone during their turn."""
    outcomes = {h: (hostvars[h].get(fact) if h in hostvars else None) for h in hosts}
    return rollout.unfinished_nodes(list(hosts), outcomes)


def rollout_rolled(hosts, hostvars, fact="aic_rollout_outcome"):
    """The nodes whose turn ran to its end and that serve (healthy, or rolled back to their last healthy release)."""
    outcomes = {h: (hostvars[h].get(fact) if h in hostvars else None) for h in hosts}
    return rollout.serving_nodes(list(hosts), outcomes)


def rollout_dropped(host, hostvars, target):
    """The outcome of a node that dropped out of this run before the rollout (why, when a role recorded it)."""
    return rollout.dropped_outcome(host, hostvars, target)


def release_deployed_record(release_record, when, last_healthy=None):
    """The deployed.json content for a release that passed health (deployed_at kept when the image is the same)."""
    return release.deployed_record(release_record, when, last_healthy or None)


class FilterModule:
    def filters(self):
        return {
            "rollout_serial": rollout_serial,
            "rollout_max_fail": rollout_max_fail,
            "rollout_summary": rollout_summary,
            "rollout_unfinished": rollout_unfinished,
            "rollout_rolled": rollout_rolled,
            "rollout_dropped": rollout_dropped,
            "release_deployed_record": release_deployed_record,
            "deploy_every_node": deploy_every_node,
        }
