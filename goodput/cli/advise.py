"""`goodput advise ROOT`: the checkpoint interval a job should use, from its own checkpoints.

The measuring is goodput.checkpoints.advice's; this reads the job's checkpoint tree the way
`goodput checkpoints` does (the same discovery, the same validity rules) and prints the advice
with the numbers it stands on, so a job owner can check them.
"""

from __future__ import annotations

from datetime import datetime
from typing import TextIO

from goodput.checkpoints import CheckpointConfig, LocalFileSystem, find_resume_point
from goodput.checkpoints.advice import AdviceError, advise, render


def run_advise(root: str, layout: str | None, *, step_time_s: float, mtbf_hours: float, gpus: int,
               restart_s: float, as_json: bool, out: TextIO, err: TextIO, now: datetime) -> int:
    if not root.startswith("/"):
        err.write(f"goodput advise: {root} is not an absolute path\n")
        return 2
    try:
        found, _ = find_resume_point(LocalFileSystem(), CheckpointConfig(root=root, layout=layout, settle_s=0), now)
        advice = advise(found.checkpoints, step_time_s=step_time_s, mtbf_hours=mtbf_hours, gpus=gpus,
                        restart_s=restart_s)
    except (AdviceError, ValueError) as error:
        err.write(f"goodput advise: {error}\n")
        return 2
    out.write(advice.model_dump_json() + "\n" if as_json else render(advice))
    return 0

