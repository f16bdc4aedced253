"""SlurmCliBackend's resubmission with a scripted runner: the copy runs as its owner from a clean
environment, is found again by owner and token, and a key-like comment falls back to JSON."""

import re
from typing import Any

import pytest

from activities.adapters.job_scan import MAX_OWNER_READS
from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_owner import OwnerSubmission
from activities.adapters.slurm_runner import CommandResult
from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import PermanentSchedulerError, ResubmitRequest
from goodput.slurm.resubmit import ResubmitKey
from goodput.slurm.submit_as import BecomeMode, OwnerError
from tests.unit.slurm_cli_helpers import FIXTURES, RUNNING, ScriptedRunner, fail, listing, ok


async def test_resubmit_refuses_bad_environment_before_running() -> None:
    runner = ScriptedRunner({})
    with pytest.raises(InvalidIdentifierError):
        await SlurmCliBackend(runner).resubmit_job("8", ResubmitRequest(environment={"A": "x,--wrap=id"}))
    assert runner.calls == []



KEY = ResubmitKey(b"unit-test-resubmit-key", "default")
ALICE_LINE = RUNNING.replace("UserId=root(0) GroupId=root(0)", "UserId=goodput-alice(1001) GroupId=goodput-alice(1001)")
ALICE_PASSWD = "goodput-alice:x:1001:1001::/home/goodput-alice:/bin/bash\n"
ROOT_PASSWD = "root:x:0:0:root:/root:/bin/bash\n"


def resubmit_runner(record: str = RUNNING, *, squeue: str | None = None, uid: str = "0\n",
                    passwd: CommandResult | None = None, submit: CommandResult | None = None) -> ScriptedRunner:
    """The owner's job lines are answered with the output patterns' line, which is not one, so the
    copy is looked for in `squeue` (the JSON listing) unless a test answers the lines itself."""
    script = (FIXTURES / "batch-script-running.sh").read_text()
    return ScriptedRunner({
        ("scontrol", "show", "job"): ok(record),
        ("scontrol", "write", "batch_script"): ok(script),
        ("squeue", "--json"): ok(squeue or listing()),
        ("squeue",): ok("/tmp/gpsl-scratch/out-%j.log|/tmp/gpsl-scratch/out-%j.log|\n"),
        ("id", "-u"): ok(uid),
        ("getent", "passwd", "root"): ok(ROOT_PASSWD),
        ("getent", "passwd", "goodput-alice"): passwd or ok(ALICE_PASSWD),
        ("sbatch",): submit or ok("42\n"),
        ("env",): submit or ok("42\n"),
        ("runuser",): submit or ok("42\n"),
        ("sudo",): submit or ok("42\n"),
    })


def submitted(runner: ScriptedRunner) -> list[tuple[tuple[str, ...], bytes | None]]:
    return [(argv, stdin) for argv, stdin in runner.calls if "sbatch" in argv]


async def test_resubmit_runs_the_original_script_with_exclusions_and_environment() -> None:
    runner = resubmit_runner()
    result = await SlurmCliBackend(runner, resubmit_key=KEY).resubmit_job(
        "8", ResubmitRequest(exclude=("node2",), environment={"GOODPUT_RESTART": "1"}, incident_id="inc-1"))
    assert result.changed and result.new_job_id == "42"
    (argv, stdin), = submitted(runner)
    assert stdin == (FIXTURES / "batch-script-running.sh").read_bytes()
    # job 8 is root's and goodput is root: no switch, but still a clean environment
    sbatch = argv.index("sbatch")
    assert argv[:2] == ("env", "-i") and argv[sbatch + 1] == "--parsable"
    assert {"--nodes=2", "--partition=gpu", "--gres=gpu:1", "--requeue", "--exclude=node2",
            "--output=/tmp/gpsl-scratch/out-%j.log", "--export=ALL",
            f"--comment=goodput:resubmit-of=8:{KEY.token('8', 'inc-1')} goodput:opt-in team=ml"} <= set(argv)
    assert "GOODPUT_RESTART=1" in argv[2:sbatch] and "USER=root" in argv[2:sbatch]


