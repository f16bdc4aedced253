"""SlurmCliBackend's rules with a scripted runner: what it runs, and what it refuses to run."""

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_owner import OwnerSubmission
from activities.adapters.slurm_runner import CommandResult, CommandRunner, LocalRunner
from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import (
    NotOwnedError,
    PermanentSchedulerError,
    ResubmitRequest,
    Scheduler,
    TransientSchedulerError,
    UnknownJobError,
    UnknownNodeError,
)
from goodput.slurm.jsonout import SlurmJsonError
from goodput.slurm.optin import NotOptedInError
from goodput.slurm.resubmit import ResubmitKey
from goodput.slurm.submit_as import BecomeMode, OwnerError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
RUNNING = (FIXTURES / "scontrol-job-running-22.05.txt").read_text()
HELD = (FIXTURES / "scontrol-job-held-22.05.txt").read_text()
PENDING = (FIXTURES / "scontrol-job-requeued-pending-22.05.txt").read_text()
NODE_LINES = (FIXTURES / "scontrol-nodes-all-22.05.txt").read_text().splitlines()


VERSION = ("scontrol", "--version")


def node_line(name: str) -> str:
    return next(line for line in NODE_LINES if line.startswith(f"NodeName={name} "))


class ScriptedRunner:
    """Answers argv prefixes with canned results and records every call."""

    def __init__(self, answers: dict[tuple[str, ...], list[CommandResult] | CommandResult]) -> None:
        self.answers = answers
        self.calls: list[tuple[tuple[str, ...], bytes | None]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        if tuple(argv) == VERSION and VERSION not in self.answers:
            return ok("slurm-wlm 22.05.8\n")  # the recorded release, unless a test says otherwise
        self.calls.append((tuple(argv), stdin))
        for prefix, answer in self.answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                if isinstance(answer, list):
                    return answer.pop(0) if len(answer) > 1 else answer[0]
                return answer
        raise AssertionError(f"unexpected command {argv}")

    def ran(self, *prefix: str) -> list[tuple[str, ...]]:
        return [argv for argv, _ in self.calls if argv[:len(prefix)] == prefix]


def ok(stdout: str = "", argv: Sequence[str] = ()) -> CommandResult:
    return CommandResult(argv=tuple(argv), returncode=0, stdout=stdout, stderr="")


def fail(stderr: str, argv: Sequence[str] = ("scontrol",)) -> CommandResult:
    return CommandResult(argv=tuple(argv), returncode=1, stdout="", stderr=stderr)


def test_is_a_scheduler() -> None:
    assert isinstance(SlurmCliBackend(ScriptedRunner({})), Scheduler)
    assert isinstance(LocalRunner(), CommandRunner)


@pytest.mark.parametrize("bad", ["node1;rm -rf /", "node1\n", "x" * 10_000, "$(id)"])
async def test_hostile_identifiers_never_reach_a_command(bad: str) -> None:
    runner = ScriptedRunner({})
    backend = SlurmCliBackend(runner)
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: backend.get_node(bad), lambda: backend.drain_node(bad, "goodput:i: x"),
        lambda: backend.resume_node(bad, "goodput:i: x"), lambda: backend.get_job(bad),
        lambda: backend.requeue_job(bad), lambda: backend.hold_job(bad), lambda: backend.release_job(bad),
        lambda: backend.cancel_job(bad), lambda: backend.resubmit_job(bad, ResubmitRequest()),
        lambda: backend.resubmit_job("8", ResubmitRequest(exclude=(bad,))),
        lambda: backend.drain_node("node1", bad + "\n")]
    for call in calls:
        with pytest.raises(InvalidIdentifierError):
            await call()
    assert runner.calls == []


async def test_resubmit_refuses_bad_environment_before_running() -> None:
    runner = ScriptedRunner({})
    with pytest.raises(InvalidIdentifierError):
        await SlurmCliBackend(runner).resubmit_job("8", ResubmitRequest(environment={"A": "x,--wrap=id"}))
    assert runner.calls == []


