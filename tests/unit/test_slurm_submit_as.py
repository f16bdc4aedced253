"""Who a resubmission runs as, with what environment, and which job counts as goodput's copy.

Pure rules (goodput.slurm.submit_as, goodput.slurm.resubmit), shared by every backend.
"""

import pytest

from goodput.scheduler import JobInfo, JobState
from goodput.slurm.resubmit import (
    MAX_TAGS,
    ResubmitKey,
    find_copy,
    is_copy_of,
    resubmit_tag,
    resubmit_tags,
)
from goodput.slurm.submit_as import (
    Account,
    BecomeMode,
    OwnerError,
    become_argv,
    check_account,
    job_owner,
    parse_passwd_entry,
    parse_uid,
    submission_environment,
    validate_user_name,
)

KEY = ResubmitKey(b"k" * 32, "c1")
ALICE = Account(name="goodput-alice", uid=1001, gid=1001, home="/home/alice", shell="/bin/bash")


def job(job_id: str = "8", *, user: str = "goodput-alice", uid: int | None = 1001, comment: str = "",
        state: JobState = JobState.RUNNING) -> JobInfo:
    return JobInfo(job_id=job_id, state=state, user=user, user_id=uid, group_id=uid, comment=comment)


# -- tokens and copies ----------------------------------------------------------------------------


def test_tokens_bind_key_cluster_job_and_incident() -> None:
    token = KEY.token("8", "inc-1")
    assert token == KEY.token("8", "inc-1") and len(token) == 32
    others = {ResubmitKey(b"k" * 32, "c2").token("8", "inc-1"), ResubmitKey(b"j" * 32, "c1").token("8", "inc-1"),
              KEY.token("9", "inc-1"), KEY.token("8", "inc-2"), KEY.token("8")}
    assert token not in others and len(others) == 5


def test_the_key_never_shows_and_must_be_long_enough() -> None:
    assert "kkkk" not in repr(KEY) and "hidden" in repr(KEY)
    with pytest.raises(ValueError, match="at least 16 bytes"):
        ResubmitKey(b"short")
    assert ResubmitKey.ephemeral().token("8") != ResubmitKey.ephemeral().token("8")


def test_only_the_owners_job_with_the_token_is_the_copy() -> None:
    original = job("8")
    token = KEY.token("8", "inc-1")
    tag = resubmit_tag("8", token)
    assert is_copy_of(job("20", comment=f"goodput:opt-in {tag}"), original, token)
    # attack: mallory's job claims to be alice's copy, with the real token copied from a comment
    assert not is_copy_of(job("21", user="goodput-mallory", uid=1002, comment=tag), original, token)
    # attack: alice's other job claims with a forged or another job's token
    assert not is_copy_of(job("22", comment=resubmit_tag("8", "0" * 32)), original, token)
    assert not is_copy_of(job("23", comment=resubmit_tag("9", token)), original, token)
    assert not is_copy_of(job("24", comment="goodput:resubmit-of=8"), original, token)
    # an owner Slurm did not report matches nothing, and the original is never its own copy
    assert not is_copy_of(job("25", uid=None, comment=tag), job("8", uid=None), token)
    assert not is_copy_of(job("8", comment=tag), original, token)
    assert not is_copy_of(job("26", comment=tag), original, "")


def test_find_copy_ignores_finished_copies() -> None:
    token = KEY.token("8")
    done = job("20", comment=resubmit_tag("8", token), state=JobState.FAILED)
    live = job("21", comment=resubmit_tag("8", token), state=JobState.PENDING)
    assert find_copy([done], job("8"), token) is None
    assert find_copy([done, live], job("8"), token) == live


def test_tag_parsing_is_bounded() -> None:
    many = " ".join(resubmit_tag(str(i), "t") for i in range(1000))
    assert len(resubmit_tags(many)) == MAX_TAGS
    assert resubmit_tags("goodput:resubmit-of= goodput:resubmit-of=5: goodput:resubmit-of=:t x") == []
    assert resubmit_tags(" " * 100_000 + resubmit_tag("8", "t")) == []  # beyond the scanned prefix


