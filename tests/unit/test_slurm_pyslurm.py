"""PyslurmBackend against goodput's pyslurm 25.11 stand-in (pyslurm itself cannot be built here).

Every Protocol operation, the shared rules (idempotence, ownership, opt-in), error mapping, hostile
identifiers, resubmission attributes, the lazy import, and the stand-in's own fidelity.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from activities.adapters.slurm_owner import LocalAccounts
from activities.adapters.slurm_pyslurm import (
    INSTALL_HINT,
    PyslurmBackend,
    PyslurmUnavailableError,
    job_info,
    node_info,
    submit_attributes,
)
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
from goodput.slurm.resubmit import ResubmitKey, resubmit_tag
from goodput.slurm.submit_as import Account, OwnerError
from tests.fakes.pyslurm_standin import (
    ESLURM_JOB_PENDING,
    JobRecord,
    NodeRecord,
    RPCError,
    Slurmctld,
)

REPO = Path(__file__).resolve().parents[2]
REASON = drain_reason("inc-1", "xid 79 on GPU 3")
SCRIPT = "#!/bin/bash\nsrun python train.py\n"
HOSTILE = ["node1;rm -rf /", "node1\nnode2", "x" * 10_000, "$(reboot)", "-h", ""]
KEY = ResubmitKey(b"unit-test-resubmit-key", "default")
# Owners that exist only in this test's account directory, never on the host running it.
ALICE = {"user_id": 1001, "user_name": "unit-alice", "group_id": 1001}
USERS = {1001: "unit-alice", 1002: "unit-mallory"}


class Accounts(LocalAccounts):
    """The worker host's passwd database: the real one, plus unit-alice."""

    def __init__(self, extra: dict[str, Account] | None = None) -> None:
        self.extra = {"unit-alice": Account(name="unit-alice", uid=1001, gid=1001, home="/home/unit-alice",
                                               shell="/bin/bash")} if extra is None else extra

    async def account(self, name: str) -> Account | None:
        return self.extra[name] if name in self.extra else await super().account(name)


def running(ctl: Slurmctld, job_id: int = 7, *, comment: str | None = "goodput:opt-in", **fields: Any) -> JobRecord:
    values: dict[str, Any] = {"name": "train", "state": "RUNNING", "nodes": ("node1", "node2"), "num_nodes": 2,
                              "is_requeueable": True, "standard_output": f"/scratch/out-{job_id}.log"}
    return ctl.add_job(JobRecord(id=job_id, script=SCRIPT, comment=comment, **(values | fields)))


@pytest.fixture
def ctl() -> Slurmctld:
    return Slurmctld(users=USERS)


@pytest.fixture
def backend(ctl: Slurmctld) -> PyslurmBackend:
    return PyslurmBackend(ctl.module, resubmit_key=KEY, accounts=Accounts())


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


async def test_list_jobs_and_nodes(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl)
    ctl.nodes["node9"] = NodeRecord("node9", gres={"gpu:a100": 4})
    jobs = await backend.list_jobs()
    assert [(j.job_id, j.state) for j in jobs] == [("7", JobState.RUNNING)]
    nodes = {n.name: n for n in await backend.list_nodes()}
    assert nodes["node1"].state == "ALLOCATED" and nodes["node3"].state == "IDLE"
    assert nodes["node1"].gres == "gpu:8" and nodes["node9"].gres == "gpu:a100:4"


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


# -- resubmission -------------------------------------------------------------------------------

