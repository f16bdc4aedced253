"""Hostile `file` claims of pushed records: the path check, and the verdict on whether one may act.

A record's file path is chosen by whoever names the file (any local user, on a shared log
directory). `check_pushed_path` may only refuse it with `PushedPathError`; what it accepts is
bounded, UTF-8 and printable. `unverified_reason` never raises, and lets an anomaly act only when
its file is exactly one of the job's concrete output paths owned by the job's user: near misses
(a prefix, a suffix, a `%` pattern, a different owner) are always evidence only.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.diagnose.provenance import PushedPathError, check_pushed_path, output_paths, unverified_reason
from goodput.models import MAX_PUSHED_PATH, Anomaly, AnomalyKind, AnomalySource, PushedFrom
from goodput.scheduler import JobInfo, JobState
from tests.fuzz.harness import rejects_cleanly

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
OUT = "/shared/slurm/logs/slurm-42.out"
ERR = "/shared/slurm/logs/slurm-42.err"
near_misses = st.sampled_from([OUT, ERR, "/shared/slurm/logs/slurm-x-slurm-42.out", OUT + " ", " " + OUT,
                               OUT.replace("/", "//"), OUT + "\n", OUT + "\u202e", "\ud800" + OUT, "slurm-42.out",
                               "/shared/slurm/logs/slurm-%j.out", "", "/" * (MAX_PUSHED_PATH + 1)])
paths = st.one_of(near_misses, st.text(max_size=80), near_misses.flatmap(
    lambda p: st.text(max_size=4).map(lambda extra: p + extra)))
recorded = st.sampled_from([OUT, "", "/shared/slurm/logs/slurm-%j.out", "/w/out-%x.log", ERR])


@given(paths, recorded, recorded, st.one_of(st.none(), st.integers(0, 2**32 - 1)),
       st.one_of(st.none(), st.integers(0, 2**32 - 1)))
def test_only_the_jobs_own_output_may_act(path: str, stdout: str, stderr: str, user_id: int | None,
                                          owner: int | None) -> None:
    checked = rejects_cleanly("pushed-path", lambda: check_pushed_path(path), (PushedPathError,))
    if checked is None:
        return
    assert checked == path and len(checked) <= MAX_PUSHED_PATH and checked.isprintable()
    checked.encode("utf-8")
    anomaly = Anomaly(id="a-1", source=AnomalySource.LOG, kind=AnomalyKind.GPU_FAULT, job_id="42",
                      observed_at=NOW, detected_at=NOW, pushed=PushedFrom(file=checked))
    job = JobInfo(job_id="42", state=JobState.RUNNING, stdout_path=stdout, stderr_path=stderr, user_id=user_id)
    owners = {checked: owner} if owner is not None else {}
    why = unverified_reason(anomaly, job, owners)
    may_act = checked in output_paths(job) and "%" not in checked and (owner is None or owner == user_id)
    assert (why == "") == may_act, (why, checked, stdout, stderr)
    assert why == "" or why.isprintable()
