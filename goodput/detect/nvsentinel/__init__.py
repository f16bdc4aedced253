"""NVSentinel's health events: what each one means for the jobs running on its node.

NVSentinel (NVIDIA's GPU-fleet health monitor for Kubernetes) raises a `HealthEvent` whenever one
of its monitors sees something on a node. goodput receives those events over gRPC (NVSentinel's
platform connector interface) or as CloudEvents over HTTP; both transports end here, in one model
and one set of rules, pure and tested, one concern per module:

- `wire`: NVSentinel's enum names and numbers, bounded text, the nested messages;
- `events`: the `HealthEvent` model and its parse;
- `disposition`: `triage`, ignored, evidence or fatal, from a handful of fields;
- `dedup` and `node_evidence`: what the intake remembers between events;
- `mapping`: from a fatal event to one anomaly per opted-in job running on the node;
- `cloudevents`: the HTTP transport's CloudEvents body;
- `settings` and `credentials`: the `nvsentinel` table, tokens and OAuth client credentials;
- `verdicts`: goodput's own drains, as events for NVSentinel (push-back).

Nothing here does I/O or reads a clock; the adapter (activities.adapters.nvsentinel) asks the
scheduler and submits the anomalies. This package re-exports what the adapters, the workers and
the configuration use, so they need not know which module holds it.
"""

from __future__ import annotations

from goodput.detect.nvsentinel.cloudevents import CLOUDEVENTS_TYPE, CloudEventError, parse_cloudevent
from goodput.detect.nvsentinel.credentials import (
    access_token_valid,
    client_credentials,
    mint_access_token,
    read_token_file,
    token_accepted,
)
from goodput.detect.nvsentinel.dedup import DedupWindow, dedup_key
from goodput.detect.nvsentinel.disposition import Disposition, Triage, triage, triage_json
from goodput.detect.nvsentinel.events import HealthEvent, NvSentinelEventError, UnknownEventNodeError, parse_event
from goodput.detect.nvsentinel.mapping import (
    event_anomalies,
    impacted_gpus,
    observed_at,
    running_on,
    slurm_node_candidates,
    summary,
)
from goodput.detect.nvsentinel.node_evidence import NodeEvidence
from goodput.detect.nvsentinel.settings import NvSentinelPushBack, NvSentinelSettings, TokenReviewSettings
from goodput.detect.nvsentinel.verdicts import verdict_event
from goodput.detect.nvsentinel.wire import (
    ACTION_NUMBERS,
    BehaviourOverrides,
    ProcessingStrategy,
    RecommendedAction,
    clean_text,
)

__all__ = [
    "ACTION_NUMBERS",
    "CLOUDEVENTS_TYPE",
    "BehaviourOverrides",
    "CloudEventError",
    "DedupWindow",
    "Disposition",
    "HealthEvent",
    "NodeEvidence",
    "NvSentinelEventError",
    "NvSentinelPushBack",
    "NvSentinelSettings",
    "ProcessingStrategy",
    "RecommendedAction",
    "TokenReviewSettings",
    "Triage",
    "UnknownEventNodeError",
    "access_token_valid",
    "clean_text",
    "client_credentials",
    "dedup_key",
    "event_anomalies",
    "impacted_gpus",
    "mint_access_token",
    "observed_at",
    "parse_cloudevent",
    "parse_event",
    "read_token_file",
    "running_on",
    "slurm_node_candidates",
    "summary",
    "token_accepted",
    "triage",
    "triage_json",
    "verdict_event",
]