async def test_drain_is_idempotent_and_respects_other_owners() -> None:
    runner = ScriptedRunner({("scontrol", "show", "node", "-o", "node3"): ok(node_line("node3")),
                             ("scontrol", "show", "node", "-o", "node4"): ok(node_line("node4")),
                             ("scontrol", "show", "node", "-o", "node1"): ok(node_line("node1")),
                             ("scontrol", "update"): ok()})
    backend = SlurmCliBackend(runner)
    same = await backend.drain_node("node3", "goodput:inc-7f3a: xid 79 on GPU 3")
    other_incident = await backend.drain_node("node3", "goodput:inc-0000: other")
    admin_down = await backend.drain_node("node4", "goodput:inc-1: x")
    assert not same.changed and not other_incident.changed and not admin_down.changed
    assert "admin: fan" in admin_down.detail
    assert runner.ran("scontrol", "update") == []
    fresh = await backend.drain_node("node1", "goodput:inc-1: xid 79")
    assert fresh.changed
    assert runner.ran("scontrol", "update") == [
        ("scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=goodput:inc-1: xid 79")]


async def test_resume_only_own_drains() -> None:
    runner = ScriptedRunner({("scontrol", "show", "node", "-o", "node3"): ok(node_line("node3")),
                             ("scontrol", "show", "node", "-o", "node1"): ok(node_line("node1")),
                             ("scontrol", "update"): ok()})
    backend = SlurmCliBackend(runner)
    with pytest.raises(NotOwnedError):
        await backend.resume_node("node3", "goodput:inc-other: x")
    assert not (await backend.resume_node("node1", "goodput:inc-1: x")).changed
    assert runner.ran("scontrol", "update") == []
    assert (await backend.resume_node("node3", "goodput:inc-7f3a: xid 79 on GPU 3")).changed
    assert runner.ran("scontrol", "update") == [("scontrol", "update", "NodeName=node3", "State=RESUME")]


async def test_unknown_node_and_job() -> None:
    runner = ScriptedRunner({("scontrol", "show", "node"): fail("Node nodeX not found"),
                             ("scontrol", "show", "job"): fail("slurm_load_jobs error: Invalid job id specified")})
    backend = SlurmCliBackend(runner)
    with pytest.raises(UnknownNodeError):
        await backend.drain_node("nodeX", "goodput:i: x")
    with pytest.raises(UnknownJobError):
        await backend.requeue_job("99999")


async def test_requeue_of_a_job_requeued_meanwhile_is_a_no_op() -> None:
    pending_again = PENDING.replace("JobId=11 ", "JobId=8 ", 1)  # job 8, now as the requeued fixture
    runner = ScriptedRunner({("scontrol", "show", "job"): [ok(RUNNING), ok(pending_again)],
                             ("scontrol", "requeue"): fail("Job is pending execution for job 8")})
    result = await SlurmCliBackend(runner).requeue_job("8")
    assert not result.changed and "already requeued" in result.detail


async def test_requeue_hold_of_a_pending_job_holds_it_once() -> None:
    runner = ScriptedRunner({("scontrol", "show", "job"): ok(PENDING), ("scontrol", "hold"): ok()})
    backend = SlurmCliBackend(runner)
    assert (await backend.requeue_job("11", hold=True)).changed
    assert runner.ran("scontrol", "hold") == [("scontrol", "hold", "11")]
    assert not (await backend.requeue_job("11")).changed


async def test_opt_in_is_enforced_for_job_actions() -> None:
    runner = ScriptedRunner({("scontrol", "show", "job"): ok(HELD)})  # no comment, partition debug
    backend = SlurmCliBackend(runner)
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: backend.requeue_job("10"), lambda: backend.release_job("10"), lambda: backend.cancel_job("10"),
        lambda: backend.hold_job("10"), lambda: backend.resubmit_job("10", ResubmitRequest())]
    for call in calls:
        with pytest.raises(NotOptedInError):
            await call()
    assert [argv[1] for argv, _ in runner.calls] == ["show"] * 5
    allowed = SlurmCliBackend(ScriptedRunner({("scontrol", "show", "job"): ok(HELD),
                                              ("scontrol", "release"): ok()}), allow_partitions=["debug"])
    assert (await allowed.release_job("10")).changed


async def test_controller_down_is_transient() -> None:
    down = (FIXTURES / "errors-controller-down-22.05.txt").read_text().splitlines()[0]
    runner = ScriptedRunner({("scontrol",): fail(down),
                             ("squeue",): ok((FIXTURES / "squeue-controller-down-22.05.json").read_text())})
    backend = SlurmCliBackend(runner)
    with pytest.raises(TransientSchedulerError):
        await backend.get_job("8")
    with pytest.raises(TransientSchedulerError):
        await backend.list_jobs()


