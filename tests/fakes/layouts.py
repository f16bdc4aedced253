"""A LayoutSource (goodput.diagnose.layout) in memory, for the `attribute` activity's tests: it
counts its reads (a layout is read only when evidence needs one) and can fail like a broken disk."""

from __future__ import annotations

from goodput.diagnose.layout import JobLayout


class FakeLayouts:
    def __init__(self, *layouts: JobLayout) -> None:
        self.layouts = {(layout.cluster, layout.job_id, layout.attempt): layout for layout in layouts}
        self.reads: list[tuple[str, str, int]] = []
        self.failing = False

    def job_layout(self, cluster: str, job_id: str, attempt: int) -> JobLayout | None:
        self.reads.append((cluster, job_id, attempt))
        if self.failing:
            raise OSError("the layout store's disk is gone")
        return self.layouts.get((cluster, job_id, attempt))
