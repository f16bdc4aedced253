"""A fake cluster whose controller is down for the first few job reads: the scheduler outage an
incident can meet as it opens (#29). Shared by the workflow test of a local step's retries and the
history recorder (`scripts/record_history.py --retry`)."""

from __future__ import annotations

from goodput.demo.scheduler import FakeScheduler
from goodput.scheduler import JobInfo, SchedulerError, TransientSchedulerError

DOWN = "slurmctld unreachable: connection refused (the fake's outage)"


class ControllerDownAtFirst(FakeScheduler):
    """`get_job` fails its first `failures` calls with `error` (a controller that is down, unless
    told otherwise)."""

    def __init__(self, failures: int, error: SchedulerError | None = None) -> None:
        super().__init__()
        self.failures_left = failures
        self.error = error or TransientSchedulerError(DOWN)

    async def get_job(self, job_id: str) -> JobInfo:
        if self.failures_left > 0:
            self.failures_left -= 1
            raise self.error
        return await super().get_job(job_id)