KEY = ResubmitKey(b"unit-test-resubmit-key", "default")
ALICE_LINE = RUNNING.replace("UserId=root(0) GroupId=root(0)", "UserId=goodput-alice(1001) GroupId=goodput-alice(1001)")
ALICE_PASSWD = "goodput-alice:x:1001:1001::/home/goodput-alice:/bin/bash\n"
ROOT_PASSWD = "root:x:0:0:root:/root:/bin/bash\n"


def listing(**jobs: dict[str, object]) -> str:
    """The recorded `squeue --json`, with some jobs' fields changed (job id -> fields)."""
    document = json.loads((FIXTURES / "squeue-22.05.json").read_text())
    for job in document["jobs"]:
        job.update(jobs.get(f"job{job['job_id']}", {}))
    return json.dumps(document)


def resubmit_runner(record: str = RUNNING, *, squeue: str | None = None, uid: str = "0\n",
                    passwd: CommandResult | None = None, submit: CommandResult | None = None) -> ScriptedRunner:
    script = (FIXTURES / "batch-script-running.sh").read_text()
    return ScriptedRunner({
        ("scontrol", "show", "job"): ok(record),
        ("scontrol", "write", "batch_script"): ok(script),
        ("squeue", "--json"): ok(squeue or listing()),
        ("squeue",): ok("/tmp/gpsl-scratch/out-%j.log|/tmp/gpsl-scratch/out-%j.log|\n"),
        ("id", "-u"): ok(uid),
        ("getent", "passwd", "root"): ok(ROOT_PASSWD),
        ("getent", "passwd", "goodput-alice"): passwd or ok(ALICE_PASSWD),
        ("sbatch",): submit or ok("42\n"),
        ("env",): submit or ok("42\n"),
        ("runuser",): submit or ok("42\n"),
        ("sudo",): submit or ok("42\n"),
    })


def submitted(runner: ScriptedRunner) -> list[tuple[tuple[str, ...], bytes | None]]:
    return [(argv, stdin) for argv, stdin in runner.calls if "sbatch" in argv]


async def test_resubmit_runs_the_original_script_with_exclusions_and_environment() -> None:
    runner = resubmit_runner()
    result = await SlurmCliBackend(runner, resubmit_key=KEY).resubmit_job(
        "8", ResubmitRequest(exclude=("node2",), environment={"GOODPUT_RESTART": "1"}, incident_id="inc-1"))
    assert result.changed and result.new_job_id == "42"
    (argv, stdin), = submitted(runner)
    assert stdin == (FIXTURES / "batch-script-running.sh").read_bytes()
    # job 8 is root's and goodput is root: no switch, but still a clean environment
    sbatch = argv.index("sbatch")
    assert argv[:2] == ("env", "-i") and argv[sbatch + 1] == "--parsable"
    assert {"--nodes=2", "--partition=gpu", "--gres=gpu:1", "--requeue", "--exclude=node2",
            "--output=/tmp/gpsl-scratch/out-%j.log", "--export=ALL",
            f"--comment=goodput:resubmit-of=8:{KEY.token('8', 'inc-1')} goodput:opt-in team=ml"} <= set(argv)
    assert "GOODPUT_RESTART=1" in argv[2:sbatch] and "USER=root" in argv[2:sbatch]


async def test_a_key_like_comment_resubmits_from_the_jobs_json() -> None:
    # `Project=x` makes the text record ambiguous; the JSON listing says the same without doubt.
    comment = "goodput:opt-in team=ml Project=x"
    runner = resubmit_runner(RUNNING.replace("Comment=goodput:opt-in team=ml", f"Comment={comment}"),
                             squeue=listing(job8={"comment": comment}))
    result = await SlurmCliBackend(runner, resubmit_key=KEY).resubmit_job(
        "8", ResubmitRequest(exclude=("node2",), incident_id="inc-1"))
    assert result.changed and result.new_job_id == "42"
    (argv, _), = submitted(runner)
    assert {"--nodes=2", "--partition=gpu", "--gres=gpu:1", "--requeue", "--exclude=node2",
            f"--comment=goodput:resubmit-of=8:{KEY.token('8', 'inc-1')} {comment}"} <= set(argv)


