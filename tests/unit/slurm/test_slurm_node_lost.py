"""slurm_node_lost: whether Slurm still counts on a node of the job, from `scontrol show node -o NAME`."""

from __future__ import annotations

import pytest

from ansible_collections.aic.stack.plugins.filter import slurm as slurm_filters
from ansible_collections.aic.stack.plugins.module_utils.slurm import node_lost

# Slurm 22.05's one-line record (this machine's single-node Slurm), with the state put in by each case.
RECORD = (
    "NodeName=node3 Arch=x86_64 CoresPerSocket=1 CPUAlloc=1 CPUEfctv=2 CPUTot=2 Gres=gpu:2 NodeAddr=10.78.0.13 "
    "Version=22.05.8 RealMemory=7000 Sockets=2 Boards=1 State={state} ThreadsPerCore=1 Partitions=rehearsal "
    "CfgTRES=cpu=2,mem=7000M,billing=2,gres/gpu=2 AllocTRES=cpu=1,gres/gpu=1{reason}"
)


def record(state, reason=""):
    return RECORD.format(state=state, reason=f" Reason={reason}" if reason else "")


@pytest.mark.parametrize("state", ["IDLE", "MIXED", "ALLOCATED", "ALLOCATED+COMPLETING", "MIXED+PLANNED"])
def test_a_node_that_answers_is_fine(state):
    assert node_lost(record(state)) == ""


@pytest.mark.parametrize(
    ("state", "reason", "expected"),
    [
        ("MIXED+NOT_RESPONDING", "", "Slurm says State=MIXED+NOT_RESPONDING"),
        ("IDLE*", "", "Slurm says State=IDLE*"),
        ("DOWN+NOT_RESPONDING", "Not responding [slurm@2026-12-01T14:40:00]",
         "Slurm says State=DOWN+NOT_RESPONDING, Reason=Not responding [slurm@2026-12-01T14:40:00]"),
        ("MIXED+DRAIN", "disk full", "Slurm says State=MIXED+DRAIN, Reason=disk full"),
    ],
)  # fmt: skip
def test_a_node_slurm_lost_or_takes_away_is_named_with_its_reason(state, reason, expected):
    assert node_lost(record(state, reason)) == expected


def test_a_node_slurm_does_not_know_is_lost():
    assert node_lost("Node node9 not found") == "Slurm does not know the node (Node node9 not found)"
    assert node_lost("") == "Slurm does not know the node (no output)"


def test_the_filter_is_registered():
    assert slurm_filters.FilterModule().filters()["slurm_node_lost"](record("DOWN")) == "Slurm says State=DOWN"
