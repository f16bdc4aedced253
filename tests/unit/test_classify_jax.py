"""JAX's multi-host runtime (XLA's coordination service, its agents, jax.distributed): each message
in the wordings openxla/xla and google/tsl printed from 2022 on, what it settles and what it leaves
to another line."""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.models import Category, CulpritKind
from tests.unit.signature_cases import check_line_case

TASK = "/job:jax_worker/replica:0/task:{n}"

JAX_LINES: list[tuple[str, str, dict[str, str]]] = [
    # Heartbeat timeouts: the status set on the task (2023 on; 2025 adds the scheduler events) ...
    ("E0501 10:00:00.000000 1 coordination_service.cc:1001] /job:jax_worker/replica:0/task:37 has been set to "
     "ERROR in coordination service: UNAVAILABLE: Task /job:jax_worker/replica:0/task:37 heartbeat timeout. This "
     "indicates that the remote task has failed, got preempted, or crashed unexpectedly. Check the task logs for "
     "an earlier error to debug further.", "jax-task-heartbeat-timeout", {"rank": "37"}),
    ("UNAVAILABLE: Task /job:jax_worker/replica:0/task:3 heartbeat timeout. This indicates that the remote task has "
     "failed, got preempted, or crashed unexpectedly.", "jax-task-heartbeat-timeout", {"rank": "3"}),
    # ... what the others are sent, flattened onto one line, and the older service's own words.
    (r"absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n"
     r"/job:jax_worker/replica:0/task:5\nThe tasks have crashed.", "jax-tasks-unhealthy", {"rank": "5"}),
    ("E0501 coordination_service.cc:512] Stopping coordination service as the following tasks are unhealthy "
     "(stopped sending heartbeats):", "jax-tasks-unhealthy", {}),
    ("Stopping coordination service as heartbeat has timed out for /job:jax_worker/replica:0/task:2 and there is "
     "no service-to-client connection", "jax-tasks-unhealthy", {"task": "2"}),
    # A process that came back while the job ran.
    ("ABORTED: /job:jax_worker/replica:0/task:4 unexpectedly tried to connect with a different incarnation. It has "
     "likely restarted.", "jax-task-restarted", {"rank": "4"}),
    ("ABORTED: /job:jax_worker/replica:0/task:4 Heartbeat: Incarnation ID mismatch: expecting 11 but got 12. The "
     "task has restarted and likely crashed earlier", "jax-task-restarted", {"rank": "4"}),
    ("ABORTED: Duplicate task registration with task_name=/job:jax_worker/replica:0/task:6", "jax-task-restarted",
     {"task": "6"}),
    # Process 0 (the service) or the network gone, in three eras.
    ("UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted "
     "unexpectedly or this task is experiencing network issues. Check earlier logs", "jax-coordinator-unreachable",
     {}),
    ("Failed to send RPC to coordination service. Either the leader task died/restarted unexpectedly or this task "
     "is experiencing network issues.", "jax-coordinator-unreachable", {}),
    ("ABORTED: Leader incarnation ID mismatch: the coordination  leader (usually slice 0 task 0) has restarted.",
     "jax-coordinator-unreachable", {}),
    ("F0301 client.h:80] Terminating process because of missing heartbeat response from the coordinator. This most "
     "likely indicates that the coordinator task died", "jax-coordinator-unreachable", {}),
    # The default callback ending the process, now and before 2024.
    ("F1203 10:00:00.000000 1 client.h:77] Terminating process because the JAX distributed service detected fatal "
     "errors. This most likely indicates that another task died; see the other task logs for more details.",
     "jax-terminating-process", {}),
    ("F0301 client.h:77] Terminating process because the coordinator detected missing heartbeats. This most likely "
     "indicates that another task died", "jax-terminating-process", {}),
    ("E1203 coordination_service_agent.cc:332] Polled an error from coordination service (this can be an error "
     "from this or another task).", "jax-terminating-process", {}),
    # Barriers: 2025's counted form, 2023-24's and 2022's; registration and shutdown.
    (r"XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Id: ckpt_sync::0. This usually happens because a task "
     r"triggered the barrier too early or too slowly.\n# of tasks that reached the barrier: 7/8.\nThe first task at "
     r"the barrier: /job:jax_worker/replica:0/task:0. Some timed out task names:\n/job:jax_worker/replica:0/task:6",
     "jax-barrier-timeout", {"rank": "6"}),
    ("DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: orbax_save. Timed out task names:", "jax-barrier-timeout", {}),
    ("DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: orbax_save", "jax-barrier-timeout", {}),
    ("DEADLINE_EXCEEDED: Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0. This usually happens",
     "jax-registration-timeout", {}),
    ("E0501 client.cc:100] Failed to connect to distributed JAX controller: waited too long for some tasks to show "
     "up. This may be due to 1) some tasks crashed earlier before connecting", "jax-registration-timeout", {}),
    ("E0501 coordination_service.cc:640] Stopping coordination service as cluster registration failed. This may "
     "be due to 1) some tasks crashed earlier before connecting", "jax-registration-timeout", {}),
    ("DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: PjRT_Client_Connect", "jax-registration-timeout", {}),
    ("E0501 coordination_service.cc:900] Shutdown barrier in coordination service has failed:",
     "jax-shutdown-barrier-failed", {}),
    ("INTERNAL: Shutdown barrier has failed.", "jax-shutdown-barrier-failed", {}),
    # SIGTERM, announced as a preemption; another task's notice.
    ("W0501 10:00:00.000000 1 preemption_notifier.cc:89] SIGTERM caught at 2024-05-01T10:00:00.000000000+00:00",
     "jax-sigterm-caught", {}),
    ("I0501 preemption_sync_manager.cc:160] Notified coordination service that this task will be preempted at "
     "2024-05-01T10:00:00+00:00. Status: OK", "jax-sigterm-caught", {}),
    ("I0501 preemption_sync_manager.cc:200] Received preemption notice with death_time 2024-05-01T10:00:00+00:00",
     "jax-preemption-notice", {}),
    # jax.distributed's own checks.
    ("RuntimeError: distributed.initialize should only be called once.", "jax-initialize-misuse", {}),
    ("RuntimeError: jax.distributed.initialize() must be called before any JAX calls that might initialise the XLA "
     "backend.", "jax-initialize-misuse", {}),
    # A task's name on a line of its own, as XLA lists the unhealthy ones.
    ("/job:jax_worker/replica:0/task:12", "jax-task-name-line", {"code": "12"}),
]


