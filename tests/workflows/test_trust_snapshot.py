"""The track record answered from a worker's snapshot, on the real Temporal dev server (#29).

A recommendation for a rule the snapshot shows waiting for approval is answered at once and
delivered to the record as a durable signal; a rule with autonomy is always asked of the record,
so a stale snapshot can only make goodput more cautious, never let it act alone.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from activities.adapters.trust import TemporalTrustRecord
from goodput.models import Mode, OperatorDecision
from goodput.recover.trust import AutonomyPolicy, Fate, TrustEvent
from goodput.recover.trust_snapshot import STALE_AFTER_S
from tests.helpers import eventually
from tests.workflows.helpers import running_worker
from workflows.trust import TrustRecordWorkflow, trust_workflow_id

# One approval earns a rule autonomy here.
BAR = AutonomyPolicy(min_decisions=1, min_agreement=0.0)
DAVE = OperatorDecision(who="dave", reason="watch it for now")


def told(rule: str, incident: str, fate: Fate = Fate.RECOMMENDED) -> TrustEvent:
    return TrustEvent(rule=rule, fate=fate, incident_id=incident, at=datetime.now(UTC), job_id="7")


async def test_recommendations_answered_from_the_snapshot_never_grant_autonomy(client: Client,
                                                                               task_queue: str) -> None:
    cluster = f"snap{uuid.uuid4().hex[:6]}"
    worker, stale = TemporalTrustRecord(client, task_queue), TemporalTrustRecord(client, task_queue)
    async with running_worker(client, task_queue):
        # No record yet: an empty record's standing, answered at once; the signal starts the record.
        first = await worker.note(cluster, told("xid-79", "inc-1"), BAR)
        assert (first.level, worker.from_snapshot) == (Mode.APPROVE, 1)
        assert (await stale.note(cluster, told("hang", "inc-2"), BAR)).level is Mode.APPROVE
        assert stale.from_snapshot == 1

        # The operator approves inc-1: the rule earns autonomy, and this worker drops its snapshot.
        assert (await worker.note(cluster, told("xid-79", "inc-1", Fate.AGREED), BAR)).level is Mode.AUTONOMOUS
        again = await worker.note(cluster, told("xid-79", "inc-3"), BAR)
        assert (again.level, worker.from_snapshot) == (Mode.AUTONOMOUS, 1)  # asked of the record

        # `hang` earns it too through `worker`; `stale` still holds its snapshot: it asks for
        # approval (more cautious) until the snapshot ages past STALE_AFTER_S, then asks the record.
        await worker.note(cluster, told("hang", "inc-2", Fate.AGREED), BAR)
        assert (await stale.note(cluster, told("hang", "inc-4"), BAR)).level is Mode.APPROVE
        stale._views[cluster].taken -= STALE_AFTER_S + 1
        assert (await stale.note(cluster, told("hang", "inc-5"), BAR)).level is Mode.AUTONOMOUS
        assert stale.from_snapshot == 2

        # A pin to monitor through this process counts here at once, and is answered as pinned.
        await worker.pin(cluster, "xid-79", Mode.MONITOR, DAVE, BAR)
        pinned = await worker.note(cluster, told("xid-79", "inc-6"), BAR)
        assert (pinned.level, pinned.pinned, worker.from_snapshot) == (Mode.MONITOR, True, 2)

        # Every recommendation reached the record, by signal or by update.
        lines = await eventually(lambda: worker.read(cluster),
                                 lambda ls: sum(s.recommendations for s in ls) == 6, what="six recommendations")
    assert {s.rule: (s.recommendations, s.agreed) for s in lines} == {"xid-79": (3, 1), "hang": (3, 1)}
    history = await client.get_workflow_handle(trust_workflow_id(cluster)).fetch_history()
    replayer = Replayer(workflows=[TrustRecordWorkflow], data_converter=pydantic_data_converter)
    assert (await replayer.replay_workflow(history, raise_on_replay_failure=False)).replay_failure is None
