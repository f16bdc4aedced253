"""Hostile NVSentinel deliveries: CloudEvents bodies and protobuf HealthEvents messages.

Both arrive from the network. `parse_cloudevent` may only raise `CloudEventError`, `parse_event` and
`event_from_proto` only `NvSentinelEventError`, and protobuf decoding only its DecodeError; the
cheap JSON triage must never raise, and whenever it decides an event without parsing it, the full
parse must agree (an event it ignores is never one the model would act on).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from activities.adapters.nvsentinel import event_from_proto, event_to_proto
from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from goodput.detect.nvsentinel import (
    CloudEventError,
    NvSentinelEventError,
    parse_cloudevent,
    parse_event,
    triage_json,
)
from tests.fuzz.harness import rejects_cleanly

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

EVENT: dict[str, Any] = {
    "version": 1, "agent": "syslog-health-monitor", "componentClass": "GPU", "checkName": "SysLogsXIDError",
    "isFatal": True, "isHealthy": False, "message": "GPU has fallen off the bus", "recommendedAction": 24,
    "errorCode": ["79"], "entitiesImpacted": [{"entityType": "GPU_UUID", "entityValue": "GPU-8d0c5a7e"}],
    "generatedTimestamp": "2026-11-29T09:29:58.123456789Z", "nodeName": "node1", "gpuUUID": "GPU-8d0c5a7e",
    "quarantineOverrides": {"force": False, "skip": False}, "processingStrategy": "EXECUTE_REMEDIATION",
}
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30),
                    st.sampled_from(["NONE", "STORE_ONLY", "RESTART_APP", "true", "1e999", "node1;reboot", "\x00",
                                     "9" * 60, "2026-13-45T99:99:99Z", "GPU-" + "f" * 200]))
values = st.one_of(scalars, st.lists(scalars, max_size=4), st.dictionaries(st.text(max_size=8), scalars, max_size=3))


@st.composite
def health_events(draw: st.DrawFn) -> dict[str, Any]:
    event = dict(EVENT)
    for key in draw(st.lists(st.sampled_from(sorted(EVENT)), max_size=5)):
        if draw(st.booleans()):
            event[key] = draw(values)
        else:
            event.pop(key, None)
    return event


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=200))
    document: Any = {"specversion": "1.0", "id": "x", "source": "nvsentinel://a/healthevents",
                     "type": "com.nvidia.nvsentinel.health.v1", "data": {"healthEvent": draw(health_events())}}
    if kind == 1:
        for key in draw(st.lists(st.sampled_from(["specversion", "id", "source", "data", "datacontenttype"]),
                                 max_size=2)):
            document[key] = draw(values)
    text = json.dumps(document)
    if kind == 3:  # raw JSON no encoder writes: huge numbers, deep nesting, lone surrogates
        fragment = draw(st.sampled_from(["9" * 5000, "[" * 3000 + "]" * 3000, '"\\ud800"', "NaN", "-Infinity"]))
        text = text.replace('"x"', fragment, 1)
    return text.encode()


@given(bodies())
def test_cloudevents(body: bytes) -> None:
    event = rejects_cleanly("nvsentinel-cloudevent", lambda: parse_cloudevent(body), (CloudEventError,))
    if event is None:
        return
    quick = triage_json(event.event)  # never raises
    parsed = rejects_cleanly("nvsentinel-event", lambda: parse_event(event.event), (NvSentinelEventError,))
    if parsed is not None and quick is not None:
        assert quick.disposition == parsed.triage().disposition


BASE_MESSAGE = event_to_proto(parse_event(EVENT))


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=300))
    event = pb.HealthEvent()
    event.CopyFrom(BASE_MESSAGE)
    event.generatedTimestamp.seconds = draw(st.sampled_from([0, -(2**62), 2**62, 253402300800, 1764408598]))
    event.recommendedAction = draw(st.integers(0, 2**31 - 1))  # type: ignore[assignment]  # open enum
    event.nodeName = draw(st.text(max_size=40))
    event.message = draw(st.text(max_size=100))
    data = pb.HealthEvents(version=1, events=[event]).SerializeToString()
    cut = draw(st.integers(0, len(data)))
    return data[:cut] if draw(st.booleans()) else data


@given(messages())
def test_protobuf_messages(data: bytes) -> None:
    batch = rejects_cleanly("nvsentinel-protobuf", lambda: pb.HealthEvents.FromString(data), (DecodeError,))
    for message in batch.events if batch is not None else ():
        rejects_cleanly("nvsentinel-proto-event", lambda m=message: event_from_proto(m),  # type: ignore[misc]
                        (NvSentinelEventError,))


_CLIENTS = {"nvsentinel": "s" * 32}
_NOW = datetime(2026, 11, 29, tzinfo=UTC)
_MINTED = "nvsentinel.1795860721."
token_texts = st.one_of(st.text(max_size=120), st.text(max_size=80).map(lambda t: _MINTED + t),
                        st.text(alphabet="0123456789abcdefé\u0661\udcff", min_size=60, max_size=70).map(
                            lambda t: _MINTED + t))


@given(token_texts, st.one_of(st.none(), st.text(max_size=120)), st.dictionaries(st.text(max_size=15),
                                                                                  st.text(max_size=40), max_size=4))
def test_credentials(token: str, header: str | None, form: dict[str, str]) -> None:
    """Issue #26: a caller's token, header or form never raises (a non-ASCII MAC was a TypeError, an
    HTTP 500), and nothing made up is accepted."""
    from goodput.detect.nvsentinel import access_token_valid, client_credentials, token_accepted

    assert rejects_cleanly("nvsentinel-access-token", lambda: access_token_valid(token, _CLIENTS, _NOW), ()) is False
    assert rejects_cleanly("nvsentinel-bearer", lambda: token_accepted(header, ("t" * 32,)), ()) in (False, None) or (
        header is not None and header.strip().split(" ")[-1] == "t" * 32)
    assert rejects_cleanly("nvsentinel-client-credentials", lambda: client_credentials(form, header, _CLIENTS), ()) \
        is None
