"""Hostile `scontrol show -o` output: every parser returns, or rejects with its typed error, and a
job's text never changes whose job, whose nodes or whose files goodput sees.

Jobs' owners choose their names, comments, paths and burst-buffer strings, which `scontrol`
prints raw. So examples start from recorded 22.05 output (and two synthetic 24.11 lines below)
and mutate it the way an attacker would: keys injected into free-text values, newlines, repeated
keys, huge numbers, values of the wrong type. Two properties sit on top of "never crashes": a
record read for job N is job N, and replacing the comment (or the name) of a real record never
changes its security fields without an error. The JSON outputs are in test_fuzz_slurm_json.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.scheduler import JobInfo
from goodput.slurm.errors import SlurmRecordError
from goodput.slurm.records import job_from_record, node_from_record, split_records
from goodput.slurm.unambiguous import JOB_KEY_ORDER, NODE_KEYS, job_record, node_record
from tests.fuzz.harness import rejects_cleanly
from tests.fuzz.slurm_strategies import DIGITS, FIXTURES, fixture_lines, numbers

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

# 24.11 shapes of `scontrol show -o` (synthetic, from Slurm's print order: ReqTRES/AllocTRES, no
# Power, keys after a node's Reason); replace with recordings once a Debian 13 lab runs.
JOB_24_11 = (
    "JobId=101 JobName=train-llm UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A Priority=4294901759 Nice=0 "
    "Account=root QOS=normal JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 "
    "Reboot=0 ExitCode=0:0 RunTime=00:00:09 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T09:28:45 "
    "EligibleTime=2026-11-29T09:28:45 AccrueTime=2026-11-29T09:28:45 StartTime=2026-11-29T09:28:46 "
    "EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T09:28:46 "
    "Scheduler=Main Partition=gpu AllocNode:Sid=login1:2655 ReqNodeList=(null) ExcNodeList=(null) "
    "NodeList=node[1-2] BatchHost=node1 NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "ReqTRES=cpu=2,mem=8000M,node=2,billing=2,gres/gpu=2 AllocTRES=cpu=2,mem=8000M,node=2,billing=2,gres/gpu=2 "
    "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=4000M MinTmpDiskNode=0 "
    "Features=(null) DelayBoot=00:00:00 OverSubscribe=NO Contiguous=0 Licenses=(null) Network=(null) "
    "Command=/work/train.sbatch WorkDir=/work Comment=goodput:opt-in  StdErr=/work/out-101.log StdIn=/dev/null "
    "StdOut=/work/out-101.log TresPerNode=gres/gpu:1\n")
NODE_24_11 = (
    "NodeName=node3 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=0.01 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:8 NodeAddr=node3 NodeHostName=node3 Version=24.11.1 "
    "OS=Linux 6.12.0 #1 SMP PREEMPT_DYNAMIC Debian 6.12.9-1 RealMemory=4000 AllocMem=0 FreeMem=3000 Sockets=4 "
    "Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug,gpu "
    "BootTime=2026-11-29T09:12:29 SlurmdStartTime=2026-11-29T09:22:53 LastBusyTime=2026-11-29T09:28:28 "
    "ResumeAfterTime=None CfgTRES=cpu=4,mem=4000M,billing=4 AllocTRES= CurrentWatts=0 AveWatts=0 "
    "Reason=goodput:inc-7f3a: xid 79 [root@2026-11-29T09:28:47] Comment=rack 3\n")


JOB_LINES = sorted(set(fixture_lines(*(p.name for p in FIXTURES.glob("scontrol-job*-22.05.txt"))))
                   | {JOB_24_11.strip()})
NODE_LINES = [*fixture_lines("scontrol-nodes-all-22.05.txt"), NODE_24_11.strip()]
RUNNING = (FIXTURES / "scontrol-job-running-22.05.txt").read_text()

key_names = st.one_of(st.sampled_from(JOB_KEY_ORDER), st.sampled_from(sorted(NODE_KEYS)),
                      st.sampled_from(["Team", "Foo", "X/Y", "A:B", "ReasonUser", "jobid"]))
values = st.one_of(numbers, st.sampled_from(["root(0)", "goodput-alice(999)", "node4", "node[1-99999]x[1-99999]",
                                             "gpu", "/etc/shadow", "RUNNING", "1", "0", "(null)", "a[1]" * 300,
                                             "[root@2020-01-01T00:00:00]", "goodput:opt-in", ""]),
                   st.text(max_size=20))
key_tokens = st.builds(lambda k, v: f"{k}={v}", key_names, values)
words = st.one_of(key_tokens, st.sampled_from(["", " ", "  ", "\n", "\t", "[", "]", "=", "x=y", "a b"]),
                  st.text(max_size=12))
free_text = st.lists(words, max_size=12).map(" ".join)


@st.composite
def mutated_line(draw: st.DrawFn, lines: list[str]) -> str:
    tokens = draw(st.sampled_from(lines)).split(" ")
    for op in draw(st.lists(st.sampled_from(["inject", "number", "newline", "dup", "drop", "swap", "spaces",
                                             "splice"]), max_size=5)):
        at = draw(st.integers(0, len(tokens)))
        if op == "inject":
            tokens.insert(at, draw(key_tokens))
        elif op == "number" and tokens:
            index = min(at, len(tokens) - 1)
            runs = list(DIGITS.finditer(tokens[index]))
            if runs:
                run = draw(st.sampled_from(runs))
                tokens[index] = tokens[index][:run.start()] + draw(numbers) + tokens[index][run.end():]
        elif op == "newline":
            tokens.insert(at, "\n" + draw(st.sampled_from(lines)).split(" ")[0])
        elif op == "dup" and tokens:
            tokens.insert(at, draw(st.sampled_from(tokens)))
        elif op == "drop" and tokens:
            tokens.pop(min(at, len(tokens) - 1))
        elif op == "swap" and len(tokens) > 1:
            other = draw(st.integers(0, len(tokens) - 1))
            index = min(at, len(tokens) - 1)
            tokens[index], tokens[other] = tokens[other], tokens[index]
        elif op == "spaces":
            tokens.insert(at, " " * draw(st.integers(0, 3000)))
        elif op == "splice":
            tokens.insert(at, draw(free_text))
    return " ".join(tokens)


def _asked_id(line: str) -> str:
    first = line.split(" ", 1)[0]
    own = first.removeprefix("JobId=")
    return own if first.startswith("JobId=") and own.isascii() and own.isdigit() and len(first) < 16 else "8"


@given(mutated_line(JOB_LINES), st.booleans())
def test_scontrol_job_text(line: str, own_id: bool) -> None:
    job_id = _asked_id(line) if own_id else "8"
    rejects_cleanly("scontrol-split-records", lambda: split_records(line), (SlurmRecordError,))
    record = rejects_cleanly("scontrol-job-text", lambda: job_record(line, job_id), (SlurmRecordError,))
    if record is not None:
        job = job_from_record_cleanly(record)
        assert job is None or job.job_id == job_id  # the record read is the job asked for


def job_from_record_cleanly(record: Any) -> Any:
    return rejects_cleanly("scontrol-job-record", lambda: job_from_record(record), (SlurmRecordError,))


def _own_record(line: str) -> dict[str, str] | None:
    try:
        return job_record(line, _asked_id(line))
    except SlurmRecordError:  # the forgery fixtures, refused as they should be
        return None


# What the text parser hands the record reader: a real job's key=value pairs (a parsed fixture
# line), with values swapped for hostile ones and keys dropped. Mutated text rarely parses (the
# text parser refuses most of it, by design), so the record reader is fed records directly.
RECORDS = [record for record in map(_own_record, JOB_LINES) if record is not None]
record_values = st.one_of(numbers, free_text, st.sampled_from(
    ["", "(null)", "Unknown", "None", "N/A", "2026-13-45T99:99:99", "node[1-99999]", "1-00:00:00", "INVALID"]))


@st.composite
def job_records(draw: st.DrawFn) -> dict[str, str]:
    record = dict(draw(st.sampled_from(RECORDS)))
    for key in draw(st.lists(st.sampled_from(sorted({k for r in RECORDS for k in r})), max_size=6)):
        if draw(st.booleans()):
            record[key] = draw(record_values)
        else:
            record.pop(key, None)
    return record


@given(job_records())
def test_scontrol_job_record(record: dict[str, str]) -> None:
    job = job_from_record_cleanly(record)
    # (In service the text parser has already checked JobId is the job asked for.)
    asked = record.get("JobId", "")
    assert job is None or not asked.isascii() or not asked.isdigit() or job.job_id == asked


@given(mutated_line(NODE_LINES), st.sampled_from(["node1", "node2", "node3", "node4"]))
def test_scontrol_node_text(line: str, name: str) -> None:
    record = rejects_cleanly("scontrol-node-text", lambda: node_record(line, name), (SlurmRecordError,))
    if record is not None:
        assert node_from_record(record).name == name


SECURITY_FIELDS = ("job_id", "user", "user_id", "group_id", "nodes", "partition", "state", "restart_count",
                   "requeue", "excluded_nodes", "stdout_path", "stderr_path", "work_dir", "exit_code")
SECURITY_KEYS = ("JobId", "UserId", "GroupId", "NodeList", "Partition", "JobState", "Restarts", "Requeue",
                 "BatchFlag", "ExcNodeList", "ReqNodeList", "StdOut", "StdErr", "StdIn", "WorkDir")


def _fields(job: JobInfo) -> tuple[object, ...]:
    return tuple(getattr(job, name) for name in SECURITY_FIELDS)


ORIGINAL_RECORD = job_record(RUNNING, "8")
ORIGINAL = _fields(job_from_record(ORIGINAL_RECORD))


@given(st.one_of(free_text, st.text(max_size=300)), st.sampled_from(["Comment", "JobName"]))
def test_comment_or_name_never_changes_the_security_fields(text: str, where: str) -> None:
    if where == "Comment":
        line = RUNNING.replace("Comment=goodput:opt-in team=ml ", f"Comment={text} ")
    else:
        line = RUNNING.replace("JobName=train-llm ", f"JobName={text} ")
    record = rejects_cleanly("scontrol-comment-forgery", lambda: job_record(line, "8"), (SlurmRecordError,))
    if record is None:
        return
    job = job_from_record(record)
    assert _fields(job) == ORIGINAL
    assert {k: record.get(k) for k in SECURITY_KEYS} == {k: ORIGINAL_RECORD.get(k) for k in SECURITY_KEYS}
