"""Triage: what an NVSentinel event is worth (its disposition), decided from a handful of its fields.

`triage` sorts an event into *ignored* (healthy again, or nothing recommended: on a real fleet
about 99% of events, so deciding that reads a handful of fields and nothing else), *evidence*
(remembered against the node, never acted on: `STORE_ONLY` events, advice without a fatal
verdict, events NVSentinel was told not to drain for) or *fatal* (the jobs running on the node
become incidents). `triage_json` settles the common cases from the raw JSON, before any model
is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from goodput.detect.nvsentinel.wire import _NO_OVERRIDES, BehaviourOverrides, ProcessingStrategy, RecommendedAction


class Disposition(StrEnum):
    IGNORED = "ignored"    # healthy again, or nothing recommended and not fatal
    EVIDENCE = "evidence"  # remembered against the node; no incident, no scheduler action
    FATAL = "fatal"        # the jobs running on the node become incidents


@dataclass(frozen=True, slots=True)
class Triage:
    disposition: Disposition
    why: str
    blame_node: bool = True
    """False: the node is not a culprit (RESTART_APP, or NVSentinel was told not to quarantine it), so
    the incident restarts the job but drains nothing."""


_IGNORED_HEALTHY = Triage(Disposition.IGNORED, "healthy: the condition cleared")
_IGNORED_NONE = Triage(Disposition.IGNORED, "not fatal and nothing recommended")
_STORE_ONLY = Triage(Disposition.EVIDENCE, "STORE_ONLY: recorded, never acted on")
_DRAIN_SKIPPED = Triage(Disposition.EVIDENCE, "fatal, but drainOverrides.skip: NVSentinel leaves the "
                                              "workloads running, so goodput does too")
_ADVICE = Triage(Disposition.EVIDENCE, "not fatal: the recommended action is recorded, not acted on")


def triage(*, is_fatal: bool, is_healthy: bool, action: RecommendedAction,
           strategy: ProcessingStrategy = ProcessingStrategy.UNSPECIFIED,
           quarantine: BehaviourOverrides = _NO_OVERRIDES, drain: BehaviourOverrides = _NO_OVERRIDES) -> Triage:
    """What an event is worth, from six fields alone (no allocation on the common paths).

    Healthy wins over everything; STORE_ONLY is never acted on; a fatal verdict (or a forced
    quarantine) makes the node's jobs incidents unless NVSentinel itself was told not to drain the
    node's workloads; a non-fatal event with an action is advice, recorded only; NONE is ignored.
    """
    if is_healthy:
        return _IGNORED_HEALTHY
    if not (is_fatal or quarantine.force) and action is RecommendedAction.NONE:
        return _IGNORED_NONE
    if strategy is ProcessingStrategy.STORE_ONLY:
        return _STORE_ONLY
    if is_fatal or quarantine.force:
        if drain.skip:
            return _DRAIN_SKIPPED
        if action is RecommendedAction.RESTART_APP:
            return Triage(Disposition.FATAL, "fatal, RESTART_APP: the job is restarted, the node not blamed",
                          blame_node=False)
        if quarantine.skip:
            return Triage(Disposition.FATAL, "fatal, but quarantineOverrides.skip: the job is restarted, the "
                                             "node not drained", blame_node=False)
        return Triage(Disposition.FATAL, "fatal" if is_fatal else "quarantineOverrides.force")
    return _ADVICE


def _overrides_json(value: object) -> BehaviourOverrides:
    if isinstance(value, Mapping):
        force, skip = value.get("force"), value.get("skip")
        if force is True or skip is True:
            return BehaviourOverrides(force=force is True, skip=skip is True)
    return _NO_OVERRIDES


def triage_json(data: Mapping[str, Any]) -> Triage | None:
    """The triage of a protobuf-JSON event read without building the model, when that is safe:
    None means "parse it fully" (it may be worth something, or be malformed)."""
    if data.get("isHealthy") is True:
        return _IGNORED_HEALTHY
    fatal = data.get("isFatal", False)
    action = data.get("recommendedAction")
    if fatal is False and action in (None, "NONE", 0) and data.get("processingStrategy") in (
            None, "UNSPECIFIED", "EXECUTE_REMEDIATION", "STORE_ONLY", 0, 1, 2):
        quarantine = _overrides_json(data.get("quarantineOverrides"))
        if not quarantine.force:
            return _IGNORED_NONE
    return None
