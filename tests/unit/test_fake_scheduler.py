"""The fake keeps the rules every backend keeps: idempotence, ownership, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from goodput.fakes.scheduler import FakeScheduler
from goodput.identifiers import InvalidIdentifierError
from goodput.ownership import drain_reason, owning_incident
from goodput.scheduler import JobState, NotOwnedError, ResubmitRequest, UnknownJobError


async def test_drain_is_idempotent_and_owned() -> None:
    fake = FakeScheduler()
    reason = drain_reason("inc-1", "xid 79")
    first = await fake.drain_node("node2", reason)
    again = await fake.drain_node("node2", reason)
    assert first.changed and not again.changed
    assert len(fake.journal("drain")) == 1
    assert owning_incident((await fake.get_node("node2")).reason) == "inc-1"


async def test_never_resumes_or_overwrites_someone_elses_drain() -> None:
    fake = FakeScheduler()
    await fake.drain_node("node5", "admin: bad PSU")
    result = await fake.drain_node("node5", drain_reason("inc-2", "xid"))
    assert not result.changed and "admin: bad PSU" in result.detail
    assert (await fake.get_node("node5")).reason == "admin: bad PSU"
    with pytest.raises(NotOwnedError):
        await fake.resume_node("node5", drain_reason("inc-2", "xid"))


async def test_resume_restores_only_our_own_drain() -> None:
    fake = FakeScheduler()
    reason = drain_reason("inc-3", "xid")
    await fake.drain_node("node7", reason)
    assert (await fake.resume_node("node7", reason)).changed
    assert not (await fake.get_node("node7")).drained


async def test_unknown_and_hostile_ids() -> None:
    fake = FakeScheduler()
    with pytest.raises(UnknownJobError):
        await fake.get_job("999999")
    with pytest.raises(InvalidIdentifierError):
        await fake.drain_node("node1;rm -rf /", "goodput:x: y")
    with pytest.raises(InvalidIdentifierError):
        await fake.requeue_job("1 2")


async def test_resubmit_places_job_away_from_excluded_nodes() -> None:
    fake = FakeScheduler()
    fake.set_job_state("1001", JobState.FAILED)
    result = await fake.resubmit_job("1001", ResubmitRequest(exclude=("node7",)))
    assert result.new_job_id
    job = await fake.get_job(result.new_job_id)
    assert job.state is JobState.RUNNING and "node7" not in job.nodes
    assert "goodput:resubmit-of=1001" in job.comment


async def test_file_backed_state_is_shared_between_instances(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    one, two = FakeScheduler(state_path=path), FakeScheduler(state_path=path)
    await one.requeue_job("1001")
    assert (await two.get_job("1001")).restart_count == 1
    assert [e.op for e in two.journal()] == ["requeue"]