async def test_resubmit_runs_as_the_owner_with_nothing_of_goodputs_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOODPUT_PUSH_TOKEN", "s3cret")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm-lab/slurm.conf")
    runner = resubmit_runner(ALICE_LINE)
    await SlurmCliBackend(runner).resubmit_job("8", ResubmitRequest(environment={"GOODPUT_RESUME_FROM": "/ck/9"}))
    (argv, _), = submitted(runner)
    sbatch = argv.index("sbatch")
    assert argv[:6] == ("runuser", "-u", "goodput-alice", "--", "env", "-i")
    assert sorted(argv[6:sbatch]) == ["GOODPUT_RESUME_FROM=/ck/9", "HOME=/home/goodput-alice",
                                      "LOGNAME=goodput-alice", "PATH=/usr/local/bin:/usr/bin:/bin",
                                      "SHELL=/bin/bash", "SLURM_CONF=/etc/slurm-lab/slurm.conf",
                                      "USER=goodput-alice"]
    assert not any("s3cret" in item for item in argv)


async def test_resubmit_uses_sudo_when_configured_and_goodput_is_not_root() -> None:
    runner = resubmit_runner(ALICE_LINE, uid="500\n")
    backend = SlurmCliBackend(runner, submission=OwnerSubmission(mode=BecomeMode.SUDO, carried={}))
    assert (await backend.resubmit_job("8", ResubmitRequest())).new_job_id == "42"
    (argv, _), = submitted(runner)
    assert argv[:7] == ("sudo", "-n", "-u", "goodput-alice", "--", "env", "-i")


@pytest.mark.parametrize(("record", "runner_options", "match"), [
    # not root, not the owner, no sudo configured
    (ALICE_LINE, {"uid": "500\n"}, "cannot submit as goodput-alice"),
    # Slurm does not know the owner
    (RUNNING.replace("UserId=root(0)", "UserId=(null)(1001)"), {}, "owner of job 8 is unknown"),
    # the owner has no account here (getent exits 2), or another uid
    (ALICE_LINE, {"passwd": CommandResult(argv=("getent",), returncode=2, stdout="", stderr="")}, "no account"),
    (ALICE_LINE, {"passwd": ok(ALICE_PASSWD.replace("1001:1001", "1005:1005"))}, "uid 1005"),
])
async def test_resubmit_refuses_rather_than_submit_as_anyone_else(
        record: str, runner_options: dict[str, Any], match: str) -> None:
    runner = resubmit_runner(record, **runner_options)
    with pytest.raises(OwnerError, match=match):
        await SlurmCliBackend(runner).resubmit_job("8", ResubmitRequest())
    assert submitted(runner) == []


async def test_a_failed_switch_to_the_owner_is_an_owner_error() -> None:
    runner = resubmit_runner(ALICE_LINE, uid="500\n", submit=fail("sudo: a password is required", argv=("sudo",)))
    backend = SlurmCliBackend(runner, submission=OwnerSubmission(mode=BecomeMode.SUDO))
    with pytest.raises(OwnerError, match="cannot submit job 8's copy as goodput-alice: sudo: a password"):
        await backend.resubmit_job("8", ResubmitRequest())


async def test_resubmit_finds_the_copy_a_previous_attempt_made() -> None:
    token = KEY.token("8", "inc-1")
    runner = resubmit_runner(squeue=listing(job11={"comment": f"goodput:opt-in goodput:resubmit-of=8:{token}"}))
    result = await SlurmCliBackend(runner, resubmit_key=KEY).resubmit_job(
        "8", ResubmitRequest(exclude=("node2",), incident_id="inc-1"))
    assert not result.changed and result.new_job_id == "11"  # the pending copy in the listing
    assert submitted(runner) == [] and runner.ran("scontrol", "write") == []


@pytest.mark.parametrize("claim", [
    {"comment": "goodput:opt-in goodput:resubmit-of=8"},  # the old, untokened tag
    {"comment": f"goodput:opt-in goodput:resubmit-of=8:{'0' * 32}"},  # a forged token
    {"comment": f"goodput:opt-in goodput:resubmit-of=8:{KEY.token('8', 'inc-1')}", "user_id": 1002,
     "user_name": "goodput-mallory"},  # the real token, on another user's job
    {"comment": f"goodput:opt-in goodput:resubmit-of=8:{KEY.token('8', 'inc-0')}"},  # another incident's
])
async def test_a_job_claiming_to_be_the_copy_is_not_taken_for_it(claim: dict[str, object]) -> None:
    runner = resubmit_runner(squeue=listing(job11=claim))
    result = await SlurmCliBackend(runner, resubmit_key=KEY).resubmit_job("8", ResubmitRequest(incident_id="inc-1"))
    assert result.changed and result.new_job_id == "42"
    assert len(submitted(runner)) == 1


