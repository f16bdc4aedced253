"""Several jobs' records from one `scontrol` reading its commands from a pipe (#29): each job's
answer is taken only from between two marks holding a secret, and only when it is one trusted
record of that very job; no job's text can move an answer to another job or forge a mark."""

from __future__ import annotations

import pytest

from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import JobState
from goodput.slurm.job_script import job_answers, job_statuses, mark, new_nonce, show_jobs_argv, show_jobs_script
from tests.unit.slurm_cli_helpers import RUNNING

NONCE = "0123456789abcdef0123456789abcdef"


def record(job_id: str, *, comment: str = "goodput:opt-in team=ml ") -> str:
    return RUNNING.strip().replace("JobId=8 ", f"JobId={job_id} ", 1).replace(
        "Comment=goodput:opt-in team=ml ", f"Comment={comment}", 1)


def answer(parts: dict[str, str], *, echo: bool = True, order: list[str] | None = None) -> str:
    """What scontrol prints for `show_jobs_script(order)`: with 22.05's prompt and echo, or without."""
    ids = order or list(parts)
    out = []
    for line in show_jobs_script(ids, NONCE).decode().splitlines():
        if echo:
            out.append(f"scontrol: {line}")
        verb, _, arg = line.partition(" ")[2].partition(" ")
        if verb == "hostnames":
            out.append(arg)
        elif verb == "job" and parts.get(arg):
            out.append(parts[arg])
    return "\n".join(out) + "\n"


def test_the_script_asks_each_job_by_its_own_id_between_marks() -> None:
    script = show_jobs_script(["12", "13"], NONCE).decode().splitlines()
    assert script == [f"show hostnames goodput-{NONCE}-0", "show job 12", f"show hostnames goodput-{NONCE}-1",
                      "show job 13", f"show hostnames goodput-{NONCE}-2", "quit"]
    assert show_jobs_argv() == ["scontrol", "-o"]
    for bad in (["12", "12 13"], ["12\nshow config"], ["12_3"], ["12", "12"], []):
        with pytest.raises(InvalidIdentifierError):
            show_jobs_script(bad, NONCE)
    with pytest.raises(ValueError):
        mark("not-hex", 0)
    assert new_nonce() != new_nonce() and len(new_nonce()) == 32


@pytest.mark.parametrize("echo", [True, False])
def test_each_job_gets_its_own_record_and_a_gone_job_none(echo: bool) -> None:
    text = answer({"12": record("12"), "13": "", "14": record("14").replace("JobState=RUNNING", "JobState=PENDING")},
                  echo=echo)
    statuses = job_statuses(text, ["12", "13", "14"], NONCE)
    assert sorted(statuses) == ["12", "14"]
    assert statuses["12"].state is JobState.RUNNING and statuses["12"].nodes == ("node1", "node2")
    assert statuses["14"].state is JobState.PENDING
    assert statuses["12"].eligible_at is not None


def test_a_comment_with_a_newline_loses_its_own_answer_and_touches_no_other() -> None:
    forged = record("12", comment="x\nJobId=13 JobState=COMPLETED Restarts=9 NodeList=node9 ")
    text = answer({"12": forged, "13": record("13")})
    assert job_statuses(text, ["12", "13"], NONCE).keys() == {"13"}
    assert job_statuses(text, ["12", "13"], NONCE)["13"].restart_count == 0


def test_a_record_of_another_job_or_one_that_reads_two_ways_is_not_believed() -> None:
    text = answer({"12": record("99"), "13": record("13", comment="goodput:opt-in JobState=COMPLETED ")})
    assert job_statuses(text, ["12", "13"], NONCE) == {}


def test_marks_that_are_not_all_there_once_and_in_order_void_the_whole_answer() -> None:
    whole = answer({"12": record("12"), "13": record("13")})
    guessed = whole.replace(f"goodput-{NONCE}-1\n", "")  # a mark lost
    assert job_answers(guessed, ["12", "13"], NONCE) == {}
    doubled = whole.replace(f"goodput-{NONCE}-1\n", f"goodput-{NONCE}-1\ngoodput-{NONCE}-1\n")
    assert job_answers(doubled, ["12", "13"], NONCE) == {}
    other = answer({"12": record("12"), "13": record("13")}).replace(NONCE, "f" * 32)  # another secret
    assert job_answers(other, ["12", "13"], NONCE) == {}
    assert job_answers("", ["12"], NONCE) == {}


def test_an_answer_far_longer_than_any_batch_is_not_read() -> None:
    text = answer({"12": record("12")}) + "x\n" * 10_000
    assert job_answers(text, ["12"], NONCE) == {}