async def test_a_key_like_comment_resubmits_from_the_jobs_json() -> None:
    # `Project=x` makes the text record ambiguous; the JSON listing says the same without doubt.
    comment = "goodput:opt-in team=ml Project=x"
    runner = resubmit_runner(RUNNING.replace("Comment=goodput:opt-in team=ml", f"Comment={comment}"),
                             squeue=listing(job8={"comment": comment}))
    result = await SlurmCliBackend(runner, resubmit_key=KEY).resubmit_job(
        "8", ResubmitRequest(exclude=("node2",), incident_id="inc-1"))
    assert result.changed and result.new_job_id == "42"
    (argv, _), = submitted(runner)
    assert {"--nodes=2", "--partition=gpu", "--gres=gpu:1", "--requeue", "--exclude=node2",
            f"--comment=goodput:resubmit-of=8:{KEY.token('8', 'inc-1')} {comment}"} <= set(argv)


async def test_resubmit_runs_as_the_owner_with_nothing_of_goodputs_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOODPUT_PUSH_TOKEN", "s3cret")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm-lab/slurm.conf")
    runner = resubmit_runner(ALICE_LINE)
    await SlurmCliBackend(runner).resubmit_job("8", ResubmitRequest(environment={"GOODPUT_RESUME_FROM": "/ck/9"}))
    (argv, _), = submitted(runner)
    sbatch = argv.index("sbatch")
    assert argv[:6] == ("runuser", "-u", "goodput-alice", "--", "env", "-i")
    assert sorted(argv[6:sbatch]) == ["GOODPUT_RESUME_FROM=/ck/9", "HOME=/home/goodput-alice",
                                      "LOGNAME=goodput-alice", "PATH=/usr/local/bin:/usr/bin:/bin",
                                      "SHELL=/bin/bash", "SLURM_CONF=/etc/slurm-lab/slurm.conf",
                                      "USER=goodput-alice"]
    assert not any("s3cret" in item for item in argv)


async def test_resubmit_uses_sudo_when_configured_and_goodput_is_not_root() -> None:
    runner = resubmit_runner(ALICE_LINE, uid="500\n")
    backend = SlurmCliBackend(runner, submission=OwnerSubmission(mode=BecomeMode.SUDO, carried={}))
    assert (await backend.resubmit_job("8", ResubmitRequest())).new_job_id == "42"
    (argv, _), = submitted(runner)
    assert argv[:7] == ("sudo", "-n", "-u", "goodput-alice", "--", "env", "-i")


@pytest.mark.parametrize(("record", "runner_options", "match"), [
    # not root, not the owner, no sudo configured
    (ALICE_LINE, {"uid": "500\n"}, "cannot submit as goodput-alice"),
    # Slurm does not know the owner
    (RUNNING.replace("UserId=root(0)", "UserId=(null)(1001)"), {}, "owner of job 8 is unknown"),
    # the owner has no account here (getent exits 2), or another uid
    (ALICE_LINE, {"passwd": CommandResult(argv=("getent",), returncode=2, stdout="", stderr="")}, "no account"),
    (ALICE_LINE, {"passwd": ok(ALICE_PASSWD.replace("1001:1001", "1005:1005"))}, "uid 1005"),
])
async def test_resubmit_refuses_rather_than_submit_as_anyone_else(
        record: str, runner_options: dict[str, Any], match: str) -> None:
    runner = resubmit_runner(record, **runner_options)
    with pytest.raises(OwnerError, match=match):
        await SlurmCliBackend(runner).resubmit_job("8", ResubmitRequest())
    assert submitted(runner) == []


async def test_a_failed_switch_to_the_owner_is_an_owner_error() -> None:
    runner = resubmit_runner(ALICE_LINE, uid="500\n", submit=fail("sudo: a password is required", argv=("sudo",)))
    backend = SlurmCliBackend(runner, submission=OwnerSubmission(mode=BecomeMode.SUDO))
    with pytest.raises(OwnerError, match="cannot submit job 8's copy as goodput-alice: sudo: a password"):
        await backend.resubmit_job("8", ResubmitRequest())