async def test_resubmit_refuses_interactive_jobs() -> None:
    # scontrol prints no output paths for a job that is not a batch job
    interactive = re.sub(r" Std(Err|In|Out)=\S+", "", RUNNING.replace("BatchFlag=1", "BatchFlag=0"))
    runner = resubmit_runner(interactive)
    with pytest.raises(PermanentSchedulerError, match="not a batch job"):
        await SlurmCliBackend(runner).resubmit_job("8", ResubmitRequest())


async def test_cancel_and_hold_are_idempotent() -> None:
    def opted_in(line: str) -> str:  # the recorded jobs carry no comment; add the marker
        assert "Comment=" not in line
        return line.replace("StdErr=", "Comment=goodput:opt-in StdErr=")

    cancelled = opted_in((FIXTURES / "scontrol-job-cancelled-22.05.txt").read_text())
    held = opted_in(HELD)
    runner = ScriptedRunner({("scontrol", "show", "job", "-o", "12"): ok(cancelled),
                             ("scontrol", "show", "job", "-o", "10"): ok(held)})
    backend = SlurmCliBackend(runner)
    assert not (await backend.cancel_job("12")).changed
    assert not (await backend.hold_job("10")).changed
    assert [argv[1] for argv, _ in runner.calls] == ["show", "show"]


async def test_local_runner_runs_without_a_shell_and_times_out() -> None:
    runner = LocalRunner(timeout_s=5)
    result = await runner.run(["echo", "a;b", "$(id)"])
    assert result.ok and result.stdout == "a;b $(id)\n"
    with pytest.raises(TransientSchedulerError):
        await runner.run(["sleep", "5"], timeout_s=0.2)
    with pytest.raises(PermanentSchedulerError):
        await runner.run(["/nonexistent/scontrol"])
    piped = await runner.run(["cat"], stdin=b"#!/bin/sh\n")
    assert piped.stdout == "#!/bin/sh\n"


# -- reads that no job's own text can redirect ------------------------------------------------

# Recorded on the lab (see the fixtures' README): goodput-mallory's job 2, submitted while
# goodput-alice's job 1 ran, with a job name, comment, output path, network and burst buffer that
# each carry forged keys.
MALLORY_FORGED = (FIXTURES / "scontrol-job-forged-22.05.txt").read_text()
MALLORY = {"name": "n JobId=1 UserId=root(0)", "user_name": "goodput-mallory", "user_id": 995, "group_id": 994,
           "comment": "goodput:opt-in JobId=1 UserId=root(0) NodeList=node4 Partition=gpu StdOut=/etc/shadow",
           "partition": "debug", "nodes": "node1", "job_state": "RUNNING", "excluded_nodes": "",
           "current_working_directory": "/tmp/lab-h1/work/goodput-mallory",
           "standard_output": "/tmp/lab-h1/work/goodput-mallory/o Restarts=5 x.log", "standard_error": ""}
ALICE = {"name": "wrap", "user_name": "goodput-alice", "user_id": 999, "group_id": 995, "nodes": "node1",
         "partition": "debug", "comment": "goodput:opt-in", "job_state": "RUNNING"}


def reads(job_text: str, squeue: str) -> ScriptedRunner:
    return ScriptedRunner({("scontrol", "show", "job"): ok(job_text), ("squeue", "--json"): ok(squeue),
                           ("scontrol", "hold"): ok(), ("scancel",): ok(), ("scontrol", "requeue"): ok()})


async def test_a_forged_record_is_read_from_json_as_the_job_asked_for() -> None:
    runner = reads(MALLORY_FORGED, listing(job1=ALICE, job2=MALLORY))
    job = await SlurmCliBackend(runner).get_job("2")
    assert (job.job_id, job.user, job.user_id, job.group_id) == ("2", "goodput-mallory", 995, 994)
    assert job.nodes == ("node1",) and job.partition == "debug" and job.restart_count == 0
    assert job.stdout_path == job.stderr_path == "/tmp/lab-h1/work/goodput-mallory/o Restarts=5 x.log"
    assert runner.ran("squeue", "--json")


