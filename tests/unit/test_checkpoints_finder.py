"""Whose permissions a checkpoint tree is read with, and the child process that reads it.

The proof that matters runs for real as root: a hostile owner's tree holds `latest` hard-linked
to a root-only secret, a directory symlinked to a root-only directory, and a root-only directory
of its own. Read as the owner, none of them is read (and the reasons say so); read in-process as
root, the secret's text would reach the explanation, which is what the privilege drop prevents.
The child's failure modes (hang, flood, garbage, a forged checkpoint, a crash) are driven by a
stand-in interpreter script, so they need no privileges.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from activities.adapters.checkpoints import MAX_REPORT_BYTES, OwnerCheckpointFinder, identity_of
from goodput.checkpoints import (
    Checkpoint,
    CheckpointConfig,
    Discovery,
    FinderRequest,
    InProcessFinder,
    ReadMode,
    ResumeChoice,
    request_for,
)
from goodput.checkpoints.finder import in_process_reason
from goodput.checkpoints.reader import ChildReport
from goodput.scheduler import JobInfo, JobState
from tests.fakes.checkpoint_bytes import file_bytes

pytestmark = pytest.mark.timeout(60)
LATER = datetime.now(UTC) + timedelta(hours=1)
SECRET = "TOPSECRET-root-only-content"
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="switching to the job owner needs root")


def touch(path: Path, data: bytes | None = None) -> None:
    """A file as its format starts and ends it (a torch zip, a safetensors header), else 16 bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(file_bytes(path.name) if data is None else data)


