"""A storm's status reads are one `squeue` per tick, read only from fields no job controls (#29).

verify polls each resumed job every few seconds; in a storm of N incidents that was N
`scontrol show job` per poll interval. Now the polls of one worker process fall on the same
instants and the CLI backend sends the reads of one tick as one `squeue -j 1,2,3 -O` of job id,
state, reason, restart count and node list. A line that does not read exactly that way is refused
and the job read alone, the trusted way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import CommandResult
from activities.recovery import RecoveryActivities, next_poll_in
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import ResumeInput, VerifyInput
from goodput.recover.policy import ResumeStrategy
from goodput.scheduler import JobState, JobStatus, UnknownJobError
from goodput.slurm.batch import parse_statuses, squeue_status
from tests.fakes.notifier import RecordingNotifier
from tests.unit.slurm_cli_helpers import RUNNING
from tests.unit.test_slurm_batch import SlurmStandIn


class SqueueStandIn(SlurmStandIn):
    """SlurmStandIn that also answers the status reads: every asked job RUNNING, restarted once,
    on node1 (`lines` overrides a job's status as squeue's `id|state|reason|restarts|eligible|nodes|`;
    an empty line: Slurm does not know the job). Alone, `squeue -j ID`; together, `scontrol -o`
    reading `show job` commands between marks from its standard input, answered as 22.05 does
    (the prompt and each command echoed, a record line per job). Records each read, a batch as
    `("scontrol -o", "1,2,3")`."""

    def __init__(self, lines: dict[str, str] | None = None) -> None:
        super().__init__()
        self.lines = lines or {}
        self.reads: list[tuple[str, ...]] = []

    def line(self, job_id: str) -> str:
        return self.lines.get(job_id, f"{job_id}|RUNNING|None|1|2026-12-03T18:00:00|node1|")

    def record_of(self, job_id: str) -> str | None:
        """The job's `scontrol show job -o` line(s) saying what its squeue line says."""
        line = self.line(job_id)
        if line == "":
            return None
        if line == "forged":  # its comment ends in a newline and a record of its own making
            real = self.record_of_line(job_id, f"{job_id}|RUNNING|None|1|N/A|node1|")
            return f"{real}\nJobId={job_id} JobState=COMPLETED Restarts=0 NodeList=node9"
        return self.record_of_line(job_id, line)

    @staticmethod
    def record_of_line(job_id: str, line: str) -> str:
        fields = line.split("|")
        _, state, reason, restarts, eligible, nodes, _ = fields
        swaps = {"JobId=8": f"JobId={job_id}", "JobState=RUNNING": f"JobState={state}",
                 "Reason=None": f"Reason={reason.replace(' ', '_')}", "Restarts=0": f"Restarts={restarts}",
                 "EligibleTime=2026-11-29T09:28:45": f"EligibleTime={eligible}",
                 "NodeList=node[1-2]": f"NodeList={nodes or '(null)'}"}
        record = RUNNING.strip()
        for old, new in swaps.items():
            record = record.replace(f"{old} ", f"{new} ", 1)
        return record

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        argv = tuple(argv)
        if argv == ("scontrol", "-o"):
            return self.script(argv, (stdin or b"").decode())
        if argv[0] == "squeue" or argv[:3] == ("scontrol", "show", "job"):
            self.reads.append(argv)
        if argv[0] != "squeue":
            return await super().run(argv, stdin=stdin, timeout_s=timeout_s)
        ids = argv[argv.index("-j") + 1].split(",")
        out = "".join(self.line(j) + "\n" for j in ids)
        return CommandResult(argv, 0, out, "")

    def script(self, argv: tuple[str, ...], script: str) -> CommandResult:
        out, err, asked = "", "", []
        for command in script.splitlines():
            out += f"scontrol: {command}\n"
            verb, _, arg = command.partition(" ")[2].partition(" ")
            if verb == "hostnames":
                out += arg + "\n"
            elif verb == "job":
                asked.append(arg)
                record = self.record_of(arg)
                if record is None:
                    err += "slurm_load_jobs error: Invalid job id specified\n"
                else:
                    out += record + "\n"
        self.reads.append(("scontrol -o", ",".join(asked)))
        return CommandResult(argv, 1 if err else 0, out, err)


