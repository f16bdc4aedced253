"""The fake keeps the rules every backend keeps: idempotence, ownership, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from goodput.demo.scheduler import DEMO_UID, DEMO_USER, FAKE_RESUBMIT_KEY, FakeScheduler
from goodput.identifiers import InvalidIdentifierError
from goodput.ownership import drain_reason, owning_incident
from goodput.scheduler import JobState, NotOwnedError, ResubmitRequest, UnknownJobError
from goodput.slurm.submit_as import OwnerError


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
    assert "goodput:resubmit-of=1001:" in job.comment
    # the copy is its owner's, as on Slurm; the journal says whom it was submitted as
    assert (job.user, job.user_id) == (DEMO_USER, DEMO_UID)
    assert "as=goodput-demo" in fake.journal("resubmit")[0].detail


async def test_resubmit_ignores_another_users_job_claiming_to_be_the_copy() -> None:
    fake = FakeScheduler()
    fake.set_job_state("1001", JobState.FAILED)
    token = FAKE_RESUBMIT_KEY.token("1001", "inc-1")
    claim = (await fake.get_job("1002")).model_copy(update={
        "job_id": "6666", "comment": f"goodput:opt-in goodput:resubmit-of=1001:{token}", "user": "mallory",
        "user_id": 1002, "state": JobState.PENDING})
    fake.add_job(claim)
    result = await fake.resubmit_job("1001", ResubmitRequest(incident_id="inc-1"))
    assert result.changed and result.new_job_id not in (None, "6666")
    again = await fake.resubmit_job("1001", ResubmitRequest(incident_id="inc-1"))
    assert not again.changed and again.new_job_id == result.new_job_id


async def test_resubmit_refuses_a_job_of_unknown_owner() -> None:
    fake = FakeScheduler()
    fake.set_job_state("1001", JobState.FAILED, user="", user_id=None)
    with pytest.raises(OwnerError, match="unknown"):
        await fake.resubmit_job("1001", ResubmitRequest())
    assert fake.journal("resubmit") == []


async def test_file_backed_state_is_shared_between_instances(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    one, two = FakeScheduler(state_path=path), FakeScheduler(state_path=path)
    await one.requeue_job("1001")
    assert (await two.get_job("1001")).restart_count == 1
    assert [e.op for e in two.journal()] == ["requeue"]
