"""Per-node GPU ids of a job (plugins/module_utils/slurm.py): the detail records of ``scontrol show job -d`` (Slurm)
and the output of a site's ``gpu_ids_command`` (SPUR, whose GPUs come from the controller's GetJob call)."""

from __future__ import annotations

import pytest

from ansible_collections.aic.stack.plugins.module_utils import slurm

# Slurm 22.05.8, scripts/slurm-up.sh (2 fake gpu gres), `sbatch --gres=gpu:2 --wrap 'sleep 60'`, `scontrol show job -d`.
SINGLE_NODE = """\
JobId=1 JobName=wrap
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=(null) QOS=(null)
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   DerivedExitCode=0:0
   RunTime=00:00:01 TimeLimit=UNLIMITED TimeMin=N/A
   Partition=debug AllocNode:Sid=localhost:3172
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=vm
   BatchHost=vm
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=1,node=1,billing=1
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=gpu:2
     Nodes=vm CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)
   Command=(null)
   WorkDir=/tmp
   StdErr=/dev/null
   StdIn=/dev/null
   StdOut=/dev/null
   Power=
   TresPerNode=gres:gpu:2
"""

# The same job with -o (what the inventory plugin asks for): the detail record is inline.
SINGLE_NODE_ONE_LINE = (
    "JobId=1 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A JobState=RUNNING Reason=None "
    "Partition=debug AllocNode:Sid=localhost:3172 ReqNodeList=(null) ExcNodeList=(null) NodeList=vm BatchHost=vm "
    "NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 Socks/Node=* "
    "NtasksPerN:B:S:C=0:0:*:* CoreSpec=* JOB_GRES=gpu:2   Nodes=vm CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1) "
    "MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK "
    "Command=(null) WorkDir=/tmp StdErr=/dev/null StdIn=/dev/null StdOut=/dev/null Power= TresPerNode=gres:gpu:2\n"
)

# Three MI355X nodes, typed gres, two node sets with different indices (Slurm 23.02 layout).
MULTI_NODE_TYPED = """\
JobId=4711 JobName=cliff
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   Partition=defq AllocNode:Sid=login01:81234
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=gpu[01-03]
   BatchHost=gpu01
   NumNodes=3 NumCPUs=48 NumTasks=3 CPUs/Task=16 ReqB:S:C:T=0:0:*:*
   ReqTRES=cpu=48,mem=192G,node=3,billing=48,gres/gpu=6
   AllocTRES=cpu=48,mem=192G,node=3,billing=48,gres/gpu=6,gres/gpu:mi355x=6
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=gpu:mi355x:6
     Nodes=gpu[01-02] CPU_IDs=0-15 Mem=65536 GRES=gpu:mi355x:2(IDX:0-1)
     Nodes=gpu03 CPU_IDs=32-47 Mem=65536 GRES=gpu:mi355x:2(IDX:4,6)
   MinCPUsNode=16 MinMemoryNode=64G MinTmpDiskNode=0
   Features=GFX942&NVME DelayBoot=00:00:00
   TresPerNode=gres:gpu:mi355x:2
"""


def test_single_node_job_multi_line_and_one_line():
    assert slurm.parse_job_details(SINGLE_NODE) == [{"nodes": "vm", "gres": "gpu:2(IDX:0-1)"}]
    assert slurm.job_gpu_ids(SINGLE_NODE) == {"vm": ["0", "1"]}
    assert slurm.job_gpu_ids(SINGLE_NODE_ONE_LINE) == {"vm": ["0", "1"]}
    # The job's other fields still parse from the -d -o output (NodeList, GPUs per node).
    fields = slurm.parse_scontrol_job(SINGLE_NODE_ONE_LINE)
    assert fields["NodeList"] == "vm"
    assert slurm.gpus_per_node(fields) == 2


def test_multi_node_typed_gres_per_node_set():
    assert slurm.parse_job_details(MULTI_NODE_TYPED) == [
        {"nodes": "gpu[01-02]", "gres": "gpu:mi355x:2(IDX:0-1)"},
        {"nodes": "gpu03", "gres": "gpu:mi355x:2(IDX:4,6)"},
    ]
    assert slurm.job_gpu_ids(MULTI_NODE_TYPED) == {"gpu01": ["0", "1"], "gpu02": ["0", "1"], "gpu03": ["4", "6"]}
    assert slurm.gpus_per_node(slurm.parse_scontrol_job(MULTI_NODE_TYPED)) == 2