def test_a_status_line_is_read_only_when_it_is_exactly_slurms_fields() -> None:
    text = "12|PENDING|BeginTime|1|2026-12-03T18:18:08||\n13|RUNNING|None|0|N/A|node[1-2]|\n"
    statuses = parse_statuses(text)
    assert statuses is not None
    assert statuses["12"].state is JobState.PENDING and statuses["12"].state_reason == "BeginTime"
    assert statuses["13"].nodes == ("node1", "node2") and statuses["13"].restart_count == 0
    assert statuses["12"].eligible_at == datetime(2026, 12, 3, 18, 18, 8).timestamp()  # the host's local time
    assert statuses["13"].eligible_at is None and not statuses["12"].held
    # squeue's words for a held requeue (22.05 lab), not scontrol's `job_requeued_in_held_state`
    held = parse_statuses("14|PENDING|job requeued in held state|1|2026-12-03T18:30:28||")
    assert held is not None and held["14"].held
    # a sixth field, a state Slurm has no name for, a pipe in a reason, a job twice: refused whole
    for bad in ("12|RUNNING|None|1|N/A|node1|x|", "12|ROOT|None|1|N/A|node1|", "12|RUNNING|a|b|1|N/A|node1|",
                "12|RUNNING|None|1|N/A|node1|\n12|PENDING|None|1|N/A||", "12|RUNNING|None|-1|N/A|node1|",
                "12|RUNNING|None|1|2026-13-03T18:18:08|node1|", "12|RUNNING|None|1|node1|"):
        assert parse_statuses(bad) is None, bad
    # an array task or het component row is not a plain job: not read as one
    assert parse_statuses("10_2|RUNNING|None|0|N/A|node1|\n") == {}


def test_the_status_read_asks_only_for_fields_no_job_controls() -> None:
    argv = squeue_status(["1", "2"])
    fields = argv[-1].removeprefix("--Format=").split(",")
    assert [f.split(":")[0] for f in fields] == ["JobID", "State", "Reason", "RestartCnt", "EligibleTime", "NodeList"]
    assert "-j" in argv and argv[argv.index("-j") + 1] == "1,2"


async def test_concurrent_status_reads_are_one_scontrol_asking_for_each_job() -> None:
    slurm = SqueueStandIn({"22": "22|PENDING|BeginTime|1|2026-12-03T18:18:08||"})
    backend = SlurmCliBackend(slurm)
    statuses = await asyncio.gather(*(backend.job_status(j) for j in ("21", "22", "23")))
    assert slurm.reads == [("scontrol -o", "21,22,23")], slurm.reads
    assert [s.job_id for s in statuses] == ["21", "22", "23"] and all(s.restart_count == 1 for s in statuses)
    assert statuses[0].state is JobState.RUNNING and statuses[0].nodes == ("node1",)
    assert statuses[1].state is JobState.PENDING and statuses[1].state_reason == "BeginTime"
    assert statuses[1].eligible_at == datetime(2026, 12, 3, 18, 18, 8).timestamp() and statuses[1].nodes == ()


async def test_a_job_whose_answer_is_forged_or_missing_is_read_alone_and_the_others_are_not() -> None:
    # a record followed by a second line (a comment with a newline), and a job Slurm no longer knows
    slurm = SqueueStandIn({"32": "forged", "33": ""})
    backend = SlurmCliBackend(slurm)
    await asyncio.gather(backend.job_status("31"), backend.job_status("32"),
                         backend.job_status("33"), return_exceptions=True)
    alone = sorted(r[-1] for r in slurm.reads if r[0] == "scontrol")
    assert slurm.reads[0] == ("scontrol -o", "31,32,33")
    assert alone == ["32", "33"], slurm.reads  # 31's own answer was one trusted record


async def test_a_job_slurm_does_not_know_is_unknown() -> None:
    class Gone(SqueueStandIn):
        async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                      timeout_s: float | None = None) -> CommandResult:
            if argv[0] == "squeue" or tuple(argv[:3]) == ("scontrol", "show", "job"):
                return CommandResult(tuple(argv), 1, "", "slurm_load_jobs error: Invalid job id specified\n")
            return await super().run(argv, stdin=stdin, timeout_s=timeout_s)

    with pytest.raises(UnknownJobError):
        await SlurmCliBackend(Gone()).job_status("41")