async def test_actions_on_a_forging_job_touch_only_that_job() -> None:
    runner = reads(MALLORY_FORGED, listing(job1=ALICE, job2=MALLORY))
    backend = SlurmCliBackend(runner)
    assert (await backend.hold_job("2")).changed
    assert (await backend.cancel_job("2")).changed
    assert (await backend.requeue_job("2")).changed
    acted = [argv for argv, _ in runner.calls if argv[:2] != ("scontrol", "show") and argv[0] != "squeue"]
    assert acted == [("scontrol", "hold", "2"), ("scancel", "2"), ("scontrol", "requeue", "2")]


async def test_an_interactive_job_cannot_name_its_own_output_files() -> None:
    head, _, tail = RUNNING.partition(" StdErr=")
    salloc = (head.replace("BatchFlag=1", "BatchFlag=0").replace("Comment=goodput:opt-in team=ml ",
                                                                 "Comment=goodput:opt-in StdOut=/etc/shadow ")
              + " Power=" + tail.partition(" Power=")[2])
    runner = reads(salloc, listing(job8={"batch_flag": False, "standard_output": "", "standard_error": "",
                                         "comment": "goodput:opt-in StdOut=/etc/shadow"}))
    job = await SlurmCliBackend(runner).get_job("8")
    assert job.stdout_path == "" and job.stderr_path == ""
    assert job.comment == "goodput:opt-in StdOut=/etc/shadow"


async def test_an_output_path_that_may_hide_a_key_is_read_from_json() -> None:
    tricky = RUNNING.replace("StdOut=/tmp/gpsl-scratch/out-8.log ", "StdOut=/etc/shadow BurstBuffer=x ")
    runner = reads(tricky, listing(job8={"standard_output": "/etc/shadow BurstBuffer=x"}))
    job = await SlurmCliBackend(runner).get_job("8")
    assert job.stdout_path == "/etc/shadow BurstBuffer=x"


async def test_the_json_fallback_expands_22_05_output_patterns() -> None:
    runner = reads(RUNNING.replace("JobId=8 ", "JobId=8 JobId=9 ", 1), listing())
    job = await SlurmCliBackend(runner).get_job("8")
    assert job.stdout_path == job.stderr_path == "/tmp/gpsl-scratch/out-8.log"  # scontrol's view of out-%j.log


async def test_the_json_fallback_finds_exactly_the_job_or_says_so() -> None:
    with pytest.raises(UnknownJobError):  # never "the first job of the listing"
        await SlurmCliBackend(reads(MALLORY_FORGED.replace("JobId=2 ", "JobId=42 ", 1), listing())).get_job("42")
    document = json.loads(listing())
    document["jobs"].append(dict(document["jobs"][0]))
    forged_one = MALLORY_FORGED.replace("JobId=2 ", "JobId=1 ", 1)
    with pytest.raises(SlurmJsonError, match="claim to be job 1"):
        await SlurmCliBackend(reads(forged_one, json.dumps(document))).get_job("1")


async def test_get_node_answers_only_for_the_node_asked_for() -> None:
    sinfo = (FIXTURES / "sinfo-22.05.json").read_text()
    runner = ScriptedRunner({("scontrol", "show", "node", "-o", "node3"): ok(node_line("node4")),
                             ("sinfo", "--json"): ok(sinfo)})
    node = await SlurmCliBackend(runner).get_node("node3")
    assert node.name == "node3" and node.drained
    odd = node_line("node1").replace(" Arch=", " Foo=bar Arch=")
    runner = ScriptedRunner({("scontrol", "show", "node"): ok(odd), ("sinfo", "--json"): ok(sinfo)})
    assert (await SlurmCliBackend(runner).get_node("node1")).name == "node1"
    assert runner.ran("sinfo", "--json")


async def test_slurm_23_02_and_later_are_read_from_scontrol_json() -> None:
    runner = ScriptedRunner({
        VERSION: ok("slurm 24.11.1\n"),
        ("scontrol", "--json", "show", "job", "103"): ok((FIXTURES / "squeue-24.11-synthetic.json").read_text()),
        ("scontrol", "--json", "show", "node", "node4"):
            ok((FIXTURES / "scontrol-nodes-24.11-synthetic.json").read_text())})
    backend = SlurmCliBackend(runner)
    job = await backend.get_job("103")
    assert job.job_id == "103" and job.restart_count == 1 and job.excluded_nodes == ("node3", "node4")
    node = await backend.get_node("node4")
    assert node.name == "node4" and node.reason_user == "alice"
    assert not runner.ran("scontrol", "show")
