"""The NVSentinel adapter: its health events received and turned into anomalies, and goodput's verdicts sent back.

- `incoming`: one event as a transport delivered it, triaged from a few fields before any model is built;
- `messages`: NVSentinel's protobuf messages to and from the `HealthEvent` model, and its gRPC names;
- `intake`: `NvSentinelIntake`, the one place both transports (workers/nvsentinel/server.py) hand events to;
- `tokenreview`: `TokenReviewer`, Kubernetes TokenReview for NVSentinel's ServiceAccount tokens;
- `pushback`: `VerdictPushBack`, goodput's drains as STORE_ONLY events for NVSentinel.

The rules themselves are pure, in `goodput.detect.nvsentinel`. This package re-exports what the
workers use, so they need not know which module holds it.
"""

from __future__ import annotations

from activities.adapters.nvsentinel.incoming import Incoming, JsonIncoming, ProtoIncoming
from activities.adapters.nvsentinel.intake import NvSentinelIntake, Outcome, Received
from activities.adapters.nvsentinel.messages import (
    LEGACY_METHOD,
    METHOD,
    PLATFORM_CONNECTOR,
    event_from_proto,
    event_to_proto,
)
from activities.adapters.nvsentinel.pushback import VerdictPushBack
from activities.adapters.nvsentinel.tokenreview import TokenReviewer

__all__ = [
    "LEGACY_METHOD",
    "METHOD",
    "PLATFORM_CONNECTOR",
    "Incoming",
    "JsonIncoming",
    "NvSentinelIntake",
    "Outcome",
    "ProtoIncoming",
    "Received",
    "TokenReviewer",
    "VerdictPushBack",
    "event_from_proto",
    "event_to_proto",
]