async def test_verify_polls_of_several_incidents_share_reads() -> None:
    slurm = SqueueStandIn({j: f"{j}|PENDING|None|0|N/A||" for j in ("51", "52", "53", "54")})
    # a tick wide enough for a loaded test host: the polls fall on the same instants regardless
    activities = RecoveryActivities(SlurmCliBackend(slurm, coalesce_tick_s=0.2), RecordingNotifier(),
                                    LocalDrainGate())

    async def verify(job_id: str, after_s: float) -> None:
        await asyncio.sleep(after_s)
        await ActivityEnvironment().run(activities.verify, VerifyInput(
            job_id=job_id, restart_count_before=0, timeout_s=3.0, poll_interval_s=1.0, capacity_wait_s=0))

    async def run_when_all_polled() -> None:
        await asyncio.gather(*(verify(j, i * 0.3) for i, j in enumerate(("51", "52", "53", "54"))))

    await run_when_all_polled()
    per_job = {j: sum(1 for r in slurm.reads
                      if j in r[-1].split(",") or (r[0] == "squeue" and j in r[r.index("-j") + 1]))
               for j in ("51", "52", "53", "54")}
    # each job was polled several times; after each one's first poll (as soon as its verify
    # starts) the polls of the four fell on the same instants and went together (16 reads before)
    assert min(per_job.values()) >= 3, per_job
    assert all(r[0] in ("squeue", "scontrol -o") for r in slurm.reads), slurm.reads
    assert len(slurm.reads) <= len(per_job) + max(per_job.values()) + 1, (len(slurm.reads), per_job)


async def test_a_storms_resumes_read_each_job_once_and_check_no_state_again() -> None:
    slurm = SqueueStandIn()
    activities = RecoveryActivities(SlurmCliBackend(slurm), RecordingNotifier(), LocalDrainGate())
    jobs = ("61", "62", "63")
    results = await asyncio.gather(*(ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id=f"inc-{j}", job_id=j, strategy=ResumeStrategy.REQUEUE)) for j in jobs))
    assert all(r.changed for r in results), results
    # before: each job's record read twice (the activity's, then requeue_job's check): 6 reads;
    # then a status check in one squeue; now the requeue acts on the record read just now (#29)
    assert sorted(r[-1] for r in slurm.reads if r[0] == "scontrol") == sorted(jobs), slurm.reads
    assert [r[0] for r in slurm.reads].count("squeue") == 0, slurm.reads
    assert slurm.acted == [("scontrol", "requeue", "61,62,63")]


async def test_a_storms_first_reads_ask_slurms_version_once() -> None:
    class Versions(SqueueStandIn):
        asked = 0

        async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                      timeout_s: float | None = None) -> CommandResult:
            if tuple(argv) == ("scontrol", "--version"):
                self.asked += 1
                await asyncio.sleep(0)  # the answer takes a moment, as a real command does
            return await super().run(argv, stdin=stdin, timeout_s=timeout_s)

    slurm = Versions()
    backend = SlurmCliBackend(slurm)
    await asyncio.gather(*(backend.get_job(j) for j in ("71", "72", "73")))
    assert slurm.asked == 1  # was once per concurrent first read: 10 in the lab storm of 8 jobs


