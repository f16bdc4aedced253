"""An AnomalySink that records what detectors submit, and can be made to fail like an unreachable
Temporal: the stand-in for IncidentSink in the tests of the push server, the node agent and the
NVSentinel receivers."""

from __future__ import annotations

from goodput.models import Anomaly


class RecordingSink:
    def __init__(self) -> None:
        self.anomalies: list[Anomaly] = []
        self.failing = False
        self.attempts = 0

    async def submit(self, anomaly: Anomaly) -> None:
        self.attempts += 1
        if self.failing:
            raise RuntimeError("temporal is unreachable")
        self.anomalies.append(anomaly)

    def rules(self) -> list[str]:
        """The rule part of each anomaly id (`gpu:<rule>:<digest>`), in submission order."""
        return [a.id.split(":")[1] for a in self.anomalies]
