"""Ray's own words about a worker, an actor or a node that went away, in the wordings of Ray 2.3 to
2.60, and vLLM's about a dead worker or engine: who is named, what is an echo, and that nothing
here drains a node."""

from __future__ import annotations

import pytest

from goodput.diagnose.classify import classify_lines
from goodput.models import Category, CulpritKind
from tests.unit.signature_cases import check_line_case

MARKED_DEAD = ("2022-08-11 17:52:21,412 WARNING worker.py:1799 -- The node with node id: "
               "c118acd15dee467500f3fb92b837db8e73d4e868e7e835585ace6f29 and address: 10.0.3.192 and node name: "
               "10.0.3.192 has been marked dead because the detector has missed too many heartbeats from it. This can "
               "happen when a \t(1) raylet crashes unexpectedly (OOM, etc.) ")

RAY_LINES: list[tuple[str, str, dict[str, str]]] = [
    (MARKED_DEAD, "ray-node-marked-dead", {"host": "10.0.3.192"}),
    ("The node with node id 5ad7fa5d has been marked dead because the detector has missed too many heartbeats "
     "from it.", "ray-node-marked-dead", {}),
    ("\tthe actor's node was terminated unexpectedly: health check failed due to missing too many heartbeats",
     "ray-node-marked-dead", {}),
    ("ray.exceptions.NodeDiedError: Task failed because the node it was running on is dead or unavailable. Node IP: "
     "10.0.0.7, node ID: 4f2a. This can happen if the node was preempted, had a hardware failure, or its raylet "
     "crashed unexpectedly.", "ray-node-died", {"host": "10.0.0.7"}),
    ("The node (IP: 10.0.0.8) where this task was running crashed unexpectedly.", "ray-node-died",
     {"address": "10.0.0.8"}),
    ("\tthe actor's node was terminated unexpectedly: raylet crashed", "ray-node-died", {}),
    ("\tthe actor's node was preempted: spot instance reclaimed", "ray-node-preempted", {}),
    ("Task train_fn failed due to node preemption. The task will be retried, but the retry will not count against "
     "the normal retry count.", "ray-node-preempted", {}),
    ("ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task. Check "
     "python-core-worker-*.log files for more information.", "ray-worker-crashed", {}),
    ("(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot "
     "the problem, check the logs for the dead worker. Lease ID: 01 Worker ID: 02 Node ID: 03 Worker IP address: "
     "10.0.0.9 Worker port: 10002 Worker PID: 4242 Worker exit type: SYSTEM_ERROR Worker exit detail: Worker "
     "unexpectedly exits with a connection error code 2. End of file.", "ray-worker-crashed", {}),
    ("The leased worker has unrecoverable failure. Worker is requested to be destroyed when it is returned. ",
     "ray-worker-crashed", {}),
    ("[Timeout] Exiting because this node manager has mistakenly been marked as dead by the GCS: GCS failed to "
     "check the health of this node for 5 times.", "ray-raylet-lost", {}),
    ("ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more information.",
     "ray-raylet-lost", {}),
    ("A worker health check has been hanging for 600.0 seconds. Marking the worker as dead.",
     "ray-train-health-check-hang", {}),
    # The memory rules, in 2.60's wording too.
    ("ray.exceptions.OutOfMemoryError: 1 worker(s) were killed due to the node running low on memory. Memory on "
     "the node (IP: 10.0.0.5, ID: ab) was 30.1GB used / 31.0GB limit (0.97)", "ray-memory-monitor", {}),
    ("Worker unexpectedly exits with a connection error code 2. End of file. Some common causes include: (1) the "
     "process was killed by the OOM killer due to high memory usage, (2) ray stop --force was called",
     "ray-worker-exit-oom-killer", {}),
]


@pytest.mark.parametrize(("line", "sig_id", "groups"), RAY_LINES, ids=[f"{c[1]}-{i}" for i, c in enumerate(RAY_LINES)])
def test_ray_lines(line: str, sig_id: str, groups: dict[str, str]) -> None:
    check_line_case(line, sig_id, groups)


def test_a_node_ray_declared_dead_is_named_and_left_undrained() -> None:
    # Ray's own text leaves a busy raylet or a slow network open.
    v = classify_lines([MARKED_DEAD])
    assert (v.category, v.culprit_kind, v.host, v.restart, v.drain) == (
        Category.NODE_FAILURE, CulpritKind.NODE, "10.0.3.192", True, False)


def test_a_worker_crash_with_the_oom_killers_detail_is_host_memory() -> None:
    v = classify_lines([RAY_LINES[9][0], RAY_LINES[15][0]])
    assert v.category is Category.OOM


def test_a_worker_crash_alone_restarts_and_blames_nobody() -> None:
    v = classify_lines([RAY_LINES[8][0]])
    assert (v.category, v.culprit_kind, v.restart, v.drain) == (Category.UNKNOWN, CulpritKind.UNKNOWN, True, False)


def test_an_actor_whose_node_was_preempted_is_the_platforms_decision() -> None:
    v = classify_lines(["(TrainController pid=1) The actor died because its node has died. Node Id: b157",
                        "(TrainController pid=1) \tthe actor's node was preempted: simulating node drain"])
    assert (v.category, v.restart, v.drain) == (Category.SCHEDULER_POLICY, False, False)


def test_the_application_error_that_killed_the_worker_outranks_the_crash_report() -> None:
    v = classify_lines([RAY_LINES[8][0], "ValueError: shapes (3,4) and (5,6) not aligned"])
    assert v.category is Category.APP_ERROR


def test_ray_and_xla_texts_that_leave_the_cause_open_never_decide_a_high_verdict() -> None:
    from tests.unit.test_classify_jax import JAX_LINES

    for line in (MARKED_DEAD, RAY_LINES[3][0], JAX_LINES[15][0], JAX_LINES[18][0]):
        assert classify_lines([line]).confidence != "high", line


VLLM_LINES: list[tuple[str, str, dict[str, str]]] = [
    ("(VllmWorker rank=0 pid=4242) ERROR 05-30 22:22:26 [multiproc_executor.py:140] Worker proc VllmWorker-3 died "
     "unexpectedly, shutting down executor.", "vllm-worker-died", {"rank": "3"}),
    ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
     "cause.", "vllm-engine-dead", {}),
    ("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_0': 1}",
     "vllm-engine-dead", {}),
    ("vllm.engine.async_llm_engine.AsyncEngineDeadError: Task finished unexpectedly. This should never happen!",
     "vllm-engine-dead", {}),
    ("(EngineCore pid=...) INFO [shm_broadcast.py:705] No available shared memory broadcast block found in 60 "
     "seconds.", "vllm-shm-broadcast-wait", {}),
]


@pytest.mark.parametrize(("line", "sig_id", "groups"), VLLM_LINES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(VLLM_LINES)])
def test_vllm_lines(line: str, sig_id: str, groups: dict[str, str]) -> None:
    check_line_case(line, sig_id, groups)


def test_a_dead_vllm_worker_is_named_and_the_error_before_it_decides() -> None:
    alone = classify_lines([VLLM_LINES[0][0], VLLM_LINES[1][0]])
    assert (alone.rank, alone.restart, alone.drain) == (3, True, False)
    oom = classify_lines(["(VllmWorker rank=3 pid=4245) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                          "2.00 GiB", VLLM_LINES[0][0], VLLM_LINES[1][0]])
    assert oom.category is Category.OOM


def test_vllms_waiting_notice_alone_decides_nothing() -> None:
    v = classify_lines([VLLM_LINES[4][0]] * 3)
    assert (v.category, v.restart, v.drain) == (Category.UNKNOWN, False, False)
