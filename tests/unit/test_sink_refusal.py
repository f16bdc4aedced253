"""A delivery the service refuses for good fails the anomalies it carried, and the sink goes on (#29).

IncidentSink (workers.watch) folds one incident's anomalies while a delivery is in flight. A batch
Temporal refuses even after the service's own retries must fail each of its anomalies' `submit`
with the service's error (so the detector's retry takes over, as for a single anomaly), and must
not leave the incident marked in flight: the next anomaly of that incident is delivered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Mode
from goodput.recover.policy import Policy
from goodput.service.incidents import InjectResult, ServiceUnavailableError
from workers.watch import IncidentSink


def crash(n: int) -> Anomaly:
    now = datetime.now(UTC)
    return Anomaly(id=f"a{n}", source=AnomalySource.LOG, kind=AnomalyKind.CRASH, cluster="c", job_id="1",
                   category=Category.NCCL_TIMEOUT, observed_at=now, detected_at=now)


class Refusing:
    """Holds the first delivery until released; refuses the second for good; takes the rest."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.deliveries: list[list[str]] = []

    async def inject(self, a: Anomaly, policy: Policy | None, mode: Mode | None = None) -> InjectResult:
        return await self.inject_batch([a], policy, mode)

    async def inject_batch(self, anomalies: Sequence[Anomaly], policy: Policy | None,
                           mode: Mode | None = None) -> InjectResult:
        self.deliveries.append([a.id for a in anomalies])
        if len(self.deliveries) == 1:
            await self.release.wait()
        if len(self.deliveries) == 2:
            raise ServiceUnavailableError("Temporal refused the anomaly: shed")
        return InjectResult(incident_id=anomalies[0].incident_key.workflow_id, new_incident=False)


@pytest.mark.timeout(30)
async def test_a_batch_refused_for_good_fails_its_anomalies_and_the_next_one_is_delivered() -> None:
    service = Refusing()
    sink = IncidentSink(service, Policy())
    first = asyncio.create_task(sink.submit(crash(1)))
    await asyncio.sleep(0)
    folded = [asyncio.create_task(sink.submit(crash(n))) for n in (2, 3)]
    await asyncio.sleep(0)
    service.release.set()
    await first
    outcomes = await asyncio.gather(*folded, return_exceptions=True)
    assert all(isinstance(o, ServiceUnavailableError) for o in outcomes), outcomes
    await sink.submit(crash(4))
    assert service.deliveries == [["a1"], ["a2", "a3"], ["a4"]]
