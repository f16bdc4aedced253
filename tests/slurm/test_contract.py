"""The rules every Scheduler backend keeps, asserted identically for each backend.

Parametrised over the in-memory FakeScheduler (what workflows are tested against), the CLI
backend on the live lab, the same backend over SSH to a private sshd, slurmrestd (with the
CLI as fallback for what its API lacks), and the pyslurm backend on goodput's pyslurm stand-in
(no lab needed; not the real library). The CLI backend also runs on newer Slurm
(`slurm-cli-24.11`, `slurm-cli-26.05`: a lab inside a Debian root, the backend through a
ChrootRunner; over SSH as `slurm-ssh-24.11`, `slurm-ssh-26.05`: this host's sshd running the
root's clients through chroot), and so does slurmrestd, with no fallback at all (`slurm-rest-24.11`,
`slurm-rest-26.05`: what its API version offers goes over REST, what it lacks is not applicable
and skips naming why), when this run selects that version (GOODPUT_SLURM_VERSIONS, as `make
test-slurm-matrix` does); otherwise those cells skip, saying how. docs/slurm.md's compatibility
table is generated from these outcomes (scripts/compat-table.py). If they disagree, a
workflow green against the fake would misbehave on Slurm. Where the fake does not (yet) keep a
rule, the test is an xfail(strict) naming the gap.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio

from goodput.identifiers import InvalidIdentifierError
from goodput.ownership import drain_reason
from goodput.scheduler import (
    ACTIVE_JOB_STATES,
    JobInfo,
    JobState,
    JobStatus,
    NodeInfo,
    NotOwnedError,
    ResubmitRequest,
    UnknownJobError,
    UnknownNodeError,
    UnknownReservationError,
)
from goodput.slurm.resubmit import resubmit_tag

from .harness import (
    KEY,
    MALLORY,
    FakeHarness,
    Harness,
    PyslurmHarness,
    SlurmCliHarness,
    SlurmSshHarness,
    eventually,
    held_job,
    require,
)
from .harness_rest import SlurmRestHarness, SlurmRestNativeHarness

HOSTILE = ["node1;rm -rf /", "node1\nnode2", "x" * 10_000, "$(reboot)", "-h"]
REASON = drain_reason("inc-contract", "xid 79 on GPU 3")


@pytest_asyncio.fixture(params=[
    "fake",
    pytest.param("slurm-cli", marks=pytest.mark.slurm),
    pytest.param("slurm-cli-24.11", marks=pytest.mark.slurm),
    pytest.param("slurm-cli-26.05", marks=pytest.mark.slurm),
    pytest.param("slurm-ssh", marks=[pytest.mark.slurm, pytest.mark.ssh]),
    pytest.param("slurm-rest", marks=pytest.mark.slurm),
    pytest.param("slurm-ssh-24.11", marks=[pytest.mark.slurm, pytest.mark.ssh]),
    pytest.param("slurm-ssh-26.05", marks=[pytest.mark.slurm, pytest.mark.ssh]),
    pytest.param("slurm-rest-24.11", marks=pytest.mark.slurm),
    pytest.param("slurm-rest-26.05", marks=pytest.mark.slurm),
    "pyslurm",
])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "fake":
        yield FakeHarness()
    elif request.param == "pyslurm":
        yield PyslurmHarness()
    elif request.param == "slurm-cli":
        yield SlurmCliHarness(request.getfixturevalue("lab"))
    elif request.param.startswith("slurm-cli-"):
        lab = request.getfixturevalue("version_labs").get(request.param.removeprefix("slurm-cli-"))
        try:
            yield SlurmCliHarness(lab)
        finally:
            lab.reset()
    elif request.param.startswith("slurm-ssh-"):
        lab = request.getfixturevalue("version_labs").get(request.param.removeprefix("slurm-ssh-"))
        over_ssh = SlurmSshHarness(lab, request.getfixturevalue("version_sshd"))
        try:
            yield over_ssh
        finally:
            await over_ssh.ssh_runner.close()
            lab.reset()
    elif request.param.startswith("slurm-rest-"):
        version = request.param.removeprefix("slurm-rest-")
        labs = request.getfixturevalue("version_labs")
        native = SlurmRestNativeHarness(labs.get(version), labs.restd(version))
        try:
            yield native
        finally:
            await native.rest.aclose()
            native.lab.reset()
    elif request.param == "slurm-rest":
        rest = SlurmRestHarness(request.getfixturevalue("lab"), request.getfixturevalue("slurmrestd"))
        try:
            yield rest
        finally:
            await rest.rest.aclose()
    else:
        ssh = SlurmSshHarness(request.getfixturevalue("lab"), request.getfixturevalue("sshd"))
        try:
            yield ssh
        finally:
            await ssh.ssh_runner.close()


async def test_lists_nodes_with_gpus_and_the_running_job(harness: Harness) -> None:
    job = await harness.running_job()
    nodes = {n.name: n for n in await harness.backend.list_nodes()}
    assert set(harness.node_names) <= set(nodes)
    assert all("gpu:8" in nodes[n].gres for n in harness.node_names)
    jobs = {j.job_id: j for j in await harness.backend.list_jobs()}
    assert jobs[job.job_id].state is JobState.RUNNING
    assert jobs[job.job_id].nodes == job.nodes


async def test_the_dead_nodes_are_the_listings_dead_nodes(harness: Harness) -> None:
    # The watcher reads only these (sinfo filters them on the CLI): the same nodes as the whole
    # listing's dead ones, on every backend and Slurm version (an unknown state word would fail here).
    async def both() -> tuple[set[str], dict[str, NodeInfo]]:
        # A busy slurmd can be flagged not responding for a second: retry until two reads agree.
        for _ in range(5):
            listed = {n.name for n in await harness.backend.list_nodes() if n.dead}
            dead = {n.name: n for n in await harness.backend.list_dead_nodes()}
            if set(dead) == listed:
                break
            await asyncio.sleep(1)
        return listed, dead

    listed, dead = await both()
    assert set(dead) == listed and all(n.dead for n in dead.values())
    node = harness.node_names[-1]
    await harness.admin_fail(node, "admin: PSU | fan")
    try:
        listed, dead = await both()
        assert set(dead) == listed and node in dead
        assert "FAIL" in dead[node].flags and dead[node].reason == "admin: PSU | fan"
    finally:
        await harness.admin_resume(node)


async def test_the_job_lines_say_what_the_records_say(harness: Harness) -> None:
    # The watcher scans these every poll (a line per job on the CLI) and reads records only where
    # needed: on every backend and Slurm version the same jobs, states, restart counts, nodes and
    # partitions as the whole records, and a node's scan only the jobs on that node.
    # Ended jobs too: from 23.02 `squeue --json` lists only the jobs not ended unless asked for all
    # states, and the watcher reports a job's bad ending from them.
    job, ended = await harness.running_job(), await harness.running_job()
    await harness.backend.cancel_job(ended.job_id)

    async def both() -> tuple[dict[str, JobInfo], dict[str, JobStatus]]:
        for _ in range(10):  # a job between two states for a second: retry until two reads agree
            records = {j.job_id: j for j in await harness.backend.list_jobs()}
            lines = {s.job_id: s for s in await harness.backend.list_job_statuses()}
            if ({i: _said(r) for i, r in records.items()} == {i: _said(s) for i, s in lines.items()}
                    and ended.job_id in records and records[ended.job_id].state not in ACTIVE_JOB_STATES):
                break
            await asyncio.sleep(1)
        return records, lines

    records, lines = await both()
    assert {i: _said(r) for i, r in records.items()} == {i: _said(s) for i, s in lines.items()}
    assert records[ended.job_id].state is JobState.CANCELLED
    assert lines[job.job_id].state is JobState.RUNNING and lines[job.job_id].nodes == job.nodes
    on_node = {s.job_id for s in await harness.backend.list_job_statuses(job.nodes[0])}
    assert job.job_id in on_node and on_node <= {i for i, r in records.items() if job.nodes[0] in r.nodes}
    owner = records[job.job_id].user_id
    if owner is not None:  # a chain's reads: the owner's jobs only
        mine = {s.job_id for s in await harness.backend.list_job_statuses(user_id=owner)}
        assert job.job_id in mine and mine <= {i for i, r in records.items() if r.user_id == owner}


def _said(job: JobInfo | JobStatus) -> tuple[object, ...]:
    return job.state, job.restart_count, job.nodes, job.partition


async def test_job_detail(harness: Harness) -> None:
    started = await harness.running_job()
    job = await harness.backend.get_job(started.job_id)
    assert job.state is JobState.RUNNING
    assert len(job.nodes) == 2 and set(job.nodes) <= set(harness.node_names)
    assert "goodput:opt-in" in job.comment
    assert job.requeue is True
    assert job.restart_count == 0
    assert job.partition


async def test_a_jobs_status_is_what_its_record_says(harness: Harness) -> None:
    job = await harness.running_job()
    status = await harness.backend.job_status(job.job_id)
    assert (status.job_id, status.state, status.nodes, status.restart_count, status.held) == (
        job.job_id, JobState.RUNNING, job.nodes, 0, False)
    with pytest.raises(UnknownJobError):
        await harness.backend.job_status("999999")
    # read together in one tick (#29): the CLI's one scontrol asks for each job by its own id, the
    # known job's answer is believed as it is (not read again alone) and the unknown one still fails
    runner = getattr(harness, "ssh_runner", None) or getattr(harness, "runner", None)
    recorded: list[tuple[str, ...]] = getattr(runner, "argvs", [])
    recorded.clear()
    together = await asyncio.gather(harness.backend.job_status(job.job_id), harness.backend.job_status("999999"),
                                    return_exceptions=True)
    assert isinstance(together[1], UnknownJobError) and isinstance(together[0], JobStatus), together
    assert (together[0].state, together[0].nodes, together[0].restart_count) == (JobState.RUNNING, job.nodes, 0)
    if harness.name.startswith("slurm-cli") or harness.name.startswith("slurm-ssh"):
        assert recorded.count(("scontrol", "-o")) == 1 and not any(
            job.job_id in argv for argv in recorded if argv != ("scontrol", "-o")), recorded


async def test_requeue_given_the_callers_record_checks_the_jobs_state_again(harness: Harness) -> None:
    await require(harness, "requeue")
    job = await harness.running_job()
    assert (await harness.backend.requeue_job(job.job_id, hold=True, known=job)).changed
    # the same stale record again (a retried activity): the job is pending and held now, nothing twice
    assert not (await harness.backend.requeue_job(job.job_id, hold=True, known=job)).changed
    after = await harness.backend.get_job(job.job_id)
    assert after.restart_count == 1 and after.held


async def test_unknown_job_and_node_are_permanent(harness: Harness) -> None:
    with pytest.raises(UnknownJobError):
        await harness.backend.get_job("999999")
    with pytest.raises(UnknownJobError):
        await harness.backend.requeue_job("999999")
    with pytest.raises(UnknownNodeError):
        await harness.backend.get_node("nosuchnode")
    with pytest.raises(UnknownNodeError):
        await harness.backend.drain_node("nosuchnode", REASON)


@pytest.mark.parametrize("bad", HOSTILE)
async def test_hostile_identifiers_are_refused_before_any_call(harness: Harness, bad: str) -> None:
    backend = harness.backend
    before = harness.side_effects()
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: backend.get_node(bad), lambda: backend.drain_node(bad, REASON),
        lambda: backend.resume_node(bad, REASON), lambda: backend.get_job(bad),
        lambda: backend.requeue_job(bad), lambda: backend.hold_job(bad), lambda: backend.release_job(bad),
        lambda: backend.cancel_job(bad), lambda: backend.resubmit_job(bad, ResubmitRequest()),
        lambda: backend.resubmit_job("1", ResubmitRequest(exclude=(bad,))),
        lambda: backend.drain_node(harness.node_names[0], bad + "\n")]
    for call in calls:
        with pytest.raises(InvalidIdentifierError):
            await call()
    assert harness.side_effects() == before


async def test_drain_and_resume_are_idempotent(harness: Harness) -> None:
    node = harness.node_names[3]
    first = await harness.backend.drain_node(node, REASON)
    again = await harness.backend.drain_node(node, REASON)
    assert first.changed and not again.changed
    drained = await harness.backend.get_node(node)
    assert drained.drained and drained.reason == REASON
    resumed = await harness.backend.resume_node(node, REASON)
    resumed_again = await harness.backend.resume_node(node, REASON)
    assert resumed.changed and not resumed_again.changed
    assert not (await harness.backend.get_node(node)).drained


async def test_someone_elses_drain_is_never_overwritten_or_resumed(harness: Harness) -> None:
    node = harness.node_names[2]
    await harness.admin_drain(node, "admin: bad fan")
    result = await harness.backend.drain_node(node, REASON)
    assert not result.changed
    with pytest.raises(NotOwnedError):
        await harness.backend.resume_node(node, REASON)
    after = await harness.backend.get_node(node)
    assert after.drained and after.reason == "admin: bad fan"


async def test_another_incidents_drain_is_not_resumed(harness: Harness) -> None:
    node = harness.node_names[1]
    other = drain_reason("inc-other", "nvlink down")
    assert (await harness.backend.drain_node(node, other)).changed
    assert not (await harness.backend.drain_node(node, REASON)).changed
    with pytest.raises(NotOwnedError):
        await harness.backend.resume_node(node, REASON)
    assert (await harness.backend.get_node(node)).reason == other


async def test_requeue_restarts_the_job(harness: Harness) -> None:
    await require(harness, "requeue")
    job = await harness.running_job()
    result = await harness.backend.requeue_job(job.job_id)
    assert result.changed
    after = await harness.backend.get_job(job.job_id)
    assert after.restart_count == 1
    assert after.state in ACTIVE_JOB_STATES


async def test_requeue_of_a_requeued_job_is_a_no_op(harness: Harness) -> None:
    await require(harness, "requeue")
    job = await harness.running_job()
    assert (await harness.backend.requeue_job(job.job_id, hold=True)).changed
    again = await harness.backend.requeue_job(job.job_id, hold=True)
    assert not again.changed
    after = await harness.backend.get_job(job.job_id)
    assert after.restart_count == 1 and after.held


async def test_hold_and_release_are_idempotent(harness: Harness) -> None:
    new = await held_job(harness, await harness.running_job())
    assert new.held and new.state is JobState.PENDING
    assert not (await harness.backend.hold_job(new.job_id)).changed
    assert (await harness.backend.release_job(new.job_id)).changed
    assert not (await harness.backend.release_job(new.job_id)).changed
    await eventually(lambda: harness.backend.get_job(new.job_id), lambda j: j.state is JobState.RUNNING,
                     timeout=20, what="released job to run")


async def test_exclude_nodes_of_a_held_job(harness: Harness) -> None:
    await require(harness, "exclude")
    job = await held_job(harness, await harness.running_job())
    node = harness.node_names[3]
    assert (await harness.backend.exclude_nodes(job.job_id, [node])).changed
    assert not (await harness.backend.exclude_nodes(job.job_id, [node])).changed
    after = await harness.backend.get_job(job.job_id)
    assert node in after.excluded_nodes and after.held


async def test_requeue_hold_then_exclude_then_release(harness: Harness) -> None:
    # how a job leaves a bad node behind when it can be requeued: held, told to avoid the node, let go
    await require(harness, "requeue", "exclude")
    job = await harness.running_job()
    bad = job.nodes[0]
    assert (await harness.backend.requeue_job(job.job_id, hold=True)).changed
    held = await eventually(lambda: harness.backend.get_job(job.job_id),
                            lambda j: j.held and j.state in (JobState.PENDING, JobState.REQUEUED),
                            timeout=20, what="requeued job to be held")
    assert held.restart_count == 1
    assert (await harness.backend.exclude_nodes(job.job_id, [bad])).changed
    assert not (await harness.backend.exclude_nodes(job.job_id, [bad])).changed
    assert bad in (await harness.backend.get_job(job.job_id)).excluded_nodes
    assert (await harness.backend.release_job(job.job_id)).changed
    after = await eventually(lambda: harness.backend.get_job(job.job_id), lambda j: j.state is JobState.RUNNING,
                             timeout=40, what="released job to run again")
    assert bad not in after.nodes and len(after.nodes) == len(job.nodes)


async def test_cancel_is_idempotent(harness: Harness) -> None:
    job = await harness.running_job()
    assert (await harness.backend.cancel_job(job.job_id)).changed
    assert not (await harness.backend.cancel_job(job.job_id)).changed
    after = await eventually(lambda: harness.backend.get_job(job.job_id),
                             lambda j: j.state not in ACTIVE_JOB_STATES, timeout=20, what="cancel")
    assert after.state is JobState.CANCELLED


async def test_resubmit_excludes_nodes(harness: Harness) -> None:
    await require(harness, "resubmit")
    job = await harness.running_job()
    bad = job.nodes[0]
    result = await harness.backend.resubmit_job(job.job_id, ResubmitRequest(exclude=(bad,)))
    assert result.changed and result.new_job_id and result.new_job_id != job.job_id
    new = await eventually(lambda: harness.backend.get_job(result.new_job_id or ""),
                           lambda j: j.state is JobState.RUNNING, timeout=20, what="resubmitted job to run")
    assert bad in new.excluded_nodes
    assert bad not in new.nodes and len(new.nodes) == len(job.nodes)
    assert "goodput:opt-in" in new.comment
    # the copy is the owner's, as Slurm records it, whoever goodput runs as
    assert job.user_id is not None and (new.user, new.user_id) == (job.user, job.user_id)


async def test_a_retried_resubmit_finds_its_first_copy(harness: Harness) -> None:
    await require(harness, "resubmit")
    job = await harness.running_job()
    first = await harness.backend.resubmit_job(job.job_id, ResubmitRequest(exclude=(job.nodes[0],)))
    again = await harness.backend.resubmit_job(job.job_id, ResubmitRequest(exclude=(job.nodes[0],)))
    assert first.changed and not again.changed
    assert again.new_job_id == first.new_job_id
    copies = [j for j in await harness.backend.list_jobs()
              if j.job_id != job.job_id and j.state in ACTIVE_JOB_STATES]
    assert [j.job_id for j in copies] == [first.new_job_id]


async def test_another_users_job_is_never_taken_for_the_copy(harness: Harness) -> None:
    # mallory tags her job with the very token goodput would put on the copy (comments are public)
    await require(harness, "resubmit")
    job = await harness.running_job()
    claim = await harness.others_job(f"goodput:opt-in {resubmit_tag(job.job_id, KEY.token(job.job_id, 'inc-c'))}")
    assert claim.user_id is not None and claim.user_id != job.user_id
    first = await harness.backend.resubmit_job(job.job_id, ResubmitRequest(incident_id="inc-c"))
    assert first.changed and first.new_job_id not in (None, claim.job_id)
    again = await harness.backend.resubmit_job(job.job_id, ResubmitRequest(incident_id="inc-c"))
    assert not again.changed and again.new_job_id == first.new_job_id


async def test_a_dependency_is_read_as_slurm_wrote_it(harness: Harness) -> None:
    await require(harness, "dependency")
    first = await harness.running_job()
    after = await harness.dependent_job(f"afterok:{first.job_id}")
    assert after.state is JobState.PENDING
    assert f"afterok:{first.job_id}" in after.dependency


async def test_an_array_task_is_read_by_its_own_id(harness: Harness) -> None:
    await require(harness, "array")
    task = await harness.array_task()
    job = await harness.backend.get_job(task)
    assert job.state is JobState.RUNNING and "goodput:opt-in" in job.comment
    assert len(job.nodes) == 1


async def test_the_spare_reservation_is_read_and_acted_on(harness: Harness) -> None:
    # the hot-spare pool (docs/policies.md): read it, let a recovered job's owner in, point the held
    # job at it, refill it with a node back in service, end the grant; each step once, whatever retries
    await require(harness, "reservation")
    backend = harness.backend
    job = await held_job(harness, await harness.running_job())
    owner, spare, back = job.user, harness.node_names[3], harness.node_names[2]
    pool = await harness.spare_pool([owner])
    assert await backend.get_reservation(pool) == await harness.reservation_record(pool)
    read = await backend.get_reservation(pool)
    assert (read.nodes, read.users, "FLEX" in read.flags) == ((spare,), (owner,), True)
    with pytest.raises(UnknownReservationError):
        await backend.get_reservation("goodput-no-such-pool")
    assert (await backend.allow_reservation_user(pool, MALLORY)).changed
    assert not (await backend.allow_reservation_user(pool, MALLORY)).changed
    assert (await backend.use_reservation(job.job_id, pool)).changed
    assert (await backend.get_job(job.job_id)).reservation == pool
    assert (await backend.add_reservation_nodes(pool, [back])).changed
    assert not (await backend.add_reservation_nodes(pool, [back, spare])).changed
    assert (await backend.disallow_reservation_user(pool, MALLORY)).changed
    assert not (await backend.disallow_reservation_user(pool, MALLORY)).changed
    recorded = await harness.reservation_record(pool)
    assert (set(recorded.nodes), recorded.users) == ({spare, back}, (owner,))


async def test_jobs_that_did_not_opt_in_are_left_alone(harness: Harness) -> None:
    job = await harness.running_job(opted_in=False)
    backend = harness.backend
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: backend.requeue_job(job.job_id), lambda: backend.cancel_job(job.job_id),
        lambda: backend.hold_job(job.job_id), lambda: backend.resubmit_job(job.job_id, ResubmitRequest())]
    for call in calls:
        with pytest.raises(NotOwnedError):
            await call()
    assert (await harness.backend.get_job(job.job_id)).state is JobState.RUNNING
