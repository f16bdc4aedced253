"""Who reads a job's checkpoint tree, and how: the checkpoint-finder seam.

The tree is named by the job (its comment) and owned by the job's user, while goodput runs as a
Slurm operator (root in many deployments). Read as root, a tree could make goodput open what its
owner cannot (a hard link to a root-only file, a root-only directory inside the tree). So where
goodput is root and Slurm says who owns the job, the tree is read by a child process that runs
as the owner (`activities.adapters.checkpoints`, running `goodput.checkpoints.reader`),
under a wall-clock timeout and an output bound; a root-owned job (uid 0) is read as root there.
Where the owner is unknown, or goodput is not root (it can then read only what its own user
may), discovery runs in-process (`InProcessFinder`). Either way it runs with the same confinement
and bounds (goodput.checkpoints.localfs), and the `Finding` says which way it was read.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import Field

from goodput.checkpoints.fs import FileSystem
from goodput.checkpoints.jobconfig import CheckpointCommentError, config_from_comment
from goodput.checkpoints.localfs import LocalFileSystem
from goodput.checkpoints.model import CheckpointConfig, Discovery, ResumeChoice, ScanLimits
from goodput.checkpoints.resume import find_resume_point
from goodput.models import Frozen
from goodput.scheduler import JobInfo


class ReadMode(StrEnum):
    """Whose permissions a checkpoint tree was read with."""

    AS_OWNER = "as-owner"  # a child process with the job owner's uid, gid and groups
    IN_PROCESS = "in-process"  # goodput's own process and user


class FinderRequest(Frozen):
    """One discovery: the job's config, the clock, and whose permissions the tree is read with."""

    config: CheckpointConfig
    now: datetime
    owner_uid: int | None = Field(default=None, ge=0, le=2**32 - 1)
    owner_gid: int | None = Field(default=None, ge=0, le=2**32 - 1)
    owner_name: str = Field(default="", max_length=256)
    limits: ScanLimits = Field(default_factory=ScanLimits)


class Finding(Frozen):
    """What discovery found (None when it did not finish), the choice, and how the tree was read."""

    discovery: Discovery | None = None
    choice: ResumeChoice
    mode: ReadMode
    read_as: str

    @property
    def explanation(self) -> str:
        """The resume choice's explanation, saying whose permissions the tree was read with."""
        return f"{self.choice.explanation} (checkpoint tree read {self.read_as})"


class CheckpointFinder(Protocol):
    """Finds a job's checkpoints and chooses where it resumes (as its owner in a child, or in process)."""
    async def find(self, request: FinderRequest) -> Finding:
        """Discovery and the resume choice for one job; failures are a Finding, never an exception
        (an unexpected one is a bug and propagates)."""
        ...


def request_for(config: CheckpointConfig, job: JobInfo, now: datetime,
                limits: ScanLimits | None = None) -> FinderRequest:
    """The discovery request for `job`: its checkpoint config, read with its owner's ids."""
    return FinderRequest(config=config, now=now, owner_uid=job.user_id, owner_gid=job.group_id,
                         owner_name=job.user, limits=limits or ScanLimits())


def in_process_reason(goodput_uid: int, owner_uid: int | None) -> str | None:
    """Why this discovery runs in-process rather than as the owner, or None when it should not."""
    if goodput_uid != 0:
        return f"in-process as goodput's own user (uid {goodput_uid}), which cannot switch users"
    if owner_uid is None:
        return "in-process as root: the scheduler did not say who owns the job"
    return None


def owner_label(request: FinderRequest) -> str:
    """`uid N (name)`: whose permissions a discovery ran with, for the Finding."""
    name = f" ({request.owner_name})" if request.owner_name else ""
    return f"uid {request.owner_uid}{name}"


class InProcessFinder:
    """Discovery in this process, through `filesystem` (the real one, confined and bounded)."""

    def __init__(self, filesystem: FileSystem | None = None, read_as: str = "in-process") -> None:
        self._filesystem = filesystem
        self._read_as = read_as

    def find_now(self, request: FinderRequest) -> Finding:
        """Discovery and the resume choice, blocking (called in a thread by `find`)."""
        filesystem = self._filesystem or LocalFileSystem(limits=request.limits)
        found, choice = find_resume_point(filesystem, request.config, request.now)
        return Finding(discovery=found, choice=choice, mode=ReadMode.IN_PROCESS, read_as=self._read_as)

    async def find(self, request: FinderRequest) -> Finding:
        """`find_now` in a worker thread."""
        return await asyncio.to_thread(self.find_now, request)


async def find_for_job(finder: CheckpointFinder, job: JobInfo, now: datetime,
                       limits: ScanLimits | None = None) -> tuple[Finding | None, str]:
    """The job's checkpoints where its comment names them (goodput:ckpt=<layout>:<root>), read by
    `finder`; else None and why not. The recovery's find-checkpoint step and `goodput advise
    --job` both ask this way, so they read the same tree with the same permissions."""
    try:
        config = config_from_comment(job.comment)
    except CheckpointCommentError as err:
        return None, f"checkpoint config in the job comment is invalid: {err}"
    if config is None:
        return None, ("the job names no checkpoints (goodput:ckpt=<layout>:<root>); "
                      "it resumes however it resumes on its own")
    finding = await finder.find(request_for(config, job, now, limits))
    return finding, finding.explanation