# -- the owner ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "-u", "--", "root;id", "a b", "1001", "x" * 65, "al\nice", "$(id)", "é"])
def test_hostile_or_odd_owner_names_are_refused(name: str) -> None:
    with pytest.raises(OwnerError):
        validate_user_name(name)


@pytest.mark.parametrize("name", ["alice", "goodput-alice", "a.b", "svc_train", "alice@example.org", "_x"])
def test_ordinary_owner_names_pass(name: str) -> None:
    assert validate_user_name(name) == name


def test_an_unknown_owner_is_refused() -> None:
    with pytest.raises(OwnerError, match="unknown"):
        job_owner(job(user="", uid=1001))
    with pytest.raises(OwnerError, match="unknown"):
        job_owner(job(uid=None))


def test_the_hosts_account_must_match_slurms_record() -> None:
    assert check_account(job(), ALICE) == ALICE
    with pytest.raises(OwnerError, match="no account"):
        check_account(job(), None)
    with pytest.raises(OwnerError, match="uid 1005"):
        check_account(job(), ALICE.model_copy(update={"uid": 1005}))


def test_how_goodput_becomes_the_owner() -> None:
    assert become_argv(BecomeMode.AUTO, 1001, ALICE) == []  # goodput is the owner
    assert become_argv(BecomeMode.AUTO, 0, ALICE) == ["runuser", "-u", "goodput-alice", "--"]
    assert become_argv(BecomeMode.RUNUSER, 0, ALICE) == ["runuser", "-u", "goodput-alice", "--"]
    assert become_argv(BecomeMode.SUDO, 500, ALICE) == ["sudo", "-n", "-u", "goodput-alice", "--"]
    assert become_argv(BecomeMode.SUDO, 0, ALICE) == ["sudo", "-n", "-u", "goodput-alice", "--"]
    # neither root nor the owner, no sudo: refuse; never submit as goodput itself
    for mode in (BecomeMode.AUTO, BecomeMode.RUNUSER):
        with pytest.raises(OwnerError, match="cannot submit as goodput-alice"):
            become_argv(mode, 500, ALICE)


def test_the_copy_gets_the_owners_identity_and_the_resume_values_only() -> None:
    env = submission_environment(ALICE, resume={"GOODPUT_RESUME_FROM": "/ck/100", "GOODPUT_RESUME_STEP": "100"},
                                 path="/usr/bin:/bin",
                                 carried={"SLURM_CONF": "/etc/slurm.conf", "GOODPUT_PUSH_TOKEN": "s3cret",
                                          "LD_PRELOAD": "/tmp/x.so"})
    assert env == {"HOME": "/home/alice", "USER": "goodput-alice", "LOGNAME": "goodput-alice",
                   "SHELL": "/bin/bash", "PATH": "/usr/bin:/bin", "SLURM_CONF": "/etc/slurm.conf",
                   "GOODPUT_RESUME_FROM": "/ck/100", "GOODPUT_RESUME_STEP": "100"}


@pytest.mark.parametrize("resume", [{"PATH": "/tmp"}, {"HOME": "/"}, {"LD_PRELOAD": "x"}, {"SLURM_CONF": "x"},
                                    {"GOODPUT-X": "1"}, {"GOODPUT_X": "a\nb"}, {"GOODPUT_X": "x" * 5000}])
def test_resume_values_cannot_reach_beyond_goodput_variables(resume: dict[str, str]) -> None:
    with pytest.raises(OwnerError):
        submission_environment(ALICE, resume=resume)


def test_passwd_and_uid_parsing() -> None:
    line = "goodput-alice:x:1001:1001:Alice,,,:/home/alice:/bin/bash\n"
    assert parse_passwd_entry(line, "goodput-alice") == ALICE
    assert parse_passwd_entry(line, "goodput-mallory") is None
    for bad in ("", "goodput-alice:x:1001:1001:/home/alice:/bin/bash", "goodput-alice:x:" + "9" * 30 + ":1:g:/h:/s",
                "goodput-alice:x:-1:1:g:/h:/s", "goodput-alice:x:99999999999:1:g:/h:/s"):
        assert parse_passwd_entry(bad, "goodput-alice") is None
    assert parse_uid("0\n") == 0 and parse_uid("1001") == 1001
    assert parse_uid("") is None and parse_uid("root") is None and parse_uid("9" * 11) is None
