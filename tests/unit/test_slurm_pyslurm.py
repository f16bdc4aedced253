"""PyslurmBackend against goodput's pyslurm 25.11 stand-in (pyslurm itself cannot be built here).

Every Protocol operation, the shared rules (idempotence, ownership, opt-in), error mapping, hostile
identifiers, the lazy import, and the stand-in's own fidelity (resubmission:
test_slurm_pyslurm_resubmit.py).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from activities.adapters import pyslurm_jobs
from activities.adapters.slurm_pyslurm import INSTALL_HINT, PyslurmBackend, PyslurmUnavailableError, job_info, node_info
from goodput.identifiers import InvalidIdentifierError
from goodput.ownership import drain_reason
from goodput.scheduler import (
    JobState,
    NotOwnedError,
    PermanentSchedulerError,
    ResubmitRequest,
    Scheduler,
    TransientSchedulerError,
    UnknownJobError,
    UnknownNodeError,
)
from goodput.slurm.optin import NotOptedInError
from tests.fakes.pyslurm_standin import ESLURM_JOB_PENDING, JobRecord, NodeRecord, RPCError, Slurmctld
from tests.unit.pyslurm_helpers import ALICE, HOSTILE, REASON, REPO, SCRIPT, new_backend, new_slurmctld, running

ctl = pytest.fixture(name="ctl")(new_slurmctld)
backend = pytest.fixture(name="backend")(new_backend)


# -- import and plumbing ------------------------------------------------------------------------

def test_without_pyslurm_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # import pyslurm -> ImportError
    with pytest.raises(PyslurmUnavailableError) as caught:
        PyslurmBackend()
    assert isinstance(caught.value, PermanentSchedulerError) and isinstance(caught.value, ImportError)
    assert INSTALL_HINT in str(caught.value) and "pip install 'goodput[pyslurm]'" in str(caught.value)


def test_pyslurm_is_imported_lazily_from_sys_modules(monkeypatch: pytest.MonkeyPatch, ctl: Slurmctld) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", ctl.module)
    assert PyslurmBackend().pyslurm_version == "25.11.0"


def test_importing_the_backend_and_stand_in_never_imports_pyslurm() -> None:
    code = ("import sys, goodput, activities.adapters.slurm_pyslurm, tests.fakes.pyslurm_standin; "
            "assert 'pyslurm' not in sys.modules, 'pyslurm imported'")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)


def test_implements_the_protocol(backend: PyslurmBackend) -> None:
    assert isinstance(backend, Scheduler)


async def test_blocking_calls_run_off_the_event_loop_thread(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl)
    seen: list[threading.Thread] = []
    load = ctl.module.Job.load

    def spy(job_id: int) -> Any:
        seen.append(threading.current_thread())
        return load(job_id)
    ctl.module.Job.load = spy
    await backend.get_job("7")
    assert seen and seen[0] is not threading.main_thread()


# -- queries ------------------------------------------------------------------------------------

async def test_get_job_maps_pyslurm_attributes(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl, excluded_nodes=("node4",), requeue_count=2, command="/home/u/train.sbatch")
    job = await backend.get_job("7")
    assert (job.job_id, job.name, job.state, job.partition) == ("7", "train", JobState.RUNNING, "debug")
    assert job.nodes == ("node1", "node2") and job.excluded_nodes == ("node4",)
    assert job.comment == "goodput:opt-in" and job.requeue and job.restart_count == 2
    assert job.stdout_path == "/scratch/out-7.log" and job.command == "/home/u/train.sbatch"
    assert job.exit_code == "0:0" and not job.held
    assert (job.user, job.user_id, job.group_id) == ("root", 0, 0)
    running(ctl, 8, **ALICE)
    assert (await backend.get_job("8")).user == "unit-alice"
    assert (await backend.get_job("8")).user_id == 1001


async def test_slurms_expedited_hold_reads_as_a_plain_hold(ctl: Slurmctld, backend: PyslurmBackend,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """pyslurm 25.11 has no property for the job's expedite flag (docs/slurm.md, "Expedited
    requeue"): a job with every part of Slurm's hold that pyslurm shows is held, never
    `expedite_held`, so goodput leaves it held. The other three parts go through the CLI's rule:
    with the flag readable, the same job is Slurm's hold and an owner's requeuehold is not."""
    hold = {"state": "REQUEUE_HOLD", "state_reason": "job requeued in held state", "priority": 0}
    running(ctl, requeue_count=1, exit_code=1, **hold)
    running(ctl, 8, requeue_count=1, exit_code=0, **(hold | {"state": "PENDING"}))  # the owner's requeuehold
    job = await backend.get_job("7")
    assert job.state is JobState.REQUEUED and job.held and job.exit_code == "1:0" and not job.expedite_held
    monkeypatch.setattr(pyslurm_jobs, "expedite_flag", lambda job: True)
    assert (await backend.get_job("7")).expedite_held
    assert (await backend.get_job("8")).held and not (await backend.get_job("8")).expedite_held


async def test_list_jobs_and_nodes(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl)
    ctl.nodes["node9"] = NodeRecord("node9", gres={"gpu:a100": 4})
    jobs = await backend.list_jobs()
    assert [(j.job_id, j.state) for j in jobs] == [("7", JobState.RUNNING)]
    nodes = {n.name: n for n in await backend.list_nodes()}
    assert nodes["node1"].state == "ALLOCATED" and nodes["node3"].state == "IDLE"
    assert nodes["node1"].gres == "gpu:8" and nodes["node9"].gres == "gpu:a100:4"
    ctl.nodes["node9"].partitions = ["big"]
    assert [n.name for n in await backend.list_nodes("big")] == ["node9"]
    assert "node9" not in {n.name for n in await backend.list_nodes("debug")}


async def test_a_list_shaped_collection_is_read_too(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    load = ctl.module.Nodes.load
    ctl.module.Nodes.load = lambda: list(load().values())  # pyslurm 23.02.0's Nodes was a list
    assert len(await backend.list_nodes()) == 4


async def test_get_node_reports_drain_and_who_set_it(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    ctl.update_node("node2", "DRAIN", "bad fan", user="admin")
    node = await backend.get_node("node2")
    assert node.drained and node.flags == ("DRAIN",) and node.reason == "bad fan" and node.reason_user == "admin"


def test_node_and_job_mapping_of_pyslurm_strings() -> None:
    node = node_info(SimpleNamespace(name="n1", state="DOWN+DRAIN+NOT_RESPONDING", reason=None, reason_user=None,
                                     configured_gres={}))
    assert node.state == "DOWN" and node.drained and "NOT_RESPONDING" in node.flags and node.reason == ""
    completing = job_info(SimpleNamespace(id=3, state="COMPLETING", end_time=None, priority=1))
    assert completing.state is JobState.REQUEUED  # a requeue still completing its old run
    finishing = job_info(SimpleNamespace(id=3, state="COMPLETING", end_time=1_700_000_000, priority=1))
    assert finishing.state is JobState.COMPLETING
    held = job_info(SimpleNamespace(id=4, state="PENDING", priority=0, state_reason=None))
    assert held.held and job_info(SimpleNamespace(id=5, state="RUNNING", state_reason="JobHeldAdmin")).held


async def test_array_and_het_ids_are_looked_up(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl, 120, array_id=50, array_task_id=3)
    ctl.add_job(JobRecord(id=130, script=SCRIPT, heterogeneous_id=129, heterogeneous_offset=1))
    assert (await backend.get_job("50_3")).job_id == "120"
    assert (await backend.get_job("129+1")).job_id == "130"
    with pytest.raises(UnknownJobError):
        await backend.get_job("50_4")


# -- errors -------------------------------------------------------------------------------------

async def test_unknown_job_and_node_are_permanent(backend: PyslurmBackend) -> None:
    for call in (lambda: backend.get_job("999"), lambda: backend.requeue_job("999"),
                 lambda: backend.cancel_job("999"), lambda: backend.resubmit_job("999", ResubmitRequest())):
        with pytest.raises(UnknownJobError, match="Invalid job id specified"):
            await call()
    with pytest.raises(UnknownNodeError):
        await backend.get_node("nosuch")
    with pytest.raises(UnknownNodeError):
        await backend.drain_node("nosuch", REASON)


async def test_controller_down_is_transient(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl)
    ctl.available = False
    for call in (lambda: backend.get_job("7"), lambda: backend.list_nodes(), lambda: backend.list_jobs(),
                 lambda: backend.drain_node("node1", REASON), lambda: backend.requeue_job("7")):
        with pytest.raises(TransientSchedulerError, match="Unable to contact slurm controller"):
            await call()


async def test_communication_errnos_are_transient_whatever_their_text(ctl: Slurmctld,
                                                                     backend: PyslurmBackend) -> None:
    def broken(job_id: int) -> None:
        raise RPCError(1001, "some wording goodput has not seen")
    ctl.module.Job.load = broken
    with pytest.raises(TransientSchedulerError, match="errno 1001"):
        await backend.get_job("7")


async def test_other_rpc_errors_and_pyslurm_value_errors_are_permanent(ctl: Slurmctld,
                                                                       backend: PyslurmBackend) -> None:
    running(ctl, is_requeueable=False)
    with pytest.raises(PermanentSchedulerError, match="presently disabled"):
        await backend.requeue_job("7")
    running(ctl, 8)
    ctl.jobs[8].script = "echo no shebang\n"  # pyslurm refuses it client-side with ValueError
    with pytest.raises(PermanentSchedulerError, match="Not a valid Batch script"):
        await backend.resubmit_job("8", ResubmitRequest())


@pytest.mark.parametrize("bad", HOSTILE)
async def test_hostile_identifiers_are_refused_before_any_call(ctl: Slurmctld, backend: PyslurmBackend,
                                                               bad: str) -> None:
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: backend.get_node(bad), lambda: backend.drain_node(bad, REASON),
        lambda: backend.resume_node(bad, REASON), lambda: backend.get_job(bad),
        lambda: backend.requeue_job(bad), lambda: backend.hold_job(bad), lambda: backend.release_job(bad),
        lambda: backend.cancel_job(bad), lambda: backend.resubmit_job(bad, ResubmitRequest()),
        lambda: backend.resubmit_job("7", ResubmitRequest(exclude=(bad,))),
        lambda: backend.resubmit_job("7", ResubmitRequest(environment={"A": f"{bad},B=1"})),
        lambda: backend.drain_node("node1", bad + "\n")]
    for call in calls:
        with pytest.raises(InvalidIdentifierError):
            await call()
    assert ctl.calls == []


# -- node actions -------------------------------------------------------------------------------

async def test_drain_and_resume_are_idempotent(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    assert (await backend.drain_node("node4", REASON)).changed
    before = len(ctl.calls)
    assert not (await backend.drain_node("node4", REASON)).changed
    assert ctl.calls[before:] == ["load_node"]  # looked, sent nothing
    assert (ctl.nodes["node4"].drain, ctl.nodes["node4"].reason) == (True, REASON)
    assert (await backend.resume_node("node4", REASON)).changed
    assert not (await backend.resume_node("node4", REASON)).changed
    assert (ctl.nodes["node4"].drain, ctl.nodes["node4"].reason) == (False, None)


async def test_someone_elses_drain_or_down_is_left_alone(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    ctl.update_node("node3", "DRAIN", "admin: bad fan", user="admin")
    result = await backend.drain_node("node3", REASON)
    assert not result.changed and "admin" in result.detail
    with pytest.raises(NotOwnedError):
        await backend.resume_node("node3", REASON)
    ctl.update_node("node2", "DOWN", "Not responding", user="slurm")
    assert not (await backend.drain_node("node2", REASON)).changed
    assert ctl.nodes["node3"].reason == "admin: bad fan" and ctl.nodes["node2"].reason == "Not responding"


async def test_another_incidents_drain_is_not_resumed(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    other = drain_reason("inc-other", "nvlink down")
    assert (await backend.drain_node("node1", other)).changed
    assert not (await backend.drain_node("node1", REASON)).changed
    with pytest.raises(NotOwnedError):
        await backend.resume_node("node1", REASON)
    assert ctl.nodes["node1"].reason == other


# -- job actions --------------------------------------------------------------------------------

async def test_requeue_restarts_and_a_second_requeue_is_a_no_op(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl)
    assert (await backend.requeue_job("7", hold=True)).changed
    before = len(ctl.calls)
    again = await backend.requeue_job("7", hold=True)
    assert not again.changed and "requeue" not in ctl.calls[before:]
    after = await backend.get_job("7")
    assert after.restart_count == 1 and after.held and after.state is JobState.PENDING


async def test_requeue_with_hold_of_a_pending_job_holds_it(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl)
    assert (await backend.requeue_job("7")).changed
    ctl.jobs[7].state, ctl.jobs[7].nodes = "PENDING", ()  # waiting for its EligibleTime
    result = await backend.requeue_job("7", hold=True)
    assert result.changed and "held" in result.detail and ctl.jobs[7].priority == 0
    assert ctl.jobs[7].requeue_count == 1


async def test_job_is_pending_execution_race_is_a_no_op(ctl: Slurmctld, backend: PyslurmBackend,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    running(ctl)

    def already(job_id: int, hold: bool) -> None:  # another requeue won the race
        ctl.jobs[job_id].state = "PENDING"
        raise RPCError(ESLURM_JOB_PENDING)
    monkeypatch.setattr(ctl, "requeue", already)
    assert not (await backend.requeue_job("7")).changed


async def test_hold_release_cancel_are_idempotent(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl)
    assert (await backend.hold_job("7")).changed
    held = await backend.get_job("7")
    assert held.held and held.state is JobState.RUNNING  # hold only stops it being scheduled again
    assert not (await backend.hold_job("7")).changed
    assert (await backend.release_job("7")).changed
    assert not (await backend.release_job("7")).changed
    assert (await backend.cancel_job("7")).changed
    assert not (await backend.cancel_job("7")).changed
    assert (await backend.get_job("7")).state is JobState.CANCELLED


@pytest.mark.parametrize("operation", ["requeue", "hold", "release", "cancel", "resubmit"])
async def test_jobs_that_did_not_opt_in_are_left_alone(ctl: Slurmctld, backend: PyslurmBackend,
                                                       operation: str) -> None:
    running(ctl, comment=None, priority=0 if operation == "release" else 1000)
    calls = {"requeue": lambda: backend.requeue_job("7"), "hold": lambda: backend.hold_job("7"),
             "release": lambda: backend.release_job("7"), "cancel": lambda: backend.cancel_job("7"),
             "resubmit": lambda: backend.resubmit_job("7", ResubmitRequest())}
    with pytest.raises(NotOptedInError):
        await calls[operation]()
    assert ctl.jobs[7].state == "RUNNING" and len(ctl.jobs) == 1


async def test_opt_in_by_partition_marker_or_switched_off(ctl: Slurmctld) -> None:
    running(ctl, 7, comment=None, partition="gpu")
    running(ctl, 8, comment="team=x please:recover")
    running(ctl, 9, comment=None)
    assert (await PyslurmBackend(ctl.module, allow_partitions=["gpu"]).hold_job("7")).changed
    assert (await PyslurmBackend(ctl.module, comment_marker="please:recover").hold_job("8")).changed
    assert (await PyslurmBackend(ctl.module, enforce_opt_in=False).hold_job("9")).changed


# -- the stand-in keeps pyslurm's shapes --------------------------------------------------------

def test_stand_in_mirrors_pyslurm_shapes(ctl: Slurmctld) -> None:
    pyslurm = ctl.module
    with pytest.raises(AttributeError):
        pyslurm.Node(drain=True)  # not a writable Node attribute
    with pytest.raises(ValueError, match="Invalid Node state"):
        pyslurm.Node(state="BROKEN")
    with pytest.raises(AttributeError):
        pyslurm.JobSubmitDescription(partition="debug")  # it is `partitions`
    with pytest.raises(pyslurm.RPCError, match="reason"):
        pyslurm.Node("node1").modify(pyslurm.Node(state="DRAIN"))
    job_id = pyslurm.JobSubmitDescription(script=SCRIPT, nodes=2, is_requeueable=True).submit()
    snapshot = pyslurm.Job.load(job_id)
    assert isinstance(job_id, int) and snapshot.state == "RUNNING" and snapshot.allocated_nodes == "node[1-2]"
    pyslurm.Job(job_id).requeue()
    assert snapshot.requeue_count == 0 and pyslurm.Job.load(job_id).requeue_count == 1  # loads are snapshots
    pyslurm.Job(job_id).cancel()
    pyslurm.Job(job_id).cancel()  # finished: ignored, like ESLURM_ALREADY_DONE in send_signal
    with pytest.raises(pyslurm.RPCError) as caught:
        pyslurm.Job.load(424242)
    assert caught.value.errno == 2017 and caught.value.msg == "Invalid job id specified"
