"""The latency benchmark reads its action times from slurmctld's log: check the readers on real lines."""

from __future__ import annotations

from datetime import datetime

from benchmarks._latency_records import clock_gap, first, per_class, resumed_run, runs_in
from benchmarks._slurm_lab import slurmctld_events

# Lines as the lab's slurmctld wrote them (2026-12-02), the drain reason cut short.
LOG = """\
[2026-12-02T00:23:40.736] _slurm_rpc_submit_batch_job: JobId=1 InitPrio=4294901759 usec=516
[2026-12-02T00:24:04.108] update_node: node node2 reason set to: goodput:incident-e2e109c33-1-0-5198860d: gpu-hardware
[2026-12-02T00:24:04.500] update_node: node node4 reason set to: maintenance by a person
[2026-12-02T00:24:05.207] _slurm_rpc_submit_batch_job: JobId=2 InitPrio=0 usec=1530
[2026-12-02T00:31:30.809] _slurm_rpc_requeue: Requeue of JobId=7 returned an error: Requested operation is presently
[2026-12-02T00:31:53.734] Requeuing JobId=7
[2026-12-02T01:14:59.407] sched: _update_job: setting exc_nodes to node1,node2,node3 for JobId=14
[2026-12-02T00:32:01.248] Requeuing JobId=71
[2026-12-02T00:32:0"""


def test_the_actions_slurmctld_logged_and_only_those() -> None:
    events = slurmctld_events(LOG)
    assert [(e.kind, e.subject) for e in events] == [
        ("submit", "1"), ("drain", "node2"), ("submit", "2"), ("requeue", "7"), ("exclude", "14"), ("requeue", "71")]
    drain = first(events, "drain", "node2")
    assert drain is not None and drain.at == datetime.fromisoformat("2026-12-02T00:24:04.108").astimezone()
    assert first(events, "drain", "node4") is None  # a person's reason is not goodput's action
    assert first(events, "requeue", "7") is not None and first(events, "requeue", "7", after=drain.at.replace(
        hour=1)) is None


def test_a_run_that_is_not_the_faulted_one_and_has_stepped_is_the_job_running_again() -> None:
    out = "".join(f"run 5-0 iteration {i}/ 100\n" for i in range(1, 30))
    assert resumed_run(out, ("5", 0)) is None
    out += "run 5-0 iteration 30/ 100\nrun 5-1 iteration 1/ 100\n"  # the killed node's orphan still prints
    assert resumed_run(out, ("5", 0)) is None
    out += "run 5-1 iteration 2/ 100\n"
    assert resumed_run(out, ("5", 0)) == ("5", 1)
    assert resumed_run("run 9-0 iteration 2/ 100\n", ("5", 0)) == ("9", 0)  # a resubmitted copy
    assert runs_in(out)[("5", 0)] == 30


def test_the_table_reports_nulls_not_guesses_and_counts_handled() -> None:
    samples = [{"class": "crash", "handled": True, "detection_s": 1.0, "action_s": 2.0, "resume_s": 12.0},
               {"class": "crash", "handled": False, "detection_s": 3.0, "outcome": "escalated"},
               {"class": "crash", "handled": True, "detection_s": 2.0, "action_s": 2.0, "outcome": "recovered"},
               {"class": "app-error", "handled": True, "detection_s": 0.5}]
    table = per_class(samples)
    assert table["crash"]["n"] == 3 and table["crash"]["handled"] == 2
    assert table["crash"]["detection_p50_s"] == 2.0 and table["crash"]["action_p50_s"] == 2.0
    assert table["app-error"]["action_p50_s"] is None and table["app-error"]["resume_p50_s"] is None
    assert table["hang"] == {**table["hang"], "n": 0, "detection_p50_s": None}
    assert table["crash"]["outcomes"] == {"None": 1, "escalated": 1, "recovered": 1}


def test_a_clock_gap_is_the_median_offset_with_half_the_round_trip_as_its_bound() -> None:
    gap = clock_gap([(10.0, 10.06, 10.1), (20.0, 20.0, 20.02), (30.0, 30.03, 30.04)])
    assert gap == {"median_s": 0.01, "bound_s": 0.05, "probes": 3.0}
    assert clock_gap([]) == {}


def test_a_job_the_lab_never_ran_is_out_of_the_class_and_counted_as_the_labs() -> None:
    samples = [{"class": "straggler", "handled": True, "detection_s": 25.0},
               {"class": "straggler", "lab_failed": "lab: straggler-1 (job 7) had 2 of 4 ranks printing"},
               {"class": "straggler-balanced", "lab_failed": "lab: balanced-1 (job 8) had 0 of 4 ranks printing"}]
    table = per_class(samples)
    assert (table["straggler"]["n"], table["straggler"]["handled"], table["straggler"]["lab_failed"]) == (1, 1, 1)
    assert (table["straggler-balanced"]["n"], table["straggler-balanced"]["lab_failed"]) == (0, 1)
