"""What one incident asks of the scheduler does not grow with the cluster (issue #29): verify's
capacity note reads the job's partition, not every node, and an incident's drains of several
nodes go to Slurm as one command."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.testing import ActivityEnvironment

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.recovery import RecoveryActivities
from goodput.demo.scheduler import FakeScheduler
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import IsolateInput, VerifyInput
from goodput.scheduler import JobInfo, JobState, NodeInfo
from tests.fakes.notifier import RecordingNotifier
from tests.unit.test_slurm_batch import SlurmStandIn

CLUSTER = 10_000
PARTITION = [NodeInfo(name=f"gpu{i}", state="IDLE" if i % 2 else "ALLOCATED") for i in range(8)]


class BigCluster(FakeScheduler):
    """A 10,000-node cluster whose job 7 waits for capacity in partition `gpu`; counts what it lists."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: list[tuple[str, int]] = []  # (partition asked for, nodes returned)

    async def get_job(self, job_id: str) -> JobInfo:
        return JobInfo(job_id=job_id, state=JobState.PENDING, state_reason="Resources", partition="gpu",
                       restart_count=1, comment="goodput:opt-in")

    async def list_nodes(self, partition: str = "") -> Sequence[NodeInfo]:
        nodes = PARTITION if partition == "gpu" else [NodeInfo(name=f"n{i}", state="IDLE") for i in range(CLUSTER)]
        self.listed.append((partition, len(nodes)))
        return nodes


async def test_the_capacity_note_reads_the_jobs_partition_not_the_cluster() -> None:
    cluster = BigCluster()
    activities = RecoveryActivities(cluster, RecordingNotifier(), LocalDrainGate())
    result = await ActivityEnvironment().run(activities.verify, VerifyInput(
        job_id="7", restart_count_before=0, timeout_s=0.05, poll_interval_s=0.01))
    assert not result.ok and "4 free now" in result.detail, result.detail
    assert cluster.listed == [("gpu", 8)]


async def test_an_incidents_drains_of_several_nodes_are_one_command() -> None:
    slurm = SlurmStandIn()
    activities = RecoveryActivities(SlurmCliBackend(slurm), RecordingNotifier(), LocalDrainGate())
    result = await ActivityEnvironment().run(activities.isolate, IsolateInput(
        incident_id="inc-9", nodes=("node1", "node2", "node3"), summary="leaf switch down"))
    assert result.drained == ("node1", "node2", "node3")
    assert [argv[2] for argv in slurm.acted] == ["NodeName=node1,node2,node3"]
    assert all("one of 3" in d for d in result.details)


async def test_a_job_waiting_out_slurms_requeue_delay_costs_no_node_list() -> None:
    # BeginTime after a requeue: no node could start it yet, so what the partition holds says nothing
    class Requeued(BigCluster):
        async def get_job(self, job_id: str) -> JobInfo:
            return (await super().get_job(job_id)).model_copy(update={"state_reason": "BeginTime"})

    cluster = Requeued()
    activities = RecoveryActivities(cluster, RecordingNotifier(), LocalDrainGate())
    result = await ActivityEnvironment().run(activities.verify, VerifyInput(
        job_id="7", restart_count_before=0, timeout_s=0.05, poll_interval_s=0.01))
    assert not result.ok and "BeginTime" in result.detail, result.detail
    assert cluster.listed == []