def deepspeed_step(tag: Path) -> None:
    touch(tag / "mp_rank_00_model_states.pt")
    touch(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")


def request(root: Path, uid: int | None, gid: int | None = None, name: str = "") -> FinderRequest:
    return FinderRequest(config=CheckpointConfig(root=str(root)), now=LATER, owner_uid=uid, owner_gid=gid,
                         owner_name=name)


@pytest.mark.parametrize(("goodput_uid", "owner_uid", "in_process"), [
    (0, 1001, False), (0, 0, False), (0, None, True), (1000, 1001, True), (1000, None, True)])
def test_who_reads_the_tree(goodput_uid: int, owner_uid: int | None, in_process: bool) -> None:
    assert (in_process_reason(goodput_uid, owner_uid) is not None) == in_process


def test_the_request_carries_the_owner_slurm_recorded() -> None:
    job = JobInfo(job_id="7", state=JobState.FAILED, user="alice", user_id=1001, group_id=100)
    made = request_for(CheckpointConfig(root="/ckpt"), job, LATER)
    assert (made.owner_uid, made.owner_gid, made.owner_name) == (1001, 100, "alice")


async def test_without_root_discovery_runs_in_process_and_says_so(tmp_path: Path) -> None:
    deepspeed_step(tmp_path / "global_step5")
    finder = OwnerCheckpointFinder(goodput_uid=lambda: 1000)
    finding = await finder.find(request(tmp_path, uid=1001))
    assert finding.mode is ReadMode.IN_PROCESS
    assert finding.choice.checkpoint is not None and finding.choice.checkpoint.step == 5
    assert "(checkpoint tree read in-process as goodput's own user (uid 1000)" in finding.explanation
    unknown = await OwnerCheckpointFinder(goodput_uid=lambda: 0).find(request(tmp_path, uid=None))
    assert unknown.mode is ReadMode.IN_PROCESS and "did not say who owns the job" in unknown.explanation


def test_an_owner_without_a_known_group_is_not_guessed() -> None:
    unused = next(uid for uid in range(64200, 64300) if not _has_account(uid))
    assert identity_of(request(Path("/x"), uid=unused)) == f"the primary group of uid {unused} is unknown"
    assert identity_of(request(Path("/x"), uid=None)) == "the job's owner is unknown"


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


async def test_a_root_owned_job_is_read_by_the_real_child(tmp_path: Path) -> None:
    deepspeed_step(tmp_path / "global_step5")
    finding = await OwnerCheckpointFinder(goodput_uid=lambda: 0).find(request(tmp_path, uid=0, gid=0))
    assert finding.mode is ReadMode.AS_OWNER and "as uid 0 in a child process" in finding.read_as
    assert finding.choice.checkpoint is not None and finding.choice.checkpoint.step == 5
    assert finding.discovery is not None and finding.discovery.layout == "deepspeed"


# The real privilege drop --------------------------------------------------------------------------


@pytest.fixture
def hostile_owner() -> tuple[int, int, str]:
    """goodput-mallory when the lab created her; else a uid without an account (the kernel needs none)."""
    try:
        account = pwd.getpwnam("goodput-mallory")
    except KeyError:
        uid = next(uid for uid in range(64300, 64400) if not _has_account(uid))
        return uid, uid, ""
    return account.pw_uid, account.pw_gid, account.pw_name


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory the owner can traverse (pytest's own tmp_path is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="goodput-ckpt-test-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base)


def megatron_iter(path: Path) -> None:
    touch(path / "mp_rank_00" / "model_optim_rng.pt")


def hostile_tree(base: Path, uid: int, gid: int) -> Path:
    secret = base / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    root_only = base / "root-only"
    megatron_iter(root_only / "iter_0000009")
    root_only.chmod(0o700)
    root = base / "mallory" / "ckpt"
    megatron_iter(root / "iter_0000005")
    for path in (base / "mallory", root, *root.rglob("*")):
        os.chown(path, uid, gid)
    # protected_hardlinks stops users linking others' files, not root: the test plays both parts.
    os.link(secret, root / "latest_checkpointed_iteration.txt")
    (root / "iter_0000009").symlink_to(root_only / "iter_0000009", target_is_directory=True)
    megatron_iter(root / "iter_0000007")
    (root / "iter_0000007").chmod(0o700)  # root-owned, inside the owner's tree
    return root


@AS_ROOT
async def test_the_owner_cannot_make_goodput_read_what_the_owner_cannot(
        shared_tmp: Path, hostile_owner: tuple[int, int, str]) -> None:
    uid, gid, name = hostile_owner
    root = hostile_tree(shared_tmp, uid, gid)
    finding = await OwnerCheckpointFinder().find(request(root, uid=uid, gid=gid, name=name))
    assert finding.mode is ReadMode.AS_OWNER and f"as uid {uid}" in finding.read_as
    explanation = finding.explanation
    assert SECRET not in explanation
    assert "latest_checkpointed_iteration.txt is unreadable: Permission denied" in explanation
    assert "iter_0000007/: not listed: Permission denied" in explanation
    assert "passed over iter_0000009: a symbolic link leading out of the checkpoint root" in explanation
    # The same tree read in-process as root: the hard-linked secret is quoted as a tracker that
    # does not parse. Reading as the owner is what keeps it out.
    as_root = await InProcessFinder().find(request(root, uid=uid, gid=gid))
    assert SECRET in as_root.explanation


# The child's failure modes, through a stand-in interpreter ------------------------------------


def stand_in(tmp_path: Path, body: str) -> str:
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


async def run_stand_in(tmp_path: Path, body: str, timeout_s: float | None = None) -> str:
    finder = OwnerCheckpointFinder(python=stand_in(tmp_path, body), timeout_s=timeout_s, goodput_uid=lambda: 0)
    finding = await finder.find(request(tmp_path, uid=0, gid=0))
    assert finding.mode is ReadMode.AS_OWNER and finding.choice.checkpoint is None
    return finding.explanation


async def test_a_child_that_hangs_is_killed_at_the_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    explanation = await run_stand_in(tmp_path, f"echo $$ > {pid_file}; exec sleep 600", timeout_s=1)
    assert explanation.startswith("checkpoint discovery timed out after 1 s")
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


async def test_a_child_that_floods_its_output_is_cut_off(tmp_path: Path) -> None:
    explanation = await run_stand_in(tmp_path, f"head -c {MAX_REPORT_BYTES + 1024} /dev/zero; sleep 600")
    assert f"printed more than {MAX_REPORT_BYTES} bytes; discarded" in explanation


async def test_a_child_report_that_does_not_validate_is_discarded(tmp_path: Path) -> None:
    explanation = await run_stand_in(tmp_path, """printf '{"discovery": {"root": 1}}'""")
    assert "returned an invalid report" in explanation


async def test_a_forged_checkpoint_outside_the_root_is_discarded(tmp_path: Path) -> None:
    forged = Checkpoint(path="/home/alice/ckpt/step-9", step=9, layout="dcp", complete=True)
    report = ChildReport(discovery=Discovery(root=str(tmp_path), layout="dcp", checkpoints=(forged,)),
                         choice=ResumeChoice(checkpoint=forged, explanation="resume from step 9"))
    (tmp_path / "report.json").write_text(report.model_dump_json())
    explanation = await run_stand_in(tmp_path, f"cat {tmp_path / 'report.json'}")
    assert "reported a checkpoint outside the configured root; discarded" in explanation


async def test_a_child_that_fails_reports_its_exit_status_and_last_line(tmp_path: Path) -> None:
    explanation = await run_stand_in(tmp_path, "echo 'Traceback ...' >&2; echo 'MemoryError\x1b[2J' >&2; exit 3")
    assert "failed (exit status 3): MemoryError?[2J" in explanation
