"""The rollout's batches and per-node summary (plugins/module_utils/rollout.py, plugins/filter/rollout.py)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.filter import rollout as rollout_filter
from ansible_collections.aic.stack.plugins.module_utils import rollout


@pytest.mark.parametrize(
    ("canary", "size", "expected"),
    [
        (None, None, [1, "25%"]),
        ("", "", [1, "25%"]),
        (1, "100%", [1, "100%"]),
        ("2", "3", [2, 3]),
        (0, "50%", ["50%"]),
        (1, " 12.5 % ", [1, "12.5%"]),
    ],
)
def test_serial(canary, size, expected):
    assert rollout.serial(canary, size) == expected


@pytest.mark.parametrize(
    ("canary", "size", "field"),
    [
        (-1, None, "aic_rollout_canary"),
        ("one", None, "aic_rollout_canary"),
        (True, None, "aic_rollout_canary"),
        (1, 0, "aic_rollout_batch_size"),
        (1, "0%", "aic_rollout_batch_size"),
        (1, "150%", "aic_rollout_batch_size"),
        (1, "half", "aic_rollout_batch_size"),
    ],
)
def test_bad_batches_name_the_field(canary, size, field):
    with pytest.raises(rollout.RolloutError, match=field):
        rollout.serial(canary, size)
    with pytest.raises(AnsibleFilterError, match=f"Invalid input: {field}"):
        rollout_filter.rollout_serial(canary, size)


def test_max_fail_percentage():
    assert rollout.max_fail_percentage("") == 0
    assert rollout.max_fail_percentage("30") == 30
    with pytest.raises(rollout.RolloutError, match="aic_rollout_max_fail_percentage"):
        rollout.max_fail_percentage(101)


def test_summary_names_every_node_and_what_happened():
    outcomes = {
        "node1": {"state": "rolled_back", "before": "img:a", "after": "img:a", "target": "img:b", "cause": "vLLM: 500"},
        "node2": {"state": "healthy", "before": "img:a", "after": "img:b", "target": "img:b"},
        "node3": {"state": "started", "before": "img:a", "target": "img:b"},
        "node4": {"state": "healthy", "before": "img:b", "after": "img:b", "target": "img:b"},
        "node5": {"state": "failed", "before": "none", "target": "img:b", "cause": "LMCache", "restore": ""},
    }
    hosts = ["node1", "node2", "node3", "node4", "node5", "node6"]
    out = rollout.summary(hosts, outcomes, reached={"node2", "node4", "node6"})
    assert out["lines"] == [
        "node1: FAILED on img:b (vLLM: 500); rolled back to img:a, healthy",
        "node2: healthy, img:a -> img:b",
        "node3: UNREACHABLE or lost during the rollout (img:a -> img:b)",
        "node4: healthy, unchanged (img:b)",
        "node5: FAILED on img:b (LMCache); not restored",
        "node6: not reached (untouched)",
    ]
    assert out["counts"] == {"rolled_back": 1, "healthy": 2, "unreachable": 1, "failed": 1, "not_reached": 1}


def test_summary_filter_reads_the_outcome_fact():
    hostvars = {"a": {"aic_rollout_outcome": {"state": "healthy", "before": "x:1", "after": "x:2"}}, "b": {}}
    out = rollout_filter.rollout_summary(["a", "b"], hostvars, ["a", "b"])
    assert out["lines"] == ["a: healthy, x:1 -> x:2", "b: not reached (untouched)"]


def test_a_node_slurm_lost_before_its_turn_is_named_and_untouched():
    outcomes = {"node3": {"state": "lost", "before": "img:a", "target": "img:b", "cause": "Slurm says State=DOWN"}}
    out = rollout.summary(["node3"], outcomes, reached=set())
    assert out["lines"] == ["node3: LOST from the job before its turn (Slurm says State=DOWN); untouched (img:a)"]
    assert out["counts"] == {"lost": 1}


def test_the_unfinished_nodes_are_named_with_slurm_s_reason():
    hostvars = {
        "node1": {"aic_rollout_outcome": {"state": "healthy"}},
        "node3": {"aic_rollout_outcome": {"state": "lost", "cause": "Slurm says State=DOWN"}},
        "node4": {},
    }
    assert rollout_filter.rollout_unfinished(["node1", "node3", "node4", "node9"], hostvars) == [
        "node3 is no longer part of the job (Slurm says State=DOWN)"
    ]


def test_a_node_not_reachable_when_its_turn_came_is_named_and_untouched():
    outcomes = {"node2": {"state": "unreachable", "before": "img:a", "target": "img:b", "cause": "timed out after 30s"}}
    out = rollout.summary(["node2"], outcomes, reached=set())
    assert out["lines"] == ["node2: UNREACHABLE when its turn came (timed out after 30s); untouched (img:a)"]
    assert out["counts"] == {"unreachable": 1}


def test_after_the_last_batch_every_node_that_did_not_finish_is_named():
    hostvars = {
        "node1": {"aic_rollout_outcome": {"state": "healthy"}},
        "node2": {"aic_rollout_outcome": {"state": "unreachable", "cause": "timed out"}},
        "node3": {"aic_rollout_outcome": {"state": "lost", "cause": "Slurm says State=DOWN"}},
        "node4": {"aic_rollout_outcome": {"state": "started"}},
        "node5": {"aic_rollout_outcome": {"state": "rolled_back"}},
        "node6": {},
    }
    hosts = [f"node{i}" for i in range(1, 8)]
    assert rollout_filter.rollout_unfinished(hosts, hostvars) == [
        "node2 could not be reached when its turn came (timed out)",
        "node3 is no longer part of the job (Slurm says State=DOWN)",
        "node4 went away during its turn (its containers may be half replaced: check it, deploy again)",
    ]
    # The nodes that serve after their turn: the healthy and the rolled back ones, in inventory order.
    assert rollout_filter.rollout_rolled(hosts, hostvars) == ["node1", "node5"]
    assert rollout_filter.rollout_rolled(["node9"], hostvars) == []


def test_a_node_that_dropped_out_before_the_rollout_is_named_with_its_engine_s_error():
    engine = "its Docker engine does not answer (Error connecting: ... No such file or directory)"
    hostvars = {"node2": {"docker_host_error": engine}, "node3": {"aic_plan": {}}}
    dropped = {h: rollout_filter.rollout_dropped(h, hostvars, "img:b") for h in ("node2", "node3", "node4")}
    assert dropped["node2"] == {"state": "dropped", "before": "", "target": "img:b", "cause": engine}
    # Unreachable from the start, or failed by a play that recorded nothing: the generic reason.
    assert dropped["node3"]["cause"] == dropped["node4"]["cause"] == rollout.DROPPED_CAUSE
    out = rollout.summary(["node1", "node2"], {"node1": {"state": "healthy", "before": "img:b"}, **dropped}, {"node1"})
    assert out["lines"] == [
        "node1: healthy, unchanged (img:b)",
        f"node2: DROPPED before the rollout ({engine}); untouched",
    ]
    assert out["counts"] == {"healthy": 1, "dropped": 1}
    facts = {h: {"aic_rollout_outcome": o} for h, o in dropped.items()}
    assert rollout_filter.rollout_unfinished(["node2", "node3"], facts) == [
        f"node2 dropped out before the rollout ({engine})",
        f"node3 dropped out before the rollout ({rollout.DROPPED_CAUSE})",
    ]
    assert rollout_filter.rollout_rolled(["node2"], facts) == []
