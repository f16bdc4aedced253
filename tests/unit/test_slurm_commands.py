"""argv builders, resubmission options and opt-in: pure, so every rule is checked here."""

from pathlib import Path

import pytest

from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import JobInfo, JobState
from goodput.slurm import commands
from goodput.slurm.optin import is_opted_in
from goodput.slurm.records import split_record
from goodput.slurm.resubmit import (
    merged_exclusions,
    options_from_record,
    output_pattern,
    resubmit_tags,
    resubmitted_from,
    tag_comment,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
HOSTILE = ["node1;rm -rf /", "node1\nnode2", "x" * 10_000, "", "$(reboot)", "-rf", "node 1", "a`b`"]


@pytest.mark.parametrize("name", HOSTILE)
def test_node_builders_refuse_hostile_names(name: str) -> None:
    for build in (commands.show_node, commands.resume_node):
        with pytest.raises(InvalidIdentifierError):
            build(name)
    with pytest.raises(InvalidIdentifierError):
        commands.drain_node(name, "goodput:i: x")
    with pytest.raises(InvalidIdentifierError):
        commands.sbatch([], exclude=[name])


@pytest.mark.parametrize("job_id", [*HOSTILE, "12;34", "1 2", "-1"])
def test_job_builders_refuse_hostile_ids(job_id: str) -> None:
    for build in (commands.show_job, commands.hold, commands.release, commands.cancel,
                  commands.batch_script, commands.squeue_output_patterns):
        with pytest.raises(InvalidIdentifierError):
            build(job_id)
    with pytest.raises(InvalidIdentifierError):
        commands.requeue(job_id, hold=True)


@pytest.mark.parametrize("reason", ["line\nbreak", "x" * 600, ""])
def test_drain_refuses_bad_reasons(reason: str) -> None:
    with pytest.raises(InvalidIdentifierError):
        commands.drain_node("node1", reason)


def test_argv_shapes() -> None:
    assert commands.drain_node("node1", "goodput:inc-1: xid 79") == [
        "scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=goodput:inc-1: xid 79"]
    assert commands.resume_node("node1") == ["scontrol", "update", "NodeName=node1", "State=RESUME"]
    assert commands.requeue("12") == ["scontrol", "requeue", "12"]
    assert commands.requeue("12_3", hold=True) == ["scontrol", "requeuehold", "12_3"]
    assert commands.show_job("12") == ["scontrol", "show", "job", "-o", "12"]
    assert commands.batch_script("12") == ["scontrol", "write", "batch_script", "12", "-"]
    assert commands.cancel("12") == ["scancel", "12"]


def test_sbatch_argv() -> None:
    argv = commands.sbatch(["--nodes=2"], exclude=["node3", "node1", "node3"], hold=True)
    # the environment is sbatch's own, made clean by submit_as; no variable rides on --export
    assert argv == ["sbatch", "--parsable", "--nodes=2", "--exclude=node3,node1", "--export=ALL", "--hold"]
    assert commands.sbatch([]) == ["sbatch", "--parsable", "--export=ALL"]


def test_submit_as_clears_the_environment_after_becoming_the_owner() -> None:
    argv = commands.submit_as(["runuser", "-u", "alice", "--"], {"PATH": "/usr/bin", "HOME": "/home/a b"},
                              ["sbatch", "--parsable"])
    assert argv == ["runuser", "-u", "alice", "--", "env", "-i", "HOME=/home/a b", "PATH=/usr/bin",
                    "sbatch", "--parsable"]
    assert commands.submit_as([], {}, ["sbatch"]) == ["env", "-i", "sbatch"]
    for bad in ({"-u": "x"}, {"A=B": "x"}, {"A": "x\0y"}):
        with pytest.raises(InvalidIdentifierError):
            commands.submit_as([], bad, ["sbatch"])
    with pytest.raises(InvalidIdentifierError):
        commands.passwd_entry("-s")


@pytest.mark.parametrize("env", [{"BAD-KEY": "1"}, {"1X": "1"}, {"A": "x,y"}, {"A": "two\nlines"},
                                 {"A": "x" * 5000}, {"": "1"}])
def test_resubmit_refuses_bad_environment(env: dict[str, str]) -> None:
    with pytest.raises(InvalidIdentifierError):
        commands.validate_environment(env)


@pytest.mark.parametrize(("out", "job_id"), [("1234\n", "1234"), ("1234;cluster\n", "1234")])
def test_parse_sbatch(out: str, job_id: str) -> None:
    assert commands.parse_sbatch_parsable(out) == job_id


@pytest.mark.parametrize("out", ["", "Submitted batch job; rm", "abc"])
def test_parse_sbatch_rejects_garbage(out: str) -> None:
    with pytest.raises(InvalidIdentifierError):
        commands.parse_sbatch_parsable(out)


@pytest.mark.parametrize(("text", "version"), [
    ("slurm 22.05.8\n", (22, 5, 8)), ("slurm-wlm 24.11.1\n", (24, 11, 1)), ("garbage", (0, 0, 0))])
def test_parse_version(text: str, version: tuple[int, int, int]) -> None:
    assert commands.parse_version(text) == version


def test_resubmit_options_reproduce_the_recorded_job() -> None:
    raw = split_record((FIXTURES / "scontrol-job-running-22.05.txt").read_text())
    options = options_from_record(raw, token="t0k", stdout_pattern="/tmp/gpsl-scratch/out-%j.log",
                                  stderr_pattern="/tmp/gpsl-scratch/out-%j.log")
    assert options == [
        "--job-name=train-llm", "--partition=gpu", "--nodes=2", "--ntasks=2", "--cpus-per-task=1",
        "--time=2-00:00:00", "--gres=gpu:1", "--chdir=/tmp/gpsl-scratch",
        "--output=/tmp/gpsl-scratch/out-%j.log", "--comment=goodput:resubmit-of=8:t0k goodput:opt-in team=ml",
        "--requeue"]


def test_resubmit_right_after_requeue_keeps_the_node_count() -> None:
    # recorded: NumNodes=1 while the requeued 2-node job completes, TRES still says node=2
    raw = split_record((FIXTURES / "scontrol-job-requeue-completing-2node-22.05.txt").read_text())
    assert raw["NumNodes"] == "1"
    assert "--nodes=2" in options_from_record(raw, token="t")


def test_resubmit_keeps_tasks_per_node() -> None:
    raw = {"JobId": "5", "NumNodes": "4", "NumTasks": "32", "NtasksPerN:B:S:C": "8:0:*:*"}
    options = options_from_record(raw, token="t")
    assert "--ntasks-per-node=8" in options and not any(o.startswith("--ntasks=") for o in options)


def test_resubmit_options_for_held_wrap_job() -> None:
    raw = split_record((FIXTURES / "scontrol-job-held-22.05.txt").read_text())
    options = options_from_record(raw, token="t")
    assert "--nodes=2" in options  # a pending job prints NumNodes=2-2 for -N2
    assert "--nodes=2-4" in options_from_record({"JobId": "5", "NumNodes": "2-4"}, token="t")
    assert "--output=/dev/null" in options and "--no-requeue" not in options
    assert not any(o.startswith(("--time", "--account", "--qos", "--constraint")) for o in options)
    assert "--comment=goodput:resubmit-of=10:t" in options


def test_resubmit_keeps_previous_exclusions_and_drops_conflicting_pins() -> None:
    raw = {"JobId": "5", "ExcNodeList": "node[7-8]", "ReqNodeList": "node[1-2]", "Requeue": "0"}
    assert merged_exclusions(raw, ("node2",)) == ("node7", "node8", "node2")
    assert not any(o.startswith("--nodelist") for o in options_from_record(raw, token="t", exclude=("node2",)))
    assert "--nodelist=node1,node2" in options_from_record(raw, token="t", exclude=("node9",))
    assert "--no-requeue" in options_from_record(raw, token="t")


def test_resubmit_tag_replaces_older_ones() -> None:
    assert tag_comment("goodput:opt-in goodput:resubmit-of=5:aa  team=ml goodput:resubmit-of=6", "9", "tk") \
        == "goodput:resubmit-of=9:tk goodput:opt-in  team=ml"
    # first, so that a comment padded beyond what is searched cannot hide goodput's own tag
    assert resubmit_tags(tag_comment("goodput:opt-in " * 5_000, "9", "tk")) == [("9", "tk")]
    assert tag_comment("", "9", "tk") == "goodput:resubmit-of=9:tk"
    assert resubmitted_from("goodput:opt-in goodput:resubmit-of=9:tk") == "9"
    assert resubmitted_from("goodput:opt-in goodput:resubmit-of=9") is None  # no token: not a tag
    assert resubmitted_from("goodput:opt-in") is None


@pytest.mark.parametrize(("path", "job_id", "pattern"), [
    ("/logs/out-1234.log", "1234", "/logs/out-%j.log"),
    ("/logs/12345/slurm-1234.out", "1234", "/logs/12345/slurm-%j.out"),
    ("/logs/run-112345.out", "1234", "/logs/run-112345.out"),
    ("/logs/train.out", "1234", "/logs/train.out"),
])
def test_output_pattern(path: str, job_id: str, pattern: str) -> None:
    assert output_pattern(path, job_id) == pattern


def job(comment: str = "", partition: str = "debug") -> JobInfo:
    return JobInfo(job_id="1", state=JobState.RUNNING, comment=comment, partition=partition)


def test_opt_in() -> None:
    assert is_opted_in(job("goodput:opt-in"), ())
    assert is_opted_in(job("team=ml goodput:opt-in"), ())
    assert not is_opted_in(job("goodput:opt-out"), ())
    assert not is_opted_in(job(""), ())
    assert is_opted_in(job("", "gpu"), ["gpu"])
    assert not is_opted_in(job("", "gpu-debug"), ["gpu"])
    assert not is_opted_in(job("anything"), (), comment_marker="")
    assert is_opted_in(job("mark:me"), (), comment_marker="mark:me")
