"""The hot-spare pool (issue #15): policy, the pure decisions, the scontrol argv, the reservation
parser, the fake's reservations and the resume activity pointing a restarted job at the pool."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pydantic import ValidationError
from temporalio.testing import ActivityEnvironment

from activities.recovery import RecoveryActivities
from activities.spares import SpareActivities, offer_pool
from goodput.demo.scheduler import FakeClusterState, FakeScheduler
from goodput.identifiers import InvalidIdentifierError
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import ResumeInput
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.recover.spares import (
    RefillInput,
    SparePolicy,
    choose_pool,
    refill_needed,
    spare_outcome,
)
from goodput.scheduler import (
    JobInfo,
    JobState,
    NodeInfo,
    PermanentSchedulerError,
    ReservationInfo,
    UnknownReservationError,
)
from goodput.slurm import commands
from goodput.slurm.reservations import ReservationRecordError, parse_reservation
from tests.fakes.notifier import RecordingNotifier

POOL = "goodput-spares"
SPARES = SparePolicy(reservation=POOL, target_size=2)
# `scontrol show reservation -o goodput-spares` on the lab's Slurm 22.05.8
RECORD = ("ReservationName=goodput-spares StartTime=2026-12-01T18:49:57 EndTime=2027-12-01T18:49:57 "
          "Duration=365-00:00:00 Nodes=node[1,4] NodeCnt=2 CoreCnt=8 Features=(null) PartitionName=(null) "
          "Flags=FLEX,SPEC_NODES TRES=cpu=8 Users=root,goodput-alice Groups=(null) Accounts=(null) "
          "Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n")
HOSTILE = ["pool;rm -rf /", "pool\nx", "x" * 200, "-rf", "a b", "$(reboot)"]
JOB = JobInfo(job_id="42", state=JobState.RUNNING, partition="gpu", nodes=("node1",), requeue=True,
              comment="goodput:opt-in", user="alice", user_id=1001, group_id=1001)


def reservation(*nodes: str, flags: tuple[str, ...] = ("FLEX", "SPEC_NODES"),
                users: tuple[str, ...] = ("root",)) -> ReservationInfo:
    return ReservationInfo(name=POOL, nodes=nodes, users=users, flags=flags)


def test_the_pool_is_off_by_default_and_names_are_checked() -> None:
    assert not Policy().spares.enabled and not Policy().spares.applies_to("gpu")
    assert SPARES.applies_to("gpu") and not SPARES.model_copy(update={"partitions": ("debug",)}).applies_to("gpu")
    for name in HOSTILE:
        with pytest.raises(ValidationError):
            SparePolicy(reservation=name)
    with pytest.raises(ValidationError):
        SparePolicy(reservation=POOL, partitions=("gpu;x",))


def test_a_free_spare_is_used_and_an_empty_or_rigid_pool_is_not() -> None:
    nodes = [NodeInfo(name="node1", state="ALLOCATED"), NodeInfo(name="node4", state="IDLE"),
             NodeInfo(name="node5", state="IDLE", flags=("DRAIN",)), NodeInfo(name="node6", state="IDLE")]
    choice = choose_pool(SPARES, JOB, reservation("node4", "node5"), nodes, exclude=("node1",))
    assert choice.use and choice.free == ("node4",) and choice.pool == POOL
    busy = [NodeInfo(name="node4", state="ALLOCATED")]
    empty = choose_pool(SPARES, JOB, reservation("node4"), busy, exclude=())
    assert not empty.use and "pool goodput-spares empty" in empty.note and "queued normally" in empty.note
    excluded = choose_pool(SPARES, JOB, reservation("node4"), nodes, exclude=("node4",))
    assert not excluded.use
    rigid = choose_pool(SPARES, JOB, reservation("node4", flags=("SPEC_NODES",)), nodes, exclude=())
    assert not rigid.use and "FLEX" in rigid.note
    # A job in a reservation of its own keeps it: moving it into the pool would drop its owner's constraint.
    own = choose_pool(SPARES, JOB.model_copy(update={"reservation": "hero-run"}), reservation("node4"), nodes,
                      exclude=())
    assert not own.use and "own reservation hero-run" in own.note
    assert choose_pool(SPARES, JOB.model_copy(update={"reservation": POOL}), reservation("node4"), nodes,
                       exclude=()).use


def test_a_returned_node_refills_the_pool_only_below_its_target() -> None:
    assert refill_needed(SPARES, reservation("node4"), "node1") is None
    assert "already in pool" in (refill_needed(SPARES, reservation("node4", "node1"), "node1") or "")
    assert "stays in general service" in (refill_needed(SPARES, reservation("node4", "node5"), "node1") or "")


def test_the_incident_says_where_the_job_restarted() -> None:
    assert spare_outcome(POOL, ("node4",), ("node4",)) == "restarted on hot spare node4 from pool goodput-spares"
    assert "but the job runs on node7" in spare_outcome(POOL, ("node4",), ("node7",))


def test_reservation_argv() -> None:
    assert commands.show_reservation(POOL) == ["scontrol", "show", "reservation", "-o", POOL]
    assert commands.reservation_add_user(POOL, "alice") == [
        "scontrol", "update", f"ReservationName={POOL}", "Users+=alice"]
    assert commands.reservation_nodes(POOL, ["node4", "node1", "node4"]) == [
        "scontrol", "update", f"ReservationName={POOL}", "Nodes=node4,node1"]
    assert commands.job_reservation("42", POOL) == ["scontrol", "update", "JobId=42", f"Reservation={POOL}"]


@pytest.mark.parametrize("bad", HOSTILE)
def test_reservation_argv_refuses_hostile_names(bad: str) -> None:
    with pytest.raises(InvalidIdentifierError):
        commands.show_reservation(bad)
    with pytest.raises(InvalidIdentifierError):
        commands.reservation_add_user(POOL, bad)
    with pytest.raises(InvalidIdentifierError):
        commands.reservation_nodes(POOL, [bad])
    with pytest.raises(InvalidIdentifierError):
        commands.job_reservation("42", bad)


def test_the_reservation_record_of_22_05() -> None:
    parsed = parse_reservation(RECORD, POOL)
    assert parsed == ReservationInfo(name=POOL, nodes=("node1", "node4"), users=("root", "goodput-alice"),
                                     flags=("FLEX", "SPEC_NODES"))
    with pytest.raises(UnknownReservationError):
        parse_reservation("Reservation goodput-spares not found\n", POOL)
    with pytest.raises(ReservationRecordError):
        parse_reservation(RECORD.replace("goodput-spares", "other", 1), POOL)
    with pytest.raises(ReservationRecordError):
        parse_reservation(RECORD + RECORD, POOL)
    with pytest.raises(ReservationRecordError):
        parse_reservation(RECORD.replace("Watts=n/a", "Users=mallory"), POOL)


def cluster(*, with_pool: bool = True, kind: type[FakeScheduler] = FakeScheduler) -> FakeScheduler:
    # the fake does not move node states with its jobs: they are set as Slurm would show them
    nodes = {f"node{i}": NodeInfo(name=f"node{i}", state="IDLE" if i == 4 else "ALLOCATED", gres="gpu:8")
             for i in range(1, 5)}
    fake = kind(FakeClusterState(nodes=nodes))
    for job_id, node in (("7001", "node2"), ("7002", "node3")):  # someone else's jobs fill node2, node3
        fake.add_job(JOB.model_copy(update={"job_id": job_id, "nodes": (node,), "user": "mallory", "comment": ""}))
    fake.add_job(JOB)
    if with_pool:
        fake.add_reservation(reservation("node4"))
    return fake


async def test_the_fake_keeps_slurms_reservation_rules() -> None:
    fake = cluster()
    await fake.requeue_job("42", hold=True)
    with pytest.raises(PermanentSchedulerError, match="Access denied"):
        await fake.use_reservation("42", POOL)
    assert (await fake.allow_reservation_user(POOL, "alice")).changed
    assert not (await fake.allow_reservation_user(POOL, "alice")).changed
    await fake.exclude_nodes("42", ["node1"])
    await fake.release_job("42")
    assert (await fake.get_job("42")).state is JobState.PENDING  # node4 is reserved, the job not in it
    await fake.hold_job("42")
    await fake.use_reservation("42", POOL)
    await fake.release_job("42")
    assert (await fake.get_job("42")).nodes == ("node4",)
    assert (await fake.add_reservation_nodes(POOL, ["node1"])).changed
    assert not (await fake.add_reservation_nodes(POOL, ["node1"])).changed
    assert (await fake.get_reservation(POOL)).nodes == ("node4", "node1")
    with pytest.raises(UnknownReservationError):
        await fake.get_reservation("nope")


def resume_input(strategy: ResumeStrategy, spares: SparePolicy | None = SPARES) -> ResumeInput:
    return ResumeInput(incident_id="inc-1", job_id="42", strategy=strategy, exclude=("node1",), spares=spares)


@pytest.mark.parametrize("strategy", list(ResumeStrategy))
async def test_a_restarted_job_starts_on_the_spare(strategy: ResumeStrategy) -> None:
    fake = cluster()
    await fake.drain_node("node1", "goodput:inc-1: xid 79")
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    resumed = await ActivityEnvironment().run(activities.resume, resume_input(strategy))
    job = await fake.get_job(resumed.job_id)
    assert job.state is JobState.RUNNING and job.nodes == ("node4",), (job, resumed.detail)
    assert resumed.spare_pool == POOL and resumed.spare_nodes == ("node4",)
    assert "may start at once on hot spare(s) node4 of pool goodput-spares" in resumed.detail
    assert (await fake.get_reservation(POOL)).users == ("root", "alice")  # the owner, nobody else


async def test_without_a_free_spare_the_job_queues_as_before_and_says_so() -> None:
    fake = cluster()
    fake.add_reservation(reservation("node4").model_copy(update={"nodes": ("node3",)}))  # node3 is busy
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    resumed = await ActivityEnvironment().run(activities.resume, resume_input(ResumeStrategy.REQUEUE))
    assert "pool goodput-spares empty" in resumed.detail and not resumed.spare_pool
    assert (await fake.get_reservation(POOL)).users == ("root",)
    missing = cluster(with_pool=False)
    resumed = await ActivityEnvironment().run(RecoveryActivities(missing, RecordingNotifier(), LocalDrainGate()).resume,
                                              resume_input(ResumeStrategy.REQUEUE))
    assert "pool goodput-spares not used (reservation goodput-spares not found)" in resumed.detail
    plain = await ActivityEnvironment().run(RecoveryActivities(cluster(), RecordingNotifier(), LocalDrainGate()).resume,
                                            resume_input(ResumeStrategy.REQUEUE, spares=None))
    assert "pool" not in plain.detail and not plain.spare_pool


async def test_the_refill_activity_is_idempotent() -> None:
    fake = cluster()
    refill = SpareActivities(fake).refill_spares
    request = RefillInput(cluster="c", node="node1", policy=SPARES)
    first = await ActivityEnvironment().run(refill, request)
    again = await ActivityEnvironment().run(refill, request)
    assert first.added and not again.added and "already in pool" in again.detail
    full = await ActivityEnvironment().run(refill, request.model_copy(update={"node": "node2"}))
    assert not full.added and "stays in general service" in full.detail
    gone = await ActivityEnvironment().run(refill, request.model_copy(update={
        "policy": SparePolicy(reservation="nope", target_size=2)}))
    assert not gone.added and "not found" in gone.detail


class NodeReads(FakeScheduler):
    """The fake cluster, counting how nodes are read: the pool must never list the whole cluster."""

    def __init__(self, state: FakeClusterState) -> None:
        super().__init__(state)
        self.listed = 0
        self.read: list[str] = []

    async def list_nodes(self, partition: str = "") -> Sequence[NodeInfo]:
        self.listed += 1
        return await super().list_nodes(partition)

    async def get_node(self, name: str) -> NodeInfo:
        self.read.append(name)
        return await super().get_node(name)


async def test_the_pool_reads_its_own_nodes_by_name_never_the_whole_cluster() -> None:
    counting = cluster(with_pool=False, kind=NodeReads)
    assert isinstance(counting, NodeReads)
    counting.add_reservation(reservation("node4", "node-gone"))  # a member Slurm no longer knows
    choice = await offer_pool(counting, SPARES, JOB, ())
    assert choice is not None and choice.use and choice.free == ("node4",), choice
    assert counting.listed == 0
    assert sorted(counting.read) == ["node-gone", "node4"]
