"""`lost-work` and `audit --from-histories` read every incident's report: unanswerable ones (a running
incident whose workers are down costs a query timeout each) must not add up one after another, and
the order and the per-incident errors must survive reading them side by side."""

from __future__ import annotations

import asyncio
from typing import Any

from goodput.recover.incident import IncidentReport
from goodput.service.incidents import ServiceUnavailableError
from workers.service_commands import READS_AT_ONCE, readable_reports


class Row:
    def __init__(self, incident_id: str) -> None:
        self.incident_id = incident_id


class SlowService:
    """Every read takes a while; the ones named in `stuck` fail as a query to a worker-less incident does."""

    def __init__(self, ids: list[str], stuck: set[str]) -> None:
        self.ids, self.stuck = ids, stuck
        self.in_flight = self.most_in_flight = 0

    async def list_incidents(self, limit: int = 50, cluster: str | None = None) -> list[Row]:
        return [Row(i) for i in self.ids[:limit]]

    async def get(self, incident_id: str) -> Any:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.05)
            if incident_id in self.stuck:
                raise ServiceUnavailableError("query timed out: no worker answered")
            return report(incident_id)
        finally:
            self.in_flight -= 1


def report(incident_id: str) -> IncidentReport:
    return IncidentReport.model_construct(incident_id=incident_id)


async def test_reports_are_read_side_by_side_in_order_and_each_failure_is_named() -> None:
    ids = [f"inc-{i:03d}" for i in range(40)]
    service = SlowService(ids, stuck={"inc-003", "inc-031"})
    reports, unreadable = await readable_reports(service, limit=40)  # type: ignore[arg-type]
    assert [r.incident_id for r in reports] == [i for i in ids if i not in service.stuck]
    said = "query timed out: no worker answered"
    assert unreadable == [f"inc-003: {said}", f"inc-031: {said}"]
    assert 1 < service.most_in_flight <= READS_AT_ONCE
