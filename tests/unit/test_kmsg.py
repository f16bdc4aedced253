"""The kernel-log Xid parser on dmesg, kern.log and journal-export text."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from goodput.detect.gpu import GpuSample
from goodput.detect.gpu_rules import evaluate
from goodput.detect.kmsg import journal_realtime, parse_journal_export, parse_xid_line, parse_xid_lines
from goodput.models import Category

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kmsg"
NOW = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)


def _lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def test_dmesg_dump_yields_every_xid_and_nothing_else() -> None:
    events = parse_xid_lines(_lines("dmesg.txt"), node="gpu-node17", observed_at=NOW)
    assert [(e.code, e.pci_bus_id) for e in events] == [
        (79, "0000:3b:00.0"), (13, "0000:18:00.0"), (48, "0000:9a:00.0"), (94, "0000:9a:00.0"),
        (62, "0000:5d:00.0")]
    fell_off = events[0]
    assert fell_off.pid == 2213901 and fell_off.process == "python"
    assert fell_off.message == "GPU has fallen off the bus."
    assert fell_off.node == "gpu-node17" and fell_off.observed_at == NOW and fell_off.source == "kmsg"
    assert events[1].message.startswith("Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)")


def test_unknown_pid_and_name_become_none() -> None:
    dbe = parse_xid_lines(_lines("dmesg.txt"))[2]
    assert dbe.pid is None and dbe.process is None
    assert "double bit error" in dbe.message


def test_kern_log_takes_host_and_iso_time_from_the_prefix() -> None:
    events = parse_xid_lines(_lines("kern.log"), node="fallback")
    assert [(e.code, e.node) for e in events] == [(79, "gpu-node17"), (119, "gpu-node18"),
                                                   (120, "gpu-node18")]
    assert events[0].observed_at is None  # classic syslog has no year: no guessing
    assert events[1].observed_at == datetime(2026, 11, 29, 9, 14, 7, 511203, tzinfo=UTC)
    assert events[2].observed_at == datetime(2026, 11, 29, 9, 14, 9, tzinfo=UTC)
    assert events[2].pid is None and events[2].message == "GSP task exception"


def test_journal_export_records() -> None:
    events = parse_journal_export(_lines("journal-export.txt"))
    assert [(e.code, e.node) for e in events] == [(79, "gpu-node17"), (154, "gpu-node17")]
    assert events[0].observed_at == datetime(2026, 11, 28, 10, 12, 1, 302125, tzinfo=UTC)
    assert "Node Reboot Required" in events[1].message


@pytest.mark.parametrize("line", [
    "4,1234,84211302125,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
    "[Sun Nov 29 09:12:01 2026] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:3B:00): 79, pid=1, GPU has fallen off the bus.\r\n",
])
def test_kmsg_and_dmesg_t_formats(line: str) -> None:
    event = parse_xid_line(line)
    assert event is not None and event.code == 79 and event.pci_bus_id == "0000:3b:00.0"
    assert event.message == "GPU has fallen off the bus."


@pytest.mark.parametrize("line", ["", "NVRM: GPU at PCI:0000:3b:00: GPU-5c8e", "Xid 79 happened",
                                  "NVRM: Xid (PCI:0000:3b:00): seventy-nine", "\x00\xff garbage"])
def test_non_xid_lines_are_ignored(line: str) -> None:
    assert parse_xid_line(line) is None


def test_kernel_xid_is_matched_to_the_nvml_sample_by_pci_id() -> None:
    sample = GpuSample(index=3, uuid="GPU-5c8e", pci_bus_id="0000:3b:00.0", node="gpu-node17")
    events = parse_xid_lines(_lines("kern.log"))[:1]
    [finding] = evaluate([sample], xid_events=events)
    assert finding.category is Category.GPU_HARDWARE and finding.uuid == "GPU-5c8e"
    assert finding.gpu_index == 3 and "Xid 79" in finding.evidence[0]


HUGE = "9" * 5000


@pytest.mark.parametrize(("line", "code", "pid"), [
    (f"NVRM: Xid (PCI:0000:3b:00): {HUGE}, pid=1, GPU has fallen off the bus.", None, None),
    (f"NVRM: Xid (PCI:0000:3b:00): 79, pid={HUGE}, name=python, GPU has fallen off the bus.", 79, None),
    ("NVRM: Xid (PCI:0000:3b:00): 1234567, pid=12345678901, x", None, None),
    ("NVRM: Xid (PCI:0000:3b:00): 999999, pid=1234567890, x", 999999, 1234567890),
])
def test_numbers_are_bounded_before_conversion(line: str, code: int | None, pid: int | None) -> None:
    """Before: int() of a 5000-digit code or pid raised ValueError out of the parser."""
    event = parse_xid_line(line)
    assert (event.code if event else None) == code
    if event is not None:
        assert event.pid == pid


def test_a_huge_journal_timestamp_is_no_timestamp() -> None:
    record = ["__REALTIME_TIMESTAMP=" + HUGE, "_HOSTNAME=gpu-node17",
              "MESSAGE=NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", ""]
    [event] = parse_journal_export(record)
    assert event.observed_at is None and event.code == 79
    assert journal_realtime("99999999999999999") is not None  # 17 digits: the year 5138, still a date
    assert journal_realtime("-1") is None and journal_realtime("1e9") is None


def test_long_lines_and_fields_are_clipped() -> None:
    line = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=" + "p" * 5000 + ", " + "m" * 200_000
    event = parse_xid_line(line)
    assert event is not None and event.process is not None
    assert len(event.process) <= 256 and len(event.message) <= 1024
    assert parse_xid_line("NVRM: Xid (PCI:" + "0" * 100 + "): 79, x") is None
    odd_prefix = parse_xid_line("2026-11-29T09:12:01.1234567890123 " + "h" * 300 + " kernel: NVRM: Xid "
                                "(PCI:0000:3b:00): 79, x", node="n1")
    assert odd_prefix is not None and odd_prefix.node == "n1"  # neither stamp nor host is believed
