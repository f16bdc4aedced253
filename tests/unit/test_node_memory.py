"""Node memory across jobs: unrelated ambiguous failures on one node blame it; a roaming job blames itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio.contrib.pydantic import pydantic_data_converter

from goodput.diagnose.node_memory import (
    MAX_STATE_BYTES,
    LocalNodeMemory,
    NodeMemoryPolicy,
    NodeMemoryState,
    Observation,
    consult,
    newest_within_bytes,
    observation_of,
    remember,
    standing,
    with_memory,
)
from goodput.models import Attribution, Category, Culprit, CulpritKind
from goodput.scheduler import JobInfo, JobState

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
POLICY = NodeMemoryPolicy()
AMBIGUOUS = Attribution(category=Category.NCCL_TIMEOUT, restart=True, drain=False, explanation="nccl-timeout")


def job(job_id: str, user: str, *nodes: str) -> JobInfo:
    return JobInfo(job_id=job_id, name=f"train-{job_id}", state=JobState.FAILED, nodes=nodes, user=user)


def seen(job_info: JobInfo, minutes: float = 0, attribution: Attribution = AMBIGUOUS) -> Observation:
    found = observation_of(f"inc-{job_info.job_id}-{minutes}", attribution, job_info, T0 + timedelta(minutes=minutes))
    assert found is not None
    return found


def test_two_unrelated_jobs_failing_on_one_node_make_it_the_suspect() -> None:
    state, first = consult(NodeMemoryState(), seen(job("1", "mallory", "n1", "n3")), T0, POLICY)
    assert first.suspects == () and first.note == ""  # one job alone proves nothing
    state, second = consult(state, seen(job("2", "alice", "n1", "n2"), 5), T0 + timedelta(minutes=5), POLICY)
    assert [s.node for s in second.suspects] == ["n1"]
    assert second.suspects[0].users == ("alice", "mallory") and "n1" in second.note
    by_node = {s.node: s for s in standing(state, T0 + timedelta(minutes=5), POLICY)}
    assert by_node["n1"].suspect and not by_node["n2"].suspect and not by_node["n3"].suspect


def test_the_third_jobs_ambiguous_failure_is_attributed_to_the_suspect() -> None:
    state = NodeMemoryState()
    for observation in (seen(job("1", "mallory", "n1", "n3")), seen(job("2", "alice", "n1", "n2"), 5)):
        state, _ = consult(state, observation, observation.at, POLICY)
    third = job("3", "bob", "n1", "n4")
    state, verdict = consult(state, seen(third, 10), T0 + timedelta(minutes=10), POLICY)
    blamed = with_memory(AMBIGUOUS, verdict, third)
    assert (blamed.drain, blamed.restart, blamed.culprit_nodes) == (True, True, ("n1",))
    assert "node memory" in blamed.explanation


def test_large_overlapping_allocations_single_out_no_node() -> None:
    first = job("1", "mallory", *(f"n{i}" for i in range(0, 64)))
    second = job("2", "alice", *(f"n{i}" for i in range(24, 88)))
    state, _ = consult(NodeMemoryState(), seen(first), T0, POLICY)
    _, verdict = consult(state, seen(second, 1), T0 + timedelta(minutes=1), POLICY)
    assert verdict.suspects == () and "not enough to single one out" in verdict.note
    assert with_memory(AMBIGUOUS, verdict, second) == AMBIGUOUS


def test_one_users_jobs_or_one_job_repeating_is_not_enough() -> None:
    state = NodeMemoryState()
    verdict = None
    for n, j in enumerate([job("1", "alice", "n1"), job("2", "alice", "n1"), job("1", "alice", "n1")]):
        state, verdict = consult(state, seen(j, n), T0 + timedelta(minutes=n), POLICY)
    assert verdict is not None and verdict.suspects == ()


def test_suspicion_decays() -> None:
    # Two half-lives later the first failure counts a quarter: 1.25, under the threshold of 1.5.
    state, _ = consult(NodeMemoryState(), seen(job("1", "mallory", "n1", "n9")), T0, POLICY)
    later = T0 + timedelta(days=2)
    state, verdict = consult(state, seen(job("2", "alice", "n1", "n8"), 2 * 24 * 60), later, POLICY)
    assert verdict.suspects == ()
    assert standing(state, later, POLICY)[0].node == "n1" and standing(state, later, POLICY)[0].score == 1.25


def test_a_job_failing_on_different_nodes_every_time_points_at_itself() -> None:
    state = NodeMemoryState()
    verdict = None
    for n, nodes in enumerate([("n1", "n2"), ("n3", "n4"), ("n5", "n6")]):
        state, verdict = consult(state, seen(job("9", "carol", *nodes), n), T0 + timedelta(minutes=n), POLICY)
    assert verdict is not None and verdict.roaming_job and "different set of nodes" in verdict.note
    blamed = with_memory(AMBIGUOUS, verdict, job("9", "carol", "n5", "n6"))
    assert blamed.drain is False and blamed.culprits[0].kind is CulpritKind.APP
    assert standing(state, T0, POLICY) == ()  # a roaming job's failures count for no node


def test_failures_that_say_nothing_about_nodes_are_not_remembered() -> None:
    for category in (Category.APP_ERROR, Category.OOM, Category.SCHEDULER_POLICY, Category.STORAGE):
        attribution = Attribution(category=category, restart=False)
        assert observation_of("i", attribution, job("1", "a", "n1"), T0) is None
    assert observation_of("i", AMBIGUOUS, job("1", "a"), T0) is None  # no allocation, nothing to blame


def test_a_named_culprit_is_remembered_alone_and_never_overridden() -> None:
    named = Attribution(category=Category.GPU_HARDWARE, drain=True,
                        culprits=(Culprit(kind=CulpritKind.NODE, id="n2", confidence=0.9),))
    observation = seen(job("1", "a", "n1", "n2"), attribution=named)
    assert (observation.nodes, observation.ambiguous) == (("n2",), False)
    state, _ = consult(NodeMemoryState(), seen(job("5", "x", "n1")), T0, POLICY)
    state, verdict = consult(state, seen(job("6", "y", "n1")), T0, POLICY)
    assert with_memory(named, verdict, job("6", "y", "n1", "n2")) == named


async def test_local_memory_keeps_one_state_per_cluster() -> None:
    memory = LocalNodeMemory()
    await memory.consult("a", seen(job("1", "mallory", "n1")), POLICY)
    verdict = await memory.consult("b", seen(job("2", "alice", "n1")), POLICY)
    assert verdict.suspects == ()  # another cluster's n1 is another node
    verdict = await memory.consult("a", seen(job("2", "alice", "n1")), POLICY)
    assert [s.node for s in verdict.suspects] == ["n1"]


def test_the_memory_stays_within_what_temporal_carries_into_its_next_run() -> None:
    # 5,000 ambiguous failures of 64-node jobs would be 4.7 MB of state; Temporal refuses a
    # continue-as-new input past 2 MB. The oldest go; the newest and every recent one stay.
    def failed(index: int) -> Observation:
        nodes = tuple(f"gpu-{(index * 64 + k) % 10_000:05d}" for k in range(64))
        return seen(job(str(100_000 + index), f"user{index % 300}", *nodes), index / 60)

    state = NodeMemoryState(observations=tuple(failed(index) for index in range(4_999)))
    state = remember(state, failed(4_999), T0, POLICY)
    encoded = len(pydantic_data_converter.payload_converter.to_payloads([state])[0].data)
    assert MAX_STATE_BYTES * 0.9 < encoded <= MAX_STATE_BYTES
    assert state.observations[-1].job_id == "104999" and len(state.observations) < 5_000
    ages = [o.at for o in state.observations]
    assert ages == sorted(ages)  # what went is the oldest


def test_one_observation_past_the_budget_is_still_kept_alone() -> None:
    huge = seen(job("7", "ann", *(f"node{i:06d}" for i in range(100_000))))
    state = remember(NodeMemoryState(observations=(seen(job("6", "bob", "a")),)), huge, T0, POLICY)
    assert [o.job_id for o in state.observations] == ["7"]
    assert newest_within_bytes([]) == ()
