"""SlurmCliBackend's rules with a scripted runner: what it runs, and what it refuses to run."""

import json
from collections.abc import Awaitable, Callable

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import CommandRunner, LocalRunner
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
from tests.unit.slurm_cli_helpers import (
    FIXTURES,
    HELD,
    PENDING,
    RUNNING,
    VERSION,
    ScriptedRunner,
    fail,
    listing,
    node_line,
    ok,
)


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