def test_one_line_form_with_several_records():
    one_line = " ".join(line.strip() for line in MULTI_NODE_TYPED.splitlines())
    assert slurm.job_gpu_ids(one_line) == {"gpu01": ["0", "1"], "gpu02": ["0", "1"], "gpu03": ["4", "6"]}


def test_the_expansion_is_the_callers():
    seen = []

    def expand(hostlist):
        seen.append(hostlist)
        return slurm.expand_hostlist(hostlist)

    slurm.job_gpu_ids(MULTI_NODE_TYPED, expand=expand)
    assert seen == ["gpu[01-02]", "gpu03"]


def test_a_job_without_gpus_has_empty_ids_on_every_node():
    # Real Slurm 22.05 for `sbatch --wrap` without --gres: the record is there with an empty GRES.
    out = "   JOB_GRES=(null)\n     Nodes=vm CPU_IDs=0 Mem=0 GRES=\n   MinCPUsNode=1 MinMemoryNode=0\n"
    assert slurm.job_gpu_ids(out) == {"vm": []}


def test_a_pending_job_has_no_details():
    out = "JobId=3 JobName=wrap JobState=PENDING Reason=Resources NodeList=(null) NumNodes=1 TresPerNode=gres:gpu:1\n"
    assert slurm.parse_job_details(out) == []
    assert slurm.job_gpu_ids(out) == {}


def test_other_gres_and_a_node_that_got_none():
    out = (
        "     Nodes=n1 CPU_IDs=0-7 Mem=1024 GRES=gpu:a100:1(IDX:0),gpu:v100:1(IDX:3),nic:1(IDX:0)\n"
        "     Nodes=n2 CPU_IDs=0-7 Mem=1024 GRES=nic:1(IDX:1)\n"
        "     Nodes=n3 CPU_IDs=0-7 Mem=1024 GRES=\n"
    )
    assert slurm.job_gpu_ids(out) == {"n1": ["0", "3"], "n2": [], "n3": []}


def test_old_gres_idx_key_and_count_only_gres():
    # Before Slurm 17.11 the record said GRES_IDX=gpu(IDX:0-1).
    assert slurm.job_gpu_ids("     Nodes=old1 CPU_IDs=0 Mem=0 GRES_IDX=gpu(IDX:0-1)\n") == {"old1": ["0", "1"]}
    # A gres without device files is counted, not indexed: the ids are unknown (None), not "none".
    assert slurm.job_gpu_ids("     Nodes=c[1-2] CPU_IDs=0 Mem=0 GRES=gpu(CNT:2)\n") == {"c1": None, "c2": None}


@pytest.mark.parametrize(
    ("gres", "ids"),
    [
        ("gpu:2(IDX:0-1)", ["0", "1"]),
        ("gpu:4(IDX:0,2-3)", ["0", "2", "3"]),
        ("gpu:mi355x:2(IDX:0-1)", ["0", "1"]),
        ("gpu:mi355x:8(IDX:0-7)", [str(i) for i in range(8)]),
        ("gpu:a:1(IDX:0),gpu:b:1(IDX:3),nic:1(IDX:0)", ["0", "3"]),
        ("gpu:1(IDX:N/A)", []),
        ("nic:1(IDX:0)", []),
        ("", []),
        ("(null)", []),
        ("gpu:0", []),
        ("gpu(CNT:2)", None),
        ("gpu:mi355x(CNT:1)", None),
        ("gpu:2", None),
    ],
)
def test_gres_gpu_ids(gres, ids):
    assert slurm.gres_gpu_ids(gres) == ids


def test_expand_index_list():
    assert slurm.expand_index_list("0,2-3") == ["0", "2", "3"]
    assert slurm.expand_index_list("7") == ["7"]
    assert slurm.expand_index_list("") == []
    with pytest.raises(slurm.SlurmSpecError, match="bad GPU index range"):
        slurm.expand_index_list("3-1")
    with pytest.raises(slurm.SlurmSpecError, match="unrecognised GRES entry"):
        slurm.gres_gpu_ids("gpu:2(IDX:0-1")


