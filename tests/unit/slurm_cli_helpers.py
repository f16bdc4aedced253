"""What the SlurmCliBackend tests share: recorded Slurm output and a runner that replays it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from activities.adapters.slurm_runner import CommandResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
RUNNING = (FIXTURES / "scontrol-job-running-22.05.txt").read_text()
HELD = (FIXTURES / "scontrol-job-held-22.05.txt").read_text()
PENDING = (FIXTURES / "scontrol-job-requeued-pending-22.05.txt").read_text()
NODE_LINES = (FIXTURES / "scontrol-nodes-all-22.05.txt").read_text().splitlines()


VERSION = ("scontrol", "--version")


def node_line(name: str) -> str:
    return next(line for line in NODE_LINES if line.startswith(f"NodeName={name} "))


class ScriptedRunner:
    """Answers argv prefixes with canned results and records every call."""

    def __init__(self, answers: dict[tuple[str, ...], list[CommandResult] | CommandResult]) -> None:
        self.answers = answers
        self.calls: list[tuple[tuple[str, ...], bytes | None]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        if tuple(argv) == VERSION and VERSION not in self.answers:
            return ok("slurm-wlm 22.05.8\n")  # the recorded release, unless a test says otherwise
        self.calls.append((tuple(argv), stdin))
        for prefix, answer in self.answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                if isinstance(answer, list):
                    return answer.pop(0) if len(answer) > 1 else answer[0]
                return answer
        raise AssertionError(f"unexpected command {argv}")

    def ran(self, *prefix: str) -> list[tuple[str, ...]]:
        return [argv for argv, _ in self.calls if argv[:len(prefix)] == prefix]


def ok(stdout: str = "", argv: Sequence[str] = ()) -> CommandResult:
    return CommandResult(argv=tuple(argv), returncode=0, stdout=stdout, stderr="")


def fail(stderr: str, argv: Sequence[str] = ("scontrol",)) -> CommandResult:
    return CommandResult(argv=tuple(argv), returncode=1, stdout="", stderr=stderr)


def listing(**jobs: dict[str, object]) -> str:
    """The recorded `squeue --json`, with some jobs' fields changed (job id -> fields)."""
    document = json.loads((FIXTURES / "squeue-22.05.json").read_text())
    for job in document["jobs"]:
        job.update(jobs.get(f"job{job['job_id']}", {}))
    return json.dumps(document)