@pytest.mark.parametrize(("line", "sig_id", "groups"), JAX_LINES, ids=[f"{c[1]}-{i}" for i, c in enumerate(JAX_LINES)])
def test_jax_lines(line: str, sig_id: str, groups: dict[str, str]) -> None:
    check_line_case(line, sig_id, groups)


TERMINATING = ("F1203 client.h:77] Terminating process because the JAX distributed service detected fatal errors. "
               "This most likely indicates that another task died; see the other task logs for more details. "
               "absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):")


def test_every_process_dying_after_one_stopped_names_that_one_and_restarts() -> None:
    # What every surviving process prints: the names follow the status on lines of their own.
    lines = []
    for n in (0, 1, 2):
        lines += [f"[{n}] " + TERMINATING, f"[{n}] " + TASK.format(n=3), f"[{n}] The tasks have crashed."]
    v = classify_lines(lines)
    assert (v.restart, v.drain) == (True, False)
    assert v.category is not Category.HANG  # the heartbeat thread beats on through a stuck collective
    assert (v.culprit_kind, v.rank) == (CulpritKind.RANK, 3)  # the task listed under the message


@pytest.mark.parametrize(("listing", "rank"), [
    ([TASK.format(n=6)], 6),
    ([TASK.format(n=6), TASK.format(n=7)], None),  # several crashed: no single one is the culprit
    (["The tasks have crashed.", TASK.format(n=6)], None),  # not the listing: a name further down
    ([], None),
], ids=["one", "several", "not-under-it", "none"])
def test_the_task_named_under_the_message_is_the_rank(listing: list[str], rank: int | None) -> None:
    v = classify_lines(["I1203 train.py:40] step 1200", TERMINATING, *listing])
    assert v.rank == rank and (v.restart, v.drain) == (True, False)


def test_a_task_name_alone_decides_nothing() -> None:
    v = classify_lines(["I1203 train.py:40] step 1200", TASK.format(n=6)])
    assert v.category is Category.UNKNOWN and v.rank is None and not v.restart


def test_the_named_processs_own_error_decides_over_the_heartbeat_timeout() -> None:
    v = classify_lines([
        "[3] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "UNAVAILABLE: Task /job:jax_worker/replica:0/task:3 heartbeat timeout. This indicates that the remote task "
        "has failed, got preempted, or crashed unexpectedly."])
    assert v.category is Category.OOM


def test_a_heartbeat_timeout_alone_names_the_process_and_restarts() -> None:
    v = classify_lines(["UNAVAILABLE: Task /job:jax_worker/replica:0/task:3 heartbeat timeout. This indicates that "
                        "the remote task has failed, got preempted, or crashed unexpectedly."])
    assert (v.culprit_kind, v.rank, v.restart, v.drain) == (CulpritKind.RANK, 3, True, False)


def test_a_registration_timeout_is_not_a_barrier_inside_the_run() -> None:
    v = classify_lines(["XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Id: "
                        "[Init]Wait_for_all_tasks_to_register::0. This usually happens because a task triggered the "
                        "barrier too early or too slowly."])
    assert v.signatures == ("jax-registration-timeout",)
    assert (v.category, v.restart, v.drain) == (Category.NODE_FAILURE, True, False)


def test_a_barrier_that_timed_out_in_the_run_is_a_hang_of_the_named_process() -> None:
    v = classify_lines([JAX_LINES[15][0]])
    assert (v.category, v.culprit_kind, v.rank, v.restart) == (Category.HANG, CulpritKind.RANK, 6, True)


def test_sigterm_announced_as_a_preemption_is_not_taken_for_one() -> None:
    # srun ends the other tasks with SIGTERM after one failed: the failure decides, not the signal.
    v = classify_lines(["W0501 preemption_notifier.cc:89] SIGTERM caught at 2024-05-01T10:00:00.000000000+00:00",
                        "srun: error: gpu-07: task 3: Segmentation fault (core dumped)"])
    assert v.category is not Category.SCHEDULER_POLICY and v.restart


def test_calling_initialize_twice_is_the_programs_bug() -> None:
    v = classify_lines(["RuntimeError: distributed.initialize should only be called once."])
    assert (v.category, v.restart, v.drain) == (Category.APP_ERROR, False, False)
