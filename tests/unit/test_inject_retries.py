"""A storm's refused anomaly is sent again, not lost: signal-with-start retried on load shedding.

And what a process remembers of the incidents it delivered to (#29) is bounded and only a hint: the
plain signal to a known incident is retried while the server sheds load, like the full call, and a
run the server no longer has is forgotten and the anomaly goes by the full call."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

import workers.incident_delivery as delivery_module
from goodput.service.incidents import ServiceUnavailableError
from tests.workflows.helpers import FAST, anomaly
from workers.client import TemporalIncidentService
from workers.incident_delivery import INJECT_ATTEMPTS, IncidentDelivery, inject_backoff_s


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


class FakeClient:
    """Records each call; the plain signal answers with the statuses queued in `signal_errors`."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.signal_errors: list[RPCStatusCode] = []

    async def start_workflow(self, *args: Any, id: str, **kwargs: Any) -> object:
        self.calls.append(("start", id))
        return object()

    def get_workflow_handle(self, workflow_id: str) -> Any:
        outer = self

        class Handle:
            async def signal(self, *args: Any, **kwargs: Any) -> None:
                outer.calls.append(("signal", workflow_id))
                if outer.signal_errors:
                    raise RPCError("refused", outer.signal_errors.pop(0), b"")

        return Handle()


async def test_the_oldest_known_incident_is_forgotten_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery_module, "KNOWN_OPEN_MAX", 2)
    fake = FakeClient()
    delivery = IncidentDelivery(fake, "q", index=False)  # type: ignore[arg-type]
    first, second, third = (anomaly(job_id=j, cluster="bounded") for j in ("1", "2", "3"))
    for a in (first, second, third, second, first):
        await delivery.deliver([a], FAST)
    ids = [a.incident_key.workflow_id for a in (first, second, third)]
    assert fake.calls == [("start", ids[0]), ("start", ids[1]), ("start", ids[2]),
                          ("signal", ids[1]), ("start", ids[0])]


async def test_a_shed_plain_signal_is_sent_again_and_a_gone_run_takes_the_full_call() -> None:
    fake = FakeClient()
    delivery = IncidentDelivery(fake, "q", index=False)  # type: ignore[arg-type]
    a = anomaly(cluster="shed")
    incident = a.incident_key.workflow_id
    await delivery.deliver([a], FAST)
    fake.signal_errors = [RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.CANCELLED]
    await delivery.deliver([anomaly(cluster="shed")], FAST)
    assert fake.calls[1:] == [("signal", incident)] * 3
    fake.calls.clear()
    fake.signal_errors = [RPCStatusCode.NOT_FOUND]
    await delivery.deliver([anomaly(cluster="shed")], FAST)
    await delivery.deliver([anomaly(cluster="shed")], FAST)
    assert fake.calls == [("signal", incident), ("start", incident), ("signal", incident)]