# -- gpu_ids_command (SPUR) -------------------------------------------------------------------------------------------
def test_gpu_ids_argv_replaces_the_placeholders_in_each_word():
    assert slurm.gpu_ids_argv("spur-gpu-allocation {job_id}", "4711") == ["spur-gpu-allocation", "4711"]
    assert slurm.gpu_ids_argv("'/shared nfs/gpu ids' --controller={controller} {job_id}", "7", "ctl:6817") == [
        "/shared nfs/gpu ids",
        "--controller=ctl:6817",
        "7",
    ]
    # Other braces are the command's own (an awk program, say).
    assert slurm.gpu_ids_argv("awk '{print $1}' {job_id}", "7") == ["awk", "{print $1}", "7"]


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("", "gpu_ids_command is empty"),
        ("cmd {jobid}", r"unknown placeholder \{jobid\}"),
        ("cmd 'unterminated", "No closing quotation"),
    ],
)
def test_gpu_ids_argv_bad_templates(template, message):
    with pytest.raises(slurm.SlurmSpecError, match=message):
        slurm.gpu_ids_argv(template, "1")


HOSTS = ["crsuse2-m2m-001", "crsuse2-m2m-002"]


@pytest.mark.parametrize(
    ("output", "ids"),
    [
        # What .slurm/spur-gpu-allocation prints: one line for the job, every node gets it.
        ("0,1\n", {"crsuse2-m2m-001": ["0", "1"], "crsuse2-m2m-002": ["0", "1"]}),
        ("4\n", {"crsuse2-m2m-001": ["4"], "crsuse2-m2m-002": ["4"]}),
        ("0 1, 2\n", {"crsuse2-m2m-001": ["0", "1", "2"], "crsuse2-m2m-002": ["0", "1", "2"]}),
        ("0-3\n", {"crsuse2-m2m-001": ["0", "1", "2", "3"], "crsuse2-m2m-002": ["0", "1", "2", "3"]}),
        ("GPU-3f2a-11\n", {"crsuse2-m2m-001": ["GPU-3f2a-11"], "crsuse2-m2m-002": ["GPU-3f2a-11"]}),
        ("", {"crsuse2-m2m-001": [], "crsuse2-m2m-002": []}),
        ("# no GPUs\n\n", {"crsuse2-m2m-001": [], "crsuse2-m2m-002": []}),
        # Per-node lines, a hostlist too; a node without a line got none.
        ("crsuse2-m2m-001: 0,1\ncrsuse2-m2m-002: 5\n", {"crsuse2-m2m-001": ["0", "1"], "crsuse2-m2m-002": ["5"]}),
        ("crsuse2-m2m-[001-002]: 2,3\n", {"crsuse2-m2m-001": ["2", "3"], "crsuse2-m2m-002": ["2", "3"]}),
        ("crsuse2-m2m-002:6\n", {"crsuse2-m2m-001": [], "crsuse2-m2m-002": ["6"]}),
        ("crsuse2-m2m-001:\ncrsuse2-m2m-002: 0\n", {"crsuse2-m2m-001": [], "crsuse2-m2m-002": ["0"]}),
    ],
)
def test_parse_gpu_ids(output, ids):
    assert slurm.parse_gpu_ids(output, HOSTS) == ids


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("0,1\n2,3\n", "2 lines of ids without node names"),
        ("crsuse2-m2m-001: 0\n1\n", "mixes 'NODE: IDS' lines with a plain id line"),
        ("crsuse2-m2m-001.cluster: 0\n", "node 'crsuse2-m2m-001.cluster' is not a node of the job"),
        ("crsuse2-m2m-001: 0\ncrsuse2-m2m-[001-002]: 1\n", "node 'crsuse2-m2m-001' is listed twice"),
        (": 0\n", "no node name before ':'"),
        ("gpu0\n", "'gpu0' is not a GPU index, range"),
        ("crsuse2-m2m-001: card1\n", r"gpu_ids_command \(crsuse2-m2m-001\): 'card1' is not a GPU index"),
        ("error: connection refused\n", "'connection' is not a GPU index"),
    ],
)
def test_parse_gpu_ids_bad_output(output, message):
    with pytest.raises(slurm.SlurmSpecError, match=message):
        slurm.parse_gpu_ids(output, HOSTS)