async def test_resubmit_finds_the_copy_a_previous_attempt_made() -> None:
    token = KEY.token("8", "inc-1")
    runner = resubmit_runner(squeue=listing(job11={"comment": f"goodput:opt-in goodput:resubmit-of=8:{token}"}))
    result = await SlurmCliBackend(runner, resubmit_key=KEY).resubmit_job(
        "8", ResubmitRequest(exclude=("node2",), incident_id="inc-1"))
    assert not result.changed and result.new_job_id == "11"  # the pending copy in the listing
    assert submitted(runner) == [] and runner.ran("scontrol", "write") == []


COPY_RECORD = (RUNNING.replace("JobId=8 ", "JobId=11 ").replace("JobState=RUNNING", "JobState=PENDING")
               .replace("out-8.log", "out-11.log"))


async def test_a_retried_resubmit_reads_the_owners_jobs_not_the_cluster() -> None:
    """The copy is looked for among the owner's active jobs (their lines, then their records one
    by one): at 20,000 jobs every job's record is 54-115 MB of JSON (#29)."""
    token = KEY.token("8", "inc-1")
    runner = resubmit_runner()
    runner.answers = {("squeue", "--noheader"): ok("8|RUNNING|0|node[1-2]|gpu|\n11|PENDING|0||gpu|\n"
                                                   "12|COMPLETED|0|node3|gpu|\n"),
                      ("scontrol", "show", "job", "-o", "11"): ok(COPY_RECORD.replace(
                          "Comment=goodput:opt-in", f"Comment=goodput:opt-in goodput:resubmit-of=8:{token}")),
                      **runner.answers}
    result = await SlurmCliBackend(runner, resubmit_key=KEY).resubmit_job("8", ResubmitRequest(incident_id="inc-1"))
    assert not result.changed and result.new_job_id == "11"
    assert runner.ran("squeue", "--json") == [] and submitted(runner) == []
    scan, = runner.ran("squeue", "--noheader")
    assert "--user=0" in scan  # the owner's lines only, as Slurm records the owner
    assert runner.ran("scontrol", "show", "job", "-o", "12") == []  # an ended job is not a copy


async def test_an_owner_with_many_active_jobs_is_read_in_one_listing() -> None:
    lines = "".join(f"{100 + i}|PENDING|0||gpu|\n" for i in range(MAX_OWNER_READS + 1))
    runner = resubmit_runner()
    runner.answers = {("squeue", "--noheader"): ok(lines), **runner.answers}
    result = await SlurmCliBackend(runner, resubmit_key=KEY).resubmit_job("8", ResubmitRequest(incident_id="inc-1"))
    assert result.changed and result.new_job_id == "42"
    assert len(runner.ran("squeue", "--json")) == 1 and runner.ran("scontrol", "show", "job", "-o", "100") == []


@pytest.mark.parametrize("claim", [
    {"comment": "goodput:opt-in goodput:resubmit-of=8"},  # the old, untokened tag
    {"comment": f"goodput:opt-in goodput:resubmit-of=8:{'0' * 32}"},  # a forged token
    {"comment": f"goodput:opt-in goodput:resubmit-of=8:{KEY.token('8', 'inc-1')}", "user_id": 1002,
     "user_name": "goodput-mallory"},  # the real token, on another user's job
    {"comment": f"goodput:opt-in goodput:resubmit-of=8:{KEY.token('8', 'inc-0')}"},  # another incident's
])
async def test_a_job_claiming_to_be_the_copy_is_not_taken_for_it(claim: dict[str, object]) -> None:
    runner = resubmit_runner(squeue=listing(job11=claim))
    result = await SlurmCliBackend(runner, resubmit_key=KEY).resubmit_job("8", ResubmitRequest(incident_id="inc-1"))
    assert result.changed and result.new_job_id == "42"
    assert len(submitted(runner)) == 1


async def test_resubmit_refuses_interactive_jobs() -> None:
    # scontrol prints no output paths for a job that is not a batch job
    interactive = re.sub(r" Std(Err|In|Out)=\S+", "", RUNNING.replace("BatchFlag=1", "BatchFlag=0"))
    runner = resubmit_runner(interactive)
    with pytest.raises(PermanentSchedulerError, match="not a batch job"):
        await SlurmCliBackend(runner).resubmit_job("8", ResubmitRequest())


