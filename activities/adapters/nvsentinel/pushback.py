"""Push-back: goodput's own verdicts (the nodes it drained, and why), sent to NVSentinel.

`VerdictPushBack` is the other direction from the intake: goodput's verdicts sent to NVSentinel's
platform connector as STORE_ONLY events, which NVSentinel stores and never acts on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from google.protobuf import empty_pb2

from activities.adapters.nvsentinel.messages import METHOD, PLATFORM_CONNECTOR, event_to_proto
from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from goodput.detect.nvsentinel import NvSentinelPushBack, read_token_file, verdict_event
from goodput.extras import require
from goodput.recover.audit import AuditAction, AuditLog, AuditRecord

log = logging.getLogger("goodput.nvsentinel")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class VerdictPushBack:
    """An `AuditLog` that also tells NVSentinel, as STORE_ONLY events, which nodes goodput drained and why.

    It wraps the real log (which keeps every record) and, after each append, sends one event per node
    of each drain record to NVSentinel's platform connector (`unix:///var/run/nvsentinel.sock` or
    `host:port`) over gRPC: NVSentinel stores and shows them beside its own events and, by its rules
    for STORE_ONLY, never cordons, drains or remediates for them. The audit activity calls `append`
    in a worker thread, so the blocking call (bounded by `timeout_s`) holds up no event loop. A
    failure is logged and never fails the audit: the push-back is information, not an action. A
    retried activity may send the same verdict twice; NVSentinel's dedup key makes it one.
    """

    def __init__(self, inner: AuditLog, settings: NvSentinelPushBack, *, node_names: Mapping[str, str] | None = None,
                 clock: Callable[[], datetime] = _utcnow) -> None:
        self._inner = inner
        self._settings = settings
        self._token = read_token_file(settings.token_file) if settings.token_file is not None else None
        # goodput drains Slurm names; NVSentinel knows the Kubernetes ones
        self._k8s_names = {slurm: k8s for k8s, slurm in (node_names or {}).items()}
        self._clock = clock
        self._grpc = require("nvsentinel")  # imported when push-back is on, so a lean install never needs it
        self._channel = self._grpc.insecure_channel(settings.target)
        self._call = self._channel.unary_unary(f"/{PLATFORM_CONNECTOR}/{METHOD}",
                                               request_serializer=pb.HealthEvents.SerializeToString,
                                               response_deserializer=empty_pb2.Empty.FromString)
        self.sent = 0
        self.failures = 0

    def append(self, records: Sequence[AuditRecord]) -> None:
        self._inner.append(records)
        events = [verdict_event(node=self._k8s_names.get(node, node), incident_id=record.incident_id,
                                explanation=f"{record.reason} ({record.result})" if record.result else record.reason,
                                agent=self._settings.agent, now=self._clock())
                  for record in records if record.action is AuditAction.DRAIN for node in record.nodes]
        if not events:
            return
        metadata = (("authorization", f"Bearer {self._token}"),) if self._token else None
        try:
            self._call(pb.HealthEvents(version=1, events=[event_to_proto(e) for e in events]),
                       timeout=self._settings.timeout_s, metadata=metadata)
        except Exception as err:  # any failure to reach NVSentinel: logged, never the audit's failure
            self.failures += 1
            log.warning("could not send %d verdicts to NVSentinel at %s: %s", len(events), self._settings.target,
                        err.code() if isinstance(err, self._grpc.RpcError) else err)
            return
        self.sent += len(events)

    def read(self) -> list[AuditRecord]:
        return self._inner.read()

    def close(self) -> None:
        self._channel.close()
