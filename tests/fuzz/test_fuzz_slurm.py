"""Hostile Slurm output: every parser returns, or rejects with its typed error, and a job's text
never changes whose job, whose nodes or whose files goodput sees.

Jobs' owners choose their names, comments, paths and burst-buffer strings, which `scontrol`
prints raw; slurmrestd and the JSON of squeue/sinfo come over the network or from a login node.
So examples start from recorded 22.05 output (and 24.11 shapes: the JSON fixtures and two
synthetic text lines below) and mutate it the way an attacker would: keys injected into free-text
values, newlines, repeated keys, huge numbers, deep nesting, values of the wrong type. Two
properties sit on top of "never crashes": a record read for job N is job N, and replacing the
comment (or the name) of a real record never changes its security fields without an error.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from activities.adapters.slurm_rest import SlurmRestBackend
from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import JobInfo, SchedulerError
from goodput.slurm import commands, restapi
from goodput.slurm.errors import SlurmRecordError, classify, is_already_finished, is_pending_execution
from goodput.slurm.hostlist import MAX_EXPANDED, HostlistError, compress_hostlist, expand_hostlist
from goodput.slurm.jsonout import (
    SlurmJsonError,
    find_job,
    job_from_json,
    load,
    node_from_json,
    parse_sinfo_json,
    parse_squeue_json,
)
from goodput.slurm.records import job_from_record, node_from_record, split_records
from goodput.slurm.unambiguous import JOB_KEY_ORDER, NODE_KEYS, job_record, node_record
from tests.fuzz.harness import rejects_cleanly

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"

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


def _lines(*names: str) -> list[str]:
    return [line for name in names for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


JOB_LINES = sorted(set(_lines(*(p.name for p in FIXTURES.glob("scontrol-job*-22.05.txt")))) | {JOB_24_11.strip()})
NODE_LINES = [*_lines("scontrol-nodes-all-22.05.txt"), NODE_24_11.strip()]
RUNNING = (FIXTURES / "scontrol-job-running-22.05.txt").read_text()

numbers = st.one_of(st.integers(0, 10**6).map(str), st.integers(0, 2**64).map(str),
                    st.integers(19, 6000).map(lambda n: "9" * n),
                    st.sampled_from(["-1", "0x1f", "\u0663", "\u00b2", "1e308", "NaN", "00000", ""]))
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
DIGITS = re.compile(r"[0-9]+")


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


# -- JSON ---------------------------------------------------------------------------------------



def _trimmed(name: str) -> str:
    """A fixture document with at most four entries per list: mutations reach every field sooner."""
    document = json.loads((FIXTURES / name).read_text())
    for key in ("jobs", "nodes", "sinfo"):
        if isinstance(document.get(key), list):
            document[key] = document[key][:4]
    return json.dumps(document)


JSON_DOCUMENTS = {name: _trimmed(name) for name in (
    "squeue-22.05.json", "squeue-24.11-synthetic.json", "squeue-22.05-shared-sample.json",
    "sinfo-22.05.json", "sinfo-24.11-synthetic.json", "sinfo-22.05-shared-sample.json",
    "scontrol-nodes-24.11-synthetic.json", "squeue-controller-down-22.05.json")}

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                         st.sampled_from([1.5, -0.0, 1e300, 2.0**64]), st.text(max_size=12),
                         st.sampled_from(["node[1-99999]x[1-99999]", "n[1-3]", "RUNNING", "", "(null)"]))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["set", "infinite", "number", "x", "state"]),
                                                 inner, max_size=3)), max_leaves=4)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


JSON_PATHS = {name: _paths(json.loads(raw)) for name, raw in JSON_DOCUMENTS.items()}


@st.composite
def mutated_json(draw: st.DrawFn, names: list[str]) -> str:
    name = draw(st.sampled_from(names))
    document = json.loads(JSON_DOCUMENTS[name])
    for path in draw(st.lists(st.sampled_from(JSON_PATHS[name]), max_size=4)):
        parent = document
        try:
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed or replaced it
        if not isinstance(parent, dict | list):
            continue  # an earlier change put a string here: indexing it works, assigning does not
        if draw(st.booleans()):
            parent[path[-1]] = draw(json_values)
        elif isinstance(parent, dict):
            del parent[path[-1]]
    raw = json.dumps(document)
    trick = draw(st.sampled_from(["none", "huge", "deep", "nan", "cut", "noise"]))
    if trick == "huge":
        raw = DIGITS.sub(lambda m: m.group() + "9" * draw(st.integers(0, 5000)), raw, count=1)
    elif trick == "deep":
        depth = draw(st.integers(1, 5000))
        raw = raw.replace('"jobs": [', '"jobs": [' + "[" * depth, 1).replace("]", "]" + "]" * depth, 1)
    elif trick == "nan":
        raw = raw.replace("0", "NaN", 1)
    elif trick == "cut":
        raw = raw[:draw(st.integers(0, len(raw)))]
    elif trick == "noise":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.text(max_size=20)) + raw[at:]
    return raw


SQUEUE_NAMES = ["squeue-22.05.json", "squeue-24.11-synthetic.json", "squeue-22.05-shared-sample.json",
                "squeue-controller-down-22.05.json"]
SINFO_NAMES = ["sinfo-22.05.json", "sinfo-24.11-synthetic.json", "sinfo-22.05-shared-sample.json",
               "scontrol-nodes-24.11-synthetic.json"]


@given(mutated_json(SQUEUE_NAMES), st.sampled_from(["8", "101", "1", "38_2", "41+1"]), st.booleans())
def test_squeue_json(raw: str, job_id: str, expand: bool) -> None:
    rejects_cleanly("squeue-json", lambda: parse_squeue_json(raw), (SchedulerError,))
    job = rejects_cleanly("squeue-json-find-job", lambda: find_job(load(raw), job_id, expand_output=expand),
                          (SchedulerError,))
    assert job is None or not job_id.isdigit() or job.job_id == job_id  # never another job of the list


@given(mutated_json(SINFO_NAMES))
def test_sinfo_json(raw: str) -> None:
    nodes = rejects_cleanly("sinfo-json", lambda: parse_sinfo_json(raw), (SchedulerError,))
    assert nodes is None or len(nodes) <= MAX_EXPANDED


REST_JOB = json.loads(JSON_DOCUMENTS["squeue-24.11-synthetic.json"])["jobs"][0]
REST_NODE = json.loads(JSON_DOCUMENTS["scontrol-nodes-24.11-synthetic.json"])["nodes"][0]


@given(st.sampled_from([REST_JOB, REST_NODE]),
       st.lists(st.tuples(st.sampled_from(sorted({*REST_JOB, *REST_NODE})), json_values), max_size=4))
def test_rest_objects(base: dict[str, Any], changes: list[tuple[str, Any]]) -> None:
    obj = {**base, **dict(changes)}
    rejects_cleanly("rest-job-object", lambda: job_from_json(obj), (SlurmJsonError,))
    rejects_cleanly("rest-node-object", lambda: node_from_json(obj), (SlurmJsonError,))


SPEC = json.loads((FIXTURES / "openapi-paths-22.05.json").read_text())
versions = st.one_of(st.sampled_from(restapi.SUPPORTED_VERSIONS), st.builds(lambda n: f"v0.0.{n}", numbers))
path_keys = st.one_of(st.builds(lambda v, tail: f"/slurm/{v}/{tail}", versions,
                                st.sampled_from(["jobs", "nodes", "job/{job_id}", "node/{node_name}", "job/{" * 50])),
                      st.text(max_size=40))
specs = st.one_of(
    st.just(SPEC),
    st.dictionaries(path_keys, st.one_of(st.lists(st.sampled_from(["get", "post", "delete", "GET"])), json_values),
                    max_size=12).map(lambda paths: {"paths": paths}),
    json_values,
)


@given(specs)
def test_rest_openapi(spec: Any) -> None:
    version = rejects_cleanly("rest-openapi", lambda: restapi.choose_version(spec), (SchedulerError,))
    assert version is None or version in restapi.SUPPORTED_VERSIONS


# The capabilities reader only ever sees a spec whose version was chosen: mostly the real one,
# with paths dropped, added or replaced.
edited_specs = st.builds(
    lambda drop, extra: {"paths": {**{k: v for i, (k, v) in enumerate(SPEC["paths"].items()) if i not in drop},
                                   **extra}},
    st.sets(st.integers(0, len(SPEC["paths"])), max_size=8),
    st.dictionaries(path_keys, st.one_of(st.lists(st.sampled_from(["get", "post", "delete", "GET"])), json_values),
                    max_size=4))


@given(edited_specs)
def test_rest_capabilities(spec: Any) -> None:
    try:
        version = restapi.choose_version(spec)
    except SchedulerError:
        assume(False)
        return
    rejects_cleanly("rest-capabilities", lambda: restapi.capabilities(spec, version), (SchedulerError,))


TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJmdXp6In0.ZnV6ei1zZWNyZXQtc2lnbmF0dXJl"


@given(st.sampled_from([200, 200, 400, 401, 404, 500, 503]), st.one_of(
    mutated_json(SQUEUE_NAMES), st.binary(max_size=200), st.builds(lambda t: f'{{"errors": ["{t}"]}}', st.just(TOKEN))))
def test_rest_client(status: int, body: str | bytes) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json=SPEC)
        return httpx.Response(status, content=body.encode() if isinstance(body, str) else body)

    async def calls() -> None:
        backend = SlurmRestBackend("https://restd.test", user="goodput", token=TOKEN,
                                   transport=httpx.MockTransport(answer))
        try:
            for call in (lambda: backend.get_job("101"), backend.list_jobs, backend.list_nodes):
                try:
                    await call()
                except SchedulerError as error:
                    assert str(error).strip() and TOKEN not in str(error)
        finally:
            await backend.aclose()

    rejects_cleanly("rest-client", lambda: asyncio.run(calls()), ())


# -- hostlists, sbatch, versions, error text ----------------------------------------------------

small = st.one_of(st.integers(0, 999), st.integers(0, 99999))
ranges = st.one_of(numbers, st.builds(lambda a, b: f"{a}-{b}", numbers, numbers),
                   st.builds(lambda a, b: f"{a}-{b}", small, small), small.map(str))
brackets = st.lists(ranges, min_size=0, max_size=4).map(lambda items: "[" + ",".join(items) + "]")
parts = st.lists(st.one_of(st.text(alphabet="abcnode-_.", max_size=8), brackets,
                           st.sampled_from(["[", "]", ",", "[[", "]]", " ", "\x00"])), max_size=8).map("".join)
hostlists = st.one_of(st.lists(parts, max_size=6).map(",".join), st.text(max_size=100),
                      st.builds(lambda p, n: p * n, parts, st.integers(0, 2000)))


@given(hostlists)
def test_hostlist_expand(expr: str) -> None:
    names = rejects_cleanly("hostlist-expand", lambda: expand_hostlist(expr), (HostlistError,))
    assert names is None or len(names) <= MAX_EXPANDED


ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
node_names = st.builds(lambda first, rest: first + rest, st.sampled_from(ALNUM),
                       st.text(alphabet=ALNUM + "_.-", max_size=20))


@given(st.lists(st.one_of(node_names, st.builds(lambda p, n: f"{p}{n}", st.sampled_from(["node", "gpu-", "n0", "x"]),
                                                st.integers(0, 10**6))), max_size=40))
def test_hostlist_roundtrip(names: list[str]) -> None:
    compressed = rejects_cleanly("hostlist-roundtrip", lambda: compress_hostlist(names), ())
    assert compressed is not None and set(expand_hostlist(compressed)) == set(names)


@given(st.one_of(st.builds(lambda n, c: f"{n};{c}\n", numbers, st.text(max_size=10)), st.text(max_size=100)))
def test_sbatch_parsable(stdout: str) -> None:
    job_id = rejects_cleanly("sbatch-parsable", lambda: commands.parse_sbatch_parsable(stdout),
                             (InvalidIdentifierError,))
    assert job_id is None or job_id.replace("_", "").replace("+", "").isdigit()


@given(st.one_of(st.builds(lambda a, b, c: f"slurm-wlm {a}.{b}.{c}\n", numbers, numbers, numbers),
                 st.text(max_size=300)))
def test_slurm_version(text: str) -> None:
    version = rejects_cleanly("slurm-version", lambda: commands.parse_version(text), ())
    assert version is not None and all(0 <= part < 10_000 for part in version)


ERROR_LINES = _lines(*(p.name for p in FIXTURES.glob("errors-*.txt")))


@given(st.one_of(st.sampled_from(ERROR_LINES), st.text(max_size=200),
                 st.builds(lambda line, n: line * n, st.sampled_from(ERROR_LINES), st.integers(0, 20_000))),
       st.text(max_size=50), st.integers(-(2**31), 2**31))
def test_slurm_error_text(stderr: str, stdout: str, returncode: int) -> None:
    error = rejects_cleanly("slurm-error-text", lambda: classify(["scontrol", "requeue"], returncode, stdout, stderr),
                            ())
    assert isinstance(error, SchedulerError) and str(error).strip() and len(str(error)) < 600
    assert isinstance(is_pending_execution(stderr), bool) and isinstance(is_already_finished(stderr), bool)
