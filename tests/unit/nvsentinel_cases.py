"""What the NVSentinel unit tests share (test_nvsentinel_events, _intake, _credentials): the
health events NVSentinel sends, as protobuf JSON, and an intake on the demo cluster with a counting
scheduler and a settable clock, so the files split by concept build their inputs one way."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from activities.adapters.nvsentinel import NvSentinelIntake
from goodput.demo.scheduler import FakeScheduler
from goodput.detect.nvsentinel import NvSentinelSettings
from goodput.scheduler import JobInfo, TransientSchedulerError
from tests.fakes.sink import RecordingSink

NOW = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)
UUID = "GPU-8d0c5a7e-1f2b-4c3d-9e8f-0123456789ab"


def xid_event(**update: Any) -> dict[str, Any]:
    """What NVSentinel's syslog monitor reports for Xid 79, as protobuf JSON."""
    event: dict[str, Any] = {
        "version": 1, "agent": "syslog-health-monitor", "componentClass": "GPU", "checkName": "SysLogsXIDError",
        "isFatal": True, "isHealthy": False, "message": "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "recommendedAction": "RESTART_BM", "errorCode": ["79"],
        "entitiesImpacted": [{"entityType": "PCI", "entityValue": "0000:3b:00.0"},
                             {"entityType": "GPU_UUID", "entityValue": UUID}],
        "metadata": {"chassis_serial": "1234"}, "generatedTimestamp": "2026-11-29T09:29:58Z",
        "nodeName": "node1", "processingStrategy": "EXECUTE_REMEDIATION",
    }
    event.update(update)
    return {k: v for k, v in event.items() if v is not None}


def none_event(**update: Any) -> dict[str, Any]:
    """The ~99%: a passing check, nothing recommended (proto3 JSON omits the defaults)."""
    return {"agent": "gpu-health-monitor", "componentClass": "GPU", "checkName": "GpuMemWatch",
            "isHealthy": True, "nodeName": "node1", **update}


class CountingScheduler(FakeScheduler):
    """The demo cluster (node1..node8; jobs 1001 on node1+2, 1002 on node3+4, 1003 on node5+6), counting reads."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.failing = False

    async def get_node(self, name: str) -> Any:
        self.calls.append(f"get_node {name}")
        if self.failing:
            raise TransientSchedulerError("slurmctld is restarting")
        return await super().get_node(name)

    async def list_jobs(self) -> Sequence[JobInfo]:
        self.calls.append("list_jobs")
        return await super().list_jobs()


class Clock:
    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def intake(scheduler: FakeScheduler | None = None, sink: RecordingSink | None = None, clock: Clock | None = None,
           **settings: Any) -> NvSentinelIntake:
    return NvSentinelIntake(NvSentinelSettings(**settings), scheduler or CountingScheduler(), sink or RecordingSink(),
                            "lab", clock=clock or Clock())
