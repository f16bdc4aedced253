"""Hostile comments and account entries: resubmission's parsers never raise, never mistake a claim.

A job's comment is its owner's text, and goodput reads every job's comment when it looks for its
own resubmitted copy; `getent passwd` output comes from the login node over SSH. Comments are
built from real tags (goodput's, forged, truncated, repeated thousands of times) mixed with the
opt-in marker, checkpoint configs and raw noise; passwd lines from a real entry with fields
swapped for huge numbers, colons and junk.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.scheduler import JobInfo, JobState
from goodput.slurm.resubmit import (
    MAX_TAGS,
    RESUBMIT_TAG,
    ResubmitKey,
    is_copy_of,
    resubmit_tag,
    resubmit_tags,
    tag_comment,
)
from goodput.slurm.submit_as import OwnerError, parse_passwd_entry, parse_uid, validate_user_name
from tests.fuzz.harness import rejects_cleanly
from tests.fuzz.log_strategies import numbers

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

KEY = ResubmitKey(b"fuzz-resubmit-key-0123", "c1")
ORIGINAL = JobInfo(job_id="8", state=JobState.RUNNING, user="alice", user_id=1001, group_id=1001)
TOKEN = KEY.token("8", "inc-1")

job_ids = st.one_of(st.just("8"), numbers.map(str), st.text(alphabet="0123456789_+:", max_size=12))
tokens = st.one_of(st.just(TOKEN), st.just(TOKEN[:-1]), st.just(TOKEN.upper()), st.text(max_size=40),
                   st.text(alphabet="0123456789abcdef", min_size=31, max_size=33))
words = st.one_of(
    st.builds(resubmit_tag, job_ids, tokens),
    st.builds(lambda j: f"{RESUBMIT_TAG}{j}", job_ids),
    st.sampled_from(["goodput:opt-in", "goodput:ckpt=dcp:/ckpt", RESUBMIT_TAG, f"{RESUBMIT_TAG}8:", ":", "=" * 3]),
    st.text(max_size=30),
)
separators = st.sampled_from([" ", "  ", "\t", "\n", "\u00a0", "\u2028", "", "\x00"])
comments = st.one_of(
    st.lists(st.tuples(separators, words), max_size=40).map(lambda parts: "".join(s + w for s, w in parts)),
    st.builds(lambda word, n: " ".join([word] * n), words, st.integers(0, 5_000)),
    st.text(max_size=2_000),
)


@given(comments, st.one_of(st.none(), st.integers(0, 2**32 - 1)))
def test_comment_tags(comment: str, uid: int | None) -> None:
    candidate = JobInfo(job_id="20", state=JobState.PENDING, user="x", user_id=uid, comment=comment)
    tags = rejects_cleanly("resubmit-comment-tags", lambda: resubmit_tags(comment), ())
    assert tags is not None and len(tags) <= MAX_TAGS
    matched = rejects_cleanly("resubmit-is-copy", lambda: is_copy_of(candidate, ORIGINAL, TOKEN), ())
    # only the original's owner with this very token is ever the copy
    assert not matched or (uid == 1001 and ("8", TOKEN) in tags)
    tagged = rejects_cleanly("resubmit-tag-comment", lambda: tag_comment(comment, "8", TOKEN), ())
    # goodput's own tag is found in its copy's comment however long or hostile the original's was
    assert tagged is not None and resubmit_tags(tagged) == [("8", TOKEN)]


passwd_fields = st.one_of(numbers.map(str), st.text(max_size=20), st.just(""), st.just("1001"))
passwd_lines = st.one_of(
    st.just("alice:x:1001:1001:Alice,,,:/home/alice:/bin/bash\n"),
    st.lists(passwd_fields, min_size=0, max_size=10).map(":".join),
    st.builds(lambda uid, gid, rest: f"alice:x:{uid}:{gid}:{rest}", passwd_fields, passwd_fields, st.text(max_size=60)),
    st.text(max_size=500),
)


@given(passwd_lines, st.sampled_from(["alice", "root", "", "-u"]))
def test_passwd_entries(text: str, name: str) -> None:
    account = rejects_cleanly("getent-passwd-entry", lambda: parse_passwd_entry(text, name), ())
    if account is not None:
        assert account.name == name and 0 <= account.uid <= 2**32 - 1 and 0 <= account.gid <= 2**32 - 1
    uid = rejects_cleanly("id-u-output", lambda: parse_uid(text), ())
    assert uid is None or 0 <= uid <= 2**32 - 1
    rejects_cleanly("owner-name", lambda: validate_user_name(text), (OwnerError,))