async def test_resubmit_reproduces_the_job_and_excludes_nodes(ctl: Slurmctld, backend: PyslurmBackend,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    running(ctl, excluded_nodes=("node9",), required_nodes=("node1", "node2"), account="proj", qos="high",
            constraints=["a100"], reservation="maint", time_limit=90, memory_per_node=64000, ntasks_per_node=4,
            cpus_per_task=8, gres_per_node={"gpu": 8}, standard_error="/scratch/err-7.log",
            working_directory="/scratch/run")
    ctl.nodes["node9"] = NodeRecord("node9")
    request = ResubmitRequest(exclude=("node1",), environment={"GOODPUT_RESUMED": "1"}, hold=True,
                              incident_id="inc-1")
    result = await backend.resubmit_job("7", request)
    assert result.changed and result.new_job_id and result.new_job_id != "7"
    copy = ctl.jobs[int(result.new_job_id)]
    assert copy.excluded_nodes == ("node9", "node1") and copy.required_nodes == ()
    assert copy.comment == f"{resubmit_tag('7', KEY.token('7', 'inc-1'))} goodput:opt-in" and copy.is_requeueable
    assert (copy.account, copy.qos, copy.constraints, copy.reservation) == ("proj", "high", ["a100"], "maint")
    assert (copy.time_limit, copy.memory_per_node, copy.ntasks_per_node, copy.cpus_per_task) == (90, 64000, 4, 8)
    assert copy.gres_per_node == {"gpu": 8} and copy.working_directory == "/scratch/run"
    assert copy.standard_output == f"/scratch/out-{copy.id}.log"  # the %j pattern, not job 7's file
    assert copy.standard_error == f"/scratch/err-{copy.id}.log"
    assert copy.script == SCRIPT and (copy.user_id, copy.group_id) == (0, 0)
    assert copy.environment["GOODPUT_RESUMED"] == "1" and copy.environment["USER"] == "root"
    assert copy.environment["SLURM_CONF"] == "/etc/slurm/slurm.conf"  # pyslurm adds SLURM_* itself
    assert copy.priority == 0 and copy.state == "PENDING" and (await backend.get_job(str(copy.id))).held


def test_submit_attributes_keep_a_pinned_node_list_without_excluded_nodes() -> None:
    job = SimpleNamespace(id=7, comment=None, is_requeueable=False, partition="gpu,debug", num_nodes=2,
                          required_nodes="node[3-4]", excluded_nodes=None, standard_output=None,
                          standard_error=None, ntasks=2)
    owner = Account(name="unit-alice", uid=1001, gid=1001)
    attrs = submit_attributes(job, "7", SCRIPT, owner=owner, token="tk", exclude=("node1",))
    assert attrs["required_nodes"] == ["node3", "node4"] and attrs["excluded_nodes"] == ["node1"]
    assert attrs["partitions"] == "gpu" and attrs["nodes"] == 2 and attrs["ntasks"] == 2
    assert attrs["comment"] == "goodput:resubmit-of=7:tk" and attrs["is_requeueable"] is False
    assert "priority" not in attrs and attrs["environment"] == {}  # never "ALL" (goodput's environment)
    assert (attrs["user_id"], attrs["group_id"], attrs["working_directory"]) == (1001, 1001, "/")


async def test_a_retried_resubmit_finds_its_first_copy(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl)
    first = await backend.resubmit_job("7", ResubmitRequest(exclude=("node1",)))
    again = await backend.resubmit_job("7", ResubmitRequest(exclude=("node1",)))
    assert first.changed and not again.changed and again.new_job_id == first.new_job_id
    assert len(ctl.jobs) == 2
    ctl.jobs[int(first.new_job_id or 0)].state = "FAILED"  # a finished copy: a new recovery may resubmit
    assert (await backend.resubmit_job("7", ResubmitRequest())).changed


async def test_the_copy_runs_as_its_owner_with_nothing_of_goodputs_environment(
        ctl: Slurmctld, backend: PyslurmBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOODPUT_PUSH_TOKEN", "s3cret")
    running(ctl, **ALICE)
    result = await backend.resubmit_job("7", ResubmitRequest(environment={"GOODPUT_RESUME_FROM": "/ck/9"}))
    copy = ctl.jobs[int(result.new_job_id or 0)]
    assert (copy.user_id, copy.user_name, copy.group_id) == (1001, "unit-alice", 1001)
    assert "GOODPUT_PUSH_TOKEN" not in copy.environment and "s3cret" not in copy.environment.values()
    assert {k: v for k, v in copy.environment.items() if not k.startswith("SLURM_")} == {
        "HOME": "/home/unit-alice", "USER": "unit-alice", "LOGNAME": "unit-alice", "SHELL": "/bin/bash",
        "PATH": "/usr/local/bin:/usr/bin:/bin", "GOODPUT_RESUME_FROM": "/ck/9"}


async def test_an_unprivileged_worker_cannot_submit_for_the_owner() -> None:
    ctl = Slurmctld(user="goodput", uid=500, users=USERS)
    running(ctl, **ALICE)
    with pytest.raises(PermanentSchedulerError, match="permission denied"):
        await PyslurmBackend(ctl.module, accounts=Accounts()).resubmit_job("7", ResubmitRequest())
    assert list(ctl.jobs) == [7]  # and never as goodput itself


@pytest.mark.parametrize(("owner", "accounts", "match"), [
    ({"user_id": 1001, "user_name": None}, Accounts(), "unknown"),
    (ALICE, Accounts({}), "no account"),
    (ALICE, Accounts({"unit-alice": Account(name="unit-alice", uid=1005, gid=1005)}), "uid 1005"),
])
async def test_resubmit_refuses_an_owner_it_cannot_be(ctl: Slurmctld, owner: dict[str, Any], accounts: Accounts,
                                                     match: str) -> None:
    running(ctl, **owner)
    with pytest.raises(OwnerError, match=match):
        await PyslurmBackend(ctl.module, accounts=accounts).resubmit_job("7", ResubmitRequest())
    assert list(ctl.jobs) == [7]


async def test_another_users_job_claiming_to_be_the_copy_is_ignored(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl, **ALICE)
    tag = resubmit_tag("7", KEY.token("7", "inc-1"))
    running(ctl, 8, comment=f"goodput:opt-in {tag}", user_id=1002, user_name="unit-mallory", group_id=1002)
    running(ctl, 9, comment=f"goodput:opt-in {resubmit_tag('7', '0' * 32)}", **ALICE)
    result = await backend.resubmit_job("7", ResubmitRequest(incident_id="inc-1"))
    assert result.changed and result.new_job_id not in ("8", "9")
    assert ctl.jobs[int(result.new_job_id or 0)].user_name == "unit-alice"


async def test_a_script_shaped_like_a_planted_path_is_not_read(ctl: Slurmctld, backend: PyslurmBackend,
                                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pyslurm reads `script` from a file when it names one; a job whose script is `#!/x` would make
    # the worker submit the contents of ./#!/x (a link to any file the worker can read)
    (tmp_path / "#!").mkdir()
    (tmp_path / "#!" / "x").write_text("#!/bin/sh\necho worker-only secret\n")
    monkeypatch.chdir(tmp_path)
    running(ctl)
    ctl.jobs[7].script = "#!/x"
    with pytest.raises(PermanentSchedulerError, match="path"):
        await backend.resubmit_job("7", ResubmitRequest())
    assert list(ctl.jobs) == [7]


def test_stand_in_submission_environment_is_pyslurms(ctl: Slurmctld, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOODPUT_PUSH_TOKEN", "s3cret")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    submit = ctl.module.JobSubmitDescription
    everything = ctl.jobs[submit(script=SCRIPT).submit()].environment
    assert everything["GOODPUT_PUSH_TOKEN"] == "s3cret"  # the default "ALL" is the caller's environment
    only = ctl.jobs[submit(script=SCRIPT, environment={"A": "1"}).submit()].environment
    assert only == {"SLURM_CONF": "/etc/slurm/slurm.conf", "A": "1"}
    assert ctl.jobs[submit(script=SCRIPT, user_id=1001).submit()].user_id == 1001  # root may


async def test_only_batch_jobs_with_a_script_are_resubmitted(ctl: Slurmctld, backend: PyslurmBackend) -> None:
    running(ctl, is_batch_job=False)
    with pytest.raises(PermanentSchedulerError, match="not a batch job"):
        await backend.resubmit_job("7", ResubmitRequest())
    running(ctl, 8)
    ctl.jobs[8].script = "  \n"
    with pytest.raises(PermanentSchedulerError, match="no batch script"):
        await backend.resubmit_job("8", ResubmitRequest())


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
