"""A log's own line prefix, inferred from its repetition: a host named in a layout no rule knows.

Wrappers put the printing host first on every line in forms no launcher documents (`gpu7: `,
`[node-a12] `, `[10.0.3.17] `). A name that starts many lines of a chunk and has a machine's shape
is the log's prefix, so the line that holds a fault names its host. Generated layouts: random host
spellings, both prefix forms, several hosts interleaved; and tokens that repeat but are no host
(`INFO`, `RuntimeError`, `rank3`, `worker`) or a host-shaped name seen too rarely to be a prefix.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from goodput.diagnose.classify import classify_lines
from goodput.diagnose.signatures.hostshape import host_shaped
from goodput.diagnose.signatures.prefixes import MAX_PREFIX_CANDIDATES, MIN_PREFIX_REPEATS, RepeatedPrefix
from goodput.models import Category

FAULT = "NVRM: Xid (PCI:0000:1c:00): 79, pid=1234, GPU has fallen off the bus."
FORMS = ("{h}: ", "[{h}] ")
PROGRESS = ("step {i} loss 2.31 lr 3e-4", "throughput {i} samples/s", "saving shard {i}")

_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
_digits = st.integers(0, 99999).map(str)
hosts = st.one_of(
    st.builds(lambda w, d: w + d, _word, _digits),
    st.builds(lambda a, b, d: f"{a}-{b}{d}", _word, _word, _digits),
    st.builds(lambda a, d, b: f"{a}{d}.{b}", _word, _digits, _word),
    st.tuples(*[st.integers(1, 254)] * 4).map(lambda t: ".".join(map(str, t))),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(hosts, min_size=1, max_size=4, unique=True), st.sampled_from(FORMS), st.data())
def test_a_repeated_host_prefix_names_the_faulty_host(names: list[str], form: str, data: st.DataObject) -> None:
    for name in names:
        assume(host_shaped(name))
    culprit = data.draw(st.sampled_from(names))
    lines = [form.format(h=name) + PROGRESS[i % 3].format(i=i)
             for name in names for i in range(MIN_PREFIX_REPEATS)]
    lines = data.draw(st.permutations(lines))
    at = data.draw(st.integers(0, len(lines)))
    lines.insert(at, form.format(h=culprit) + FAULT)
    v = classify_lines(lines)
    assert v.category is Category.GPU_HARDWARE
    assert v.host == culprit, (lines, v.explanation)


@pytest.mark.parametrize("token", ["INFO", "RuntimeError", "rank3", "worker", "eth0", "llama-3-70b", "cuda-12.1"])
@pytest.mark.parametrize("form", FORMS)
def test_a_repeated_token_that_is_no_host_names_nobody(token: str, form: str) -> None:
    lines = [form.format(h=token) + f"step {i}" for i in range(5)] + [form.format(h=token) + FAULT]
    assert classify_lines(lines).host is None


@pytest.mark.parametrize("form", FORMS)
def test_a_host_shaped_name_seen_too_rarely_is_no_prefix(form: str) -> None:
    lines = ["step 1 loss 2.3", form.format(h="gpu7") + "hello", "step 2", form.format(h="gpu7") + FAULT]
    assert classify_lines(lines).host is None


def test_the_candidates_judged_per_chunk_are_bounded() -> None:
    chunk = b"".join(b"[gpu%d] x\n" % i for i in range(MAX_PREFIX_CANDIDATES + 10)) * 3
    layout = RepeatedPrefix(chunk)
    named = [layout.host(b"[gpu%d] y" % i, 0) for i in range(MAX_PREFIX_CANDIDATES + 10)]
    assert all(n is not None for n in named[:MAX_PREFIX_CANDIDATES])
    assert all(n is None for n in named[MAX_PREFIX_CANDIDATES:])
    assert named[0] == ("gpu0", len(b"[gpu0] "))
