"""What a process remembers of the incidents it delivered to is bounded, and only a hint (#29).

The plain signal to a known incident is retried while the server sheds load, like the full call;
a run the server no longer has is forgotten and the anomaly goes by the full call.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

import workers.incident_delivery as delivery_module
from tests.workflows.helpers import FAST, anomaly
from workers.incident_delivery import IncidentDelivery


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


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    async def instantly(_: float) -> None:
        return None
    monkeypatch.setattr(delivery_module.asyncio, "sleep", instantly)


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
