"""A storm's refused anomaly is sent again, not lost: signal-with-start retried on load shedding."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

import workers.incident_delivery as delivery_module
from goodput.service.incidents import ServiceUnavailableError
from tests.workflows.helpers import FAST, anomaly
from workers.client import TemporalIncidentService
from workers.incident_delivery import INJECT_ATTEMPTS, inject_backoff_s


class Refusing:
    """A client whose first `refusals` starts are refused with `status`."""

    def __init__(self, refusals: int, status: RPCStatusCode) -> None:
        self.refusals, self.status, self.calls = refusals, status, 0

    async def start_workflow(self, *args: Any, **kwargs: Any) -> object:
        self.calls += 1
        if self.calls <= self.refusals:
            raise RPCError("namespace rate limit exceeded", self.status, b"")
        return object()


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    async def instantly(_: float) -> None:
        return None
    monkeypatch.setattr(delivery_module.asyncio, "sleep", instantly)


async def test_a_refused_anomaly_is_sent_again_until_accepted() -> None:
    fake = Refusing(refusals=3, status=RPCStatusCode.RESOURCE_EXHAUSTED)
    result = await TemporalIncidentService(fake, "q", index=False).inject(anomaly(), FAST)  # type: ignore[arg-type]
    assert fake.calls == 4 and result.incident_id


async def test_refusals_past_the_attempts_and_other_errors_are_reported() -> None:
    fake = Refusing(refusals=10**6, status=RPCStatusCode.RESOURCE_EXHAUSTED)
    with pytest.raises(ServiceUnavailableError, match="Temporal refused the anomaly"):
        await TemporalIncidentService(fake, "q", index=False).inject(anomaly(), FAST)  # type: ignore[arg-type]
    assert fake.calls == INJECT_ATTEMPTS
    denied = Refusing(refusals=1, status=RPCStatusCode.PERMISSION_DENIED)
    with pytest.raises(ServiceUnavailableError):
        await TemporalIncidentService(denied, "q", index=False).inject(anomaly(), FAST)  # type: ignore[arg-type]
    assert denied.calls == 1  # not a load problem: not retried


def test_the_backoff_grows_jittered_and_bounded() -> None:
    waits = [inject_backoff_s(a) for a in range(INJECT_ATTEMPTS)]
    assert 0.25 <= waits[0] <= 0.375 and all(4.0 <= w <= 6.0 for w in waits[4:])
    assert 8 < sum(min(4.0, 0.25 * 2 ** a) for a in range(INJECT_ATTEMPTS - 1)) < 20


async def test_an_anomaly_whose_call_timed_out_client_side_is_sent_again() -> None:
    # The SDK's own rpc_timeout ends a call as CANCELLED "Timeout expired" (tonic's timeout): in
    # the 500-job storm 46 anomalies were given up at once this way and two jobs got no incident.
    fake = Refusing(refusals=2, status=RPCStatusCode.CANCELLED)
    result = await TemporalIncidentService(fake, "q", index=False).inject(anomaly(), FAST)  # type: ignore[arg-type]
    assert fake.calls == 3 and result.incident_id
