"""Slurm's error text -> retryable or permanent, from stderr recorded in the lab."""

from pathlib import Path

import pytest

from goodput.scheduler import (
    PermanentSchedulerError,
    TransientSchedulerError,
    UnknownJobError,
    UnknownNodeError,
)
from goodput.slurm.errors import AmbiguousRecordError, SlurmRecordError, classify, is_pending_execution

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def lines(name: str) -> list[str]:
    return [line for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("line", lines("errors-controller-down-22.05.txt"))
def test_controller_down_is_transient(line: str) -> None:
    assert isinstance(classify(["scontrol", "x"], 1, "", line), TransientSchedulerError)


@pytest.mark.parametrize("line", lines("errors-unknown-job-22.05.txt"))
def test_unknown_job(line: str) -> None:
    assert isinstance(classify(["scontrol", "show"], 1, "", line), UnknownJobError)


@pytest.mark.parametrize("line", lines("errors-unknown-node-22.05.txt"))
def test_unknown_node(line: str) -> None:
    assert isinstance(classify(["scontrol", "show"], 1, line, ""), UnknownNodeError)


def test_requeue_disabled_is_permanent_not_unknown() -> None:
    error = classify(["scontrol", "requeue"], 1, "", lines("errors-requeue-disabled-22.05.txt")[0])
    assert type(error) is PermanentSchedulerError
    assert "presently disabled" in str(error)


@pytest.mark.parametrize("text", ["Socket timed out on send/recv operation",
                                  "sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying",
                                  "slurm_load_jobs error: Connection refused",
                                  "Zero Bytes were transmitted or received"])
def test_other_transient_phrases(text: str) -> None:
    assert isinstance(classify(["squeue"], 1, "", text), TransientSchedulerError)


def test_pending_execution() -> None:
    assert is_pending_execution(lines("errors-pending-execution-22.05.txt")[0])
    assert not is_pending_execution("Invalid job id specified")


def test_message_is_bounded_and_names_the_command() -> None:
    error = classify(["scontrol", "requeue", "1"], 1, "", "x" * 10_000)
    assert str(error).startswith("scontrol requeue: ")
    assert len(str(error)) < 600


def test_huge_error_text_is_looked_at_only_in_its_head() -> None:
    noise = "x " * 5_000_000 + "Invalid job id specified"
    error = classify(["scontrol", "show"], 1, noise, noise)
    assert type(error) is PermanentSchedulerError  # the phrase lies beyond what is read
    assert len(str(error)) < 600
    assert not is_pending_execution(noise + "job is pending execution")


def test_record_errors_are_permanent_scheduler_errors() -> None:
    assert issubclass(AmbiguousRecordError, SlurmRecordError)
    assert issubclass(SlurmRecordError, PermanentSchedulerError)


def test_a_command_without_an_exit_status_is_retried_not_judged() -> None:
    """Killed by a signal (a negative status), or cut off over SSH (no status at all): the
    command may have run, so only an idempotent retry can tell; it is never a permanent error."""
    for status in (-1, -9):
        error = classify(["scontrol", "requeuehold", "1001"], status, "", "")
        assert isinstance(error, TransientSchedulerError) and "may or may not have run" in str(error)
    noisy = classify(["scontrol", "requeue", "13"], -1, "", "Job is pending execution for job 13" * 50)
    assert isinstance(noisy, TransientSchedulerError) and len(str(noisy)) < 600  # bounded, as every error text
