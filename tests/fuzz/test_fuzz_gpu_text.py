"""Hostile kernel logs and DCGM-exporter pages: the Xid parser never raises, DCGM only `ExpositionError`.

Any process can get text into a journal or a syslog file the agent tails, and DCGM label values
carry job-chosen text (`hpc_job`, the Xid's `err_msg`). Examples start from the fixtures under
tests/fixtures/kmsg and tests/fixtures/dcgm, with numbers swapped for huge or malformed ones,
fields repeated or clipped, and raw noise in between.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.detect.dcgm import ExpositionError, parse_dcgm_metrics
from goodput.detect.kmsg import journal_realtime, parse_journal_export, parse_xid_lines
from tests.fuzz.harness import rejects_cleanly
from tests.fuzz.log_strategies import FIXTURES, log_lines, mutated_line, numbers

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

KMSG_LINES = [line for name in ("dmesg.txt", "kern.log") for line in
              (FIXTURES / "kmsg" / name).read_text(encoding="utf-8").splitlines() if line]
EXPORT_KEYS = ["__CURSOR", "__REALTIME_TIMESTAMP", "_HOSTNAME", "_TRANSPORT", "PRIORITY", "MESSAGE", ""]
DCGM_LINES = (FIXTURES / "dcgm" / "gpu-node17.metrics").read_text(encoding="utf-8").splitlines()
_NUMBER = re.compile(r"(?<![A-Za-z_])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_LABEL_VALUE = re.compile(r'"[^"]*"')

xid_lines = st.one_of(
    st.sampled_from(KMSG_LINES),
    mutated_line(),
    st.builds(lambda code, pid, tail: f"NVRM: Xid (PCI:0000:3b:00): {code}, pid={pid}, name=python, {tail}",
              numbers, numbers, st.text(max_size=40)),
    log_lines,
)
export_fields = st.tuples(st.sampled_from(EXPORT_KEYS), st.one_of(numbers, xid_lines, st.text(max_size=30)))
export_text = st.lists(st.one_of(
    export_fields.map(lambda kv: f"{kv[0]}={kv[1]}" if kv[0] else ""),
    st.text(max_size=20),
), max_size=30)


@given(st.lists(xid_lines, max_size=20), st.one_of(st.none(), st.text(max_size=20)))
def test_kernel_log_lines(lines: list[str], node: str | None) -> None:
    events = rejects_cleanly("kmsg-lines", lambda: parse_xid_lines(lines, node=node), ())
    assert events is not None
    for event in events:
        assert 0 <= event.code < 10**6 and (event.pid is None or 0 <= event.pid < 10**10)
        assert len(event.message) <= 1024 and (event.process is None or len(event.process) <= 256)


@given(export_text)
def test_journal_export(lines: list[str]) -> None:
    events = rejects_cleanly("kmsg-journal-export", lambda: parse_journal_export(lines), ())
    assert events is not None
    for line in lines:
        stamp = rejects_cleanly("kmsg-realtime", lambda line=line: journal_realtime(line.partition("=")[2]), ())
        assert stamp is None or stamp.year < 5200


@st.composite
def dcgm_page(draw: st.DrawFn) -> str:
    lines = draw(st.lists(st.sampled_from(DCGM_LINES), min_size=1, max_size=12))
    out = []
    for line in lines:
        op = draw(st.sampled_from(["keep", "number", "label", "noise", "cut", "stamp"]))
        if op == "number" and (found := list(_NUMBER.finditer(line))):
            m = draw(st.sampled_from(found))
            line = line[:m.start()] + draw(numbers) + line[m.end():]
        elif op == "label" and (found := list(_LABEL_VALUE.finditer(line))):
            m = draw(st.sampled_from(found))
            value = draw(st.one_of(numbers, st.text(max_size=30), st.just("x" * 5000)))
            line = line[:m.start()] + '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' + line[m.end():]
        elif op == "noise":
            at = draw(st.integers(0, len(line)))
            line = line[:at] + draw(st.text(max_size=10)) + line[at:]
        elif op == "cut":
            line = line[:draw(st.integers(0, len(line)))]
        elif op == "stamp":
            line += " " + draw(numbers)
        out.append(line)
    return "\n".join(out)


@given(st.one_of(dcgm_page(), st.text(max_size=300)), st.one_of(st.none(), st.text(max_size=20)))
def test_dcgm_exposition(text: str, node: str | None) -> None:
    samples = rejects_cleanly("dcgm-exposition", lambda: parse_dcgm_metrics(text, node=node), (ExpositionError,))
    for sample in samples or ():
        assert sample.index is None or 0 <= sample.index < 10**6
        assert sample.last_xid is None or 0 <= sample.last_xid <= 100_000
        for value in (sample.ecc_volatile_uncorrected, sample.ecc_aggregate_corrected, sample.retired_pages_dbe):
            assert value is None or 0 <= value <= 2**53
        for value in (sample.power_w, sample.temperature_c, sample.utilisation_pct):
            assert value is None or math.isfinite(value)


forged_prefixes = st.sampled_from(["Nov 29 09:12:01 node1 goodput-mallory[4242]: ", "Nov 29 09:12:01 node1 kernel: ",
                                   "2026-11-29T09:12:01+00:00 node1 user: ", "[ 12.5] ", "6,1,2,-;", "14,1,2,-;",
                                   "<3>", "<11>", "MESSAGE=", "_TRANSPORT=", "_TRANSPORT=kernel", ""])
origin_lines = st.lists(st.one_of(
    st.tuples(forged_prefixes, xid_lines).map("".join),
    export_fields.map(lambda kv: f"{kv[0]}={kv[1]}" if kv[0] else ""),
    log_lines,
), max_size=30)


@given(origin_lines, st.booleans())
def test_kernel_origin_reader(lines: list[str], accept_mixed: bool) -> None:
    """Issue #26: the agent's reader and survey never raise on hostile lines, and an Xid is believed
    only from a kernel-origin record: never from a line whose syslog tag or kmsg facility is another's."""
    from datetime import UTC, datetime

    from goodput.detect.kernel_origin import KernelReader, Origin, survey_lines, text_origin

    reader = KernelReader("node1", accept_mixed=accept_mixed)
    now = datetime.now(UTC)

    def feed_all() -> list[tuple[str, bool]]:
        return [(line, reader.feed(line, now) is not None) for line in [*lines, ""]]

    fed = rejects_cleanly("kernel-origin-reader", feed_all, ())
    assert fed is not None
    for line, believed in fed:
        if believed and "=" not in line.partition(" ")[0] and line:
            assert text_origin(line)[0] in (Origin.KERNEL, Origin.TAGGED_KERNEL), line
    survey = rejects_cleanly("kernel-origin-survey", lambda: survey_lines(Path("/tmp/k.log"), lines), ())
    assert survey is not None and survey.other_lines <= len(lines)
