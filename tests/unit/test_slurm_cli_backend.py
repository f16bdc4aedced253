"""SlurmCliBackend's rules with a scripted runner: what it runs, and what it refuses to run."""

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
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
from goodput.slurm.optin import NotOptedInError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
RUNNING = (FIXTURES / "scontrol-job-running-22.05.txt").read_text()
HELD = (FIXTURES / "scontrol-job-held-22.05.txt").read_text()
PENDING = (FIXTURES / "scontrol-job-requeued-pending-22.05.txt").read_text()
NODE_LINES = (FIXTURES / "scontrol-nodes-all-22.05.txt").read_text().splitlines()


def node_line(name: str) -> str:
    return next(line for line in NODE_LINES if line.startswith(f"NodeName={name} "))


class ScriptedRunner:
    """Answers argv prefixes with canned results and records every call."""

    def __init__(self, answers: dict[tuple[str, ...], list[CommandResult] | CommandResult]) -> None:
        self.answers = answers
        self.calls: list[tuple[tuple[str, ...], bytes | None]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
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
    runner = ScriptedRunner({("scontrol", "show", "job"): [ok(RUNNING), ok(PENDING)],
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


async def test_resubmit_runs_the_original_script_with_exclusions_and_environment() -> None:
    script = (FIXTURES / "batch-script-running.sh").read_text()
    runner = ScriptedRunner({
        ("scontrol", "show", "job"): ok(RUNNING),
        ("scontrol", "write", "batch_script"): ok(script),
        ("squeue", "--json"): ok((FIXTURES / "squeue-22.05.json").read_text()),
        ("squeue",): ok("/tmp/gpsl-scratch/out-%j.log|/tmp/gpsl-scratch/out-%j.log|\n"),
        ("sbatch",): ok("42\n"),
    })
    result = await SlurmCliBackend(runner).resubmit_job(
        "8", ResubmitRequest(exclude=("node2",), environment={"GOODPUT_RESTART": "1"}))
    assert result.changed and result.new_job_id == "42"
    (argv, stdin), = [(a, s) for a, s in runner.calls if a[0] == "sbatch"]
    assert stdin == script.encode()
    assert argv[:2] == ("sbatch", "--parsable")
    assert {"--nodes=2", "--partition=gpu", "--gres=gpu:1", "--requeue", "--exclude=node2",
            "--output=/tmp/gpsl-scratch/out-%j.log", "--export=ALL,GOODPUT_RESTART=1",
            "--comment=goodput:opt-in team=ml goodput:resubmit-of=8"} <= set(argv)


async def test_resubmit_finds_the_copy_a_previous_attempt_made() -> None:
    listing = (FIXTURES / "squeue-22.05.json").read_text().replace(
        '"comment": "goodput:opt-in",', '"comment": "goodput:opt-in goodput:resubmit-of=8",')
    assert "resubmit-of=8" in listing
    runner = ScriptedRunner({("scontrol", "show", "job"): ok(RUNNING), ("squeue", "--json"): ok(listing)})
    result = await SlurmCliBackend(runner).resubmit_job("8", ResubmitRequest(exclude=("node2",)))
    assert not result.changed and result.new_job_id == "11"  # the running copy in the listing
    assert runner.ran("sbatch") == [] and runner.ran("scontrol", "write") == []


async def test_resubmit_refuses_interactive_jobs() -> None:
    line = RUNNING.replace("BatchFlag=1", "BatchFlag=0")
    runner = ScriptedRunner({("scontrol", "show", "job"): ok(line),
                             ("squeue", "--json"): ok((FIXTURES / "squeue-22.05.json").read_text())})
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
