"""goodput.detect.kernel_origin: which kernel-log records are the kernel's (issue #26)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from goodput.detect.kernel_origin import (
    KernelLogRefusedError,
    KernelReader,
    Origin,
    check_kernel_log,
    survey_lines,
    text_origin,
)

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
NOW = datetime(2026, 11, 29, 9, 12, tzinfo=UTC)


@pytest.mark.parametrize(("line", "origin"), [
    (f"6,1234,8812221004,-;{XID}", Origin.KERNEL),  # /dev/kmsg, facility 0
    (f"14,1235,8812221005,-;{XID}", Origin.OTHER),  # written to /dev/kmsg from user space: facility 1
    (f"<3>[ 8812.221] {XID}", Origin.KERNEL),  # dmesg -r
    (f"<11>[ 8812.221] {XID}", Origin.OTHER),
    (f"[ 8812.221004] {XID}", Origin.KERNEL),
    (f"[Sun Nov 29 09:12:01 2026] {XID}", Origin.KERNEL),  # dmesg -T
    (f"Nov 29 09:12:01 node1 kernel: [ 8812.221004] {XID}", Origin.TAGGED_KERNEL),
    (f"Nov 29 09:12:01 node1 goodput-mallory[4242]: {XID}", Origin.OTHER),
    (f"2026-11-29T09:12:01.1+00:00 node1 goodput-mallory: {XID}", Origin.OTHER),
    (XID, Origin.UNKNOWN),
])
def test_origin_of_a_line(line: str, origin: Origin) -> None:
    assert text_origin(line)[0] is origin


def test_a_kernel_message_quoting_user_text_is_not_an_xid() -> None:
    reader = KernelReader("node1")
    assert reader.feed(f"[ 99.1] audit: type=1400 comm=\"{XID}\"", NOW) is None
    assert reader.feed(f"Nov 29 09:12:01 node1 kernel: Out of memory: Killed process 7 ({XID})", NOW) is None
    assert reader.untrusted == 2
    assert reader.feed(f"[ 99.2] {XID}", NOW) is not None


def test_a_mixed_file_stops_believing_its_kernel_tag_unless_accepted() -> None:
    for accept, believed in ((False, False), (True, True)):
        reader = KernelReader("node1", accept_mixed=accept)
        assert reader.feed(f"Nov 29 09:12:01 node1 kernel: {XID}", NOW) is not None  # nothing else seen yet
        reader.feed("Nov 29 09:12:02 node1 CRON[99]: (root) CMD (true)", NOW)
        assert reader.mixed
        assert (reader.feed(f"Nov 29 09:12:03 node1 kernel: {XID}", NOW) is not None) is believed


def test_export_records_are_judged_whole_and_bounded() -> None:
    reader = KernelReader("node1")
    lines = [f"MESSAGE={XID}", *(f"FIELD_{i}=x" for i in range(300)), "_TRANSPORT=kernel", ""]
    # past 256 fields the rest of a record is not read: a flood cannot smuggle a late _TRANSPORT in
    assert [e for line in lines if (e := reader.feed(line, NOW))] == []
    assert [e for line in (f"MESSAGE={XID}", "_TRANSPORT=kernel", "") if (e := reader.feed(line, NOW))]


def test_the_survey_and_the_start_check(tmp_path: Path) -> None:
    survey = survey_lines(tmp_path / "x", [f"Nov 29 09:12:01 node1 kernel: {XID}", "Nov 29 09:12:02 node1 sshd[1]: x"])
    assert survey.mixed and survey.other_tags == ("sshd",) and survey.tagged_lines == 1
    with pytest.raises(KernelLogRefusedError, match="every syslog facility"):
        check_kernel_log(Path("/var/log/messages"), accept_mixed=False)
    fifo = tmp_path / "fifo"
    __import__("os").mkfifo(fifo)
    with pytest.raises(KernelLogRefusedError, match="not a regular file"):
        check_kernel_log(fifo, accept_mixed=False)
