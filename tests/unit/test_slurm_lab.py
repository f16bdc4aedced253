"""The lab benchmarks' one reader of slurmctld's log (benchmarks/_slurm_lab.py), checked on real lines,
and what `storm-lab` folds out of it per job."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from benchmarks._slurm_lab import LabSite, slurmctld_events
from benchmarks._storm_lab_rig import job_events as storm_events

pytestmark = pytest.mark.timeout(30)

# Lines as the lab's slurmctld wrote them, with the ones neither benchmark counts.
LOG = """\
[2026-12-02T00:31:50.001] _slurm_rpc_submit_batch_job: JobId=7 InitPrio=4294901759 usec=516
[2026-12-02T00:31:51.002] sched: Allocate JobId=7 NodeList=node1 #CPUs=1 Partition=debug
[2026-12-02T00:31:53.734] Requeuing JobId=7
[2026-12-02T00:31:53.900] _slurm_rpc_requeue: Requeue of JobId=8 returned an error: Requested operation is presently
[2026-12-02T00:32:05.120] sched/backfill: _start_job: Started JobId=7 in debug on node2
[2026-12-02T00:32:06.000] sched: Allocate JobId=9 NodeList=node3 #CPUs=1 Partition=debug
[2026-12-02T00:32:07.5] Requeuing JobId=8
[2026-12-02T00:32:0"""


def at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def test_storm_lab_reads_each_jobs_requeues_and_starts_since_its_storm(tmp_path: Path) -> None:
    log = tmp_path / "slurmctld.log"
    log.write_text(LOG)
    events = storm_events(log, {"7", "8"}, since=at("2026-12-02T00:31:51.500"))
    assert events.requeued == {"7": [at("2026-12-02T00:31:53.734")], "8": [at("2026-12-02T00:32:07.500")]}
    assert events.started == {"7": [at("2026-12-02T00:32:05.120")]}  # job 7's first start came before


def test_one_reader_gives_both_benchmarks_their_events_in_the_logs_order() -> None:
    events = slurmctld_events(LOG)
    assert [(e.kind, e.subject) for e in events] == [
        ("submit", "7"), ("start", "7"), ("requeue", "7"), ("start", "7"), ("start", "9"), ("requeue", "8")]
    assert events[1].at == datetime.fromisoformat("2026-12-02T00:31:51.002").astimezone()


def test_a_benchmarks_lab_moves_only_when_bench_slurmlab_says_so() -> None:
    site = LabSite(Path("/tmp/goodput-storm-lab"), ctl_port=27817, slurmd_baseport=27900, rest_port=27820)
    assert site.moved_by({"SLURMLAB_CTL_PORT": "16817", "SLURMLAB_DIR": "/tmp/tests-lab"}) == site
    moved = site.moved_by({"BENCH_SLURMLAB_DIR": "/tmp/lab-x", "BENCH_SLURMLAB_CTL_PORT": "37817",
                           "BENCH_SLURMLAB_SLURMD_BASEPORT": "37900", "BENCH_SLURMLAB_REST_PORT": "37880"})
    assert moved.env() == {"SLURMLAB_DIR": "/tmp/lab-x", "SLURMLAB_CTL_PORT": "37817",
                           "SLURMLAB_SLURMD_BASEPORT": "37900", "SLURMLAB_REST_PORT": "37880"}