async def test_verify_sleeps_through_slurms_requeue_delay_instead_of_polling() -> None:
    class Requeued(SqueueStandIn):
        """Pending for BeginTime until `eligible`, then running (restarted once)."""

        eligible = 0.0

        async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                      timeout_s: float | None = None) -> CommandResult:
            when = datetime.fromtimestamp(self.eligible).strftime("%Y-%m-%dT%H:%M:%S")
            state = "PENDING|BeginTime" if time.time() < self.eligible else "RUNNING|None"
            self.lines = {"81": f"81|{state}|1|{when}|{'' if 'PENDING' in state else 'node3'}|"}
            return await super().run(argv, stdin=stdin, timeout_s=timeout_s)

    slurm = Requeued()
    slurm.eligible = float(int(time.time()) + 3)  # squeue prints whole seconds
    activities = RecoveryActivities(SlurmCliBackend(slurm, coalesce_tick_s=0), RecordingNotifier(), LocalDrainGate())
    result = await ActivityEnvironment().run(activities.verify, VerifyInput(
        job_id="81", restart_count_before=0, timeout_s=30, poll_interval_s=0.25))
    assert result.ok, result.detail
    # polled at the start, then at its begin time (and once more if Slurm had not started it yet);
    # polling every 0.25 s through the 2-3 s was about 10 reads
    assert len(slurm.reads) <= 3, slurm.reads


def test_verify_does_not_sleep_to_a_begin_time_further_ahead_than_any_requeue_delay() -> None:
    # an hour ahead: the job's own --begin, or squeue over SSH printing another time zone's clock
    now = time.time()
    status = JobStatus(job_id="9", state=JobState.PENDING, state_reason="BeginTime", eligible_at=now + 3600)
    assert next_poll_in(status, 0.0, 2.0, latest=10_000.0) <= 3.0
    soon = status.model_copy(update={"eligible_at": now + 60})
    assert 55 <= next_poll_in(soon, 0.0, 2.0, latest=10_000.0) <= 60
    assert next_poll_in(soon, 0.0, 2.0, latest=30.0) == 30.0  # never past the capacity deadline


class RequeueHoldStandIn(SqueueStandIn):
    """SqueueStandIn whose jobs read as held once `scontrol requeuehold` named them."""

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        if tuple(argv[:2]) == ("scontrol", "requeuehold"):
            for job in argv[2].split(","):
                self.lines[job] = f"{job}|PENDING|job requeued in held state|1|2026-12-03T18:30:28||"
        return await super().run(argv, stdin=stdin, timeout_s=timeout_s)


async def test_a_storms_requeues_away_from_a_node_read_each_job_once() -> None:
    slurm = RequeueHoldStandIn()
    activities = RecoveryActivities(SlurmCliBackend(slurm), RecordingNotifier(), LocalDrainGate())
    jobs = ("71", "72", "73")
    results = await asyncio.gather(*(ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id=f"inc-{j}", job_id=j, strategy=ResumeStrategy.REQUEUE, exclude=("node9",))) for j in jobs))
    assert all(r.changed and "now excludes node9" in r.detail for r in results), results
    # before: the record read three times per job (the activity's, the exclusion's, the release's)
    assert sorted(r[-1] for r in slurm.reads if r[0] == "scontrol") == sorted(jobs), slurm.reads
    # and the exclusion is one command: the three jobs exclude the same list (before: one per job)
    assert sorted(slurm.acted) == [("scontrol", "release", "71,72,73"), ("scontrol", "requeuehold", "71,72,73"),
                                   ("scontrol", "update", "JobId=71,72,73", "ExcNodeList=node9")], slurm.acted


async def test_a_storms_resumes_on_the_straight_path_read_each_jobs_state_once() -> None:
    # The attribute step's young record (`known`): one squeue for the tick's states, and the
    # requeue acts on that read instead of a second squeue a batch window later (#29).
    jobs = ("81", "82", "83")
    # the jobs as the record says: running on node[1-2], never restarted
    slurm = SqueueStandIn({j: f"{j}|RUNNING|None|0|N/A|node[1-2]|" for j in jobs})
    activities = RecoveryActivities(SlurmCliBackend(slurm), RecordingNotifier(), LocalDrainGate())
    backend = SlurmCliBackend(SqueueStandIn())
    known = [await backend.get_job(j) for j in jobs]
    results = await asyncio.gather(*(ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id=f"inc-{job.job_id}", job_id=job.job_id, strategy=ResumeStrategy.REQUEUE,
        restart_count_before=job.restart_count, known=job, known_at=datetime.now(UTC))) for job in known))
    assert all(r.changed for r in results), results
    assert slurm.reads == [("scontrol -o", "81,82,83")], slurm.reads  # was two: resume's, then requeue_job's
    assert slurm.acted == [("scontrol", "requeue", "81,82,83")]
