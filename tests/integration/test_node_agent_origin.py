"""Only kernel-origin records drain a node (issue #26): the agent against forged Xid lines.

On RHEL the kernel log is /var/log/messages, which every facility feeds; a journal export without
`-k` holds every unit's messages. Any local account's `logger 'NVRM: Xid ... 79 ...'` lands there,
looking like the driver's line. The forgeries below are what `logger` really writes: rsyslog's
classic and RFC 3339 lines with the user's tag, `logger -t kernel` in a mixed file, and a journal
record from the syslog socket that claims SYSLOG_IDENTIFIER=kernel.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from activities.adapters.node_agent import KernelLogRefusedError, run_agent
from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.detect.node_agent import AgentConfig
from tests.fakes.sink import RecordingSink
from tests.integration.test_node_agent import NODE, append, make_agent, running, until, xid_line

pytestmark = pytest.mark.timeout(30)
XID = "NVRM: Xid (PCI:0000:48:00): 79, pid=1234, name=python, GPU has fallen off the bus."
SSHD = f"Nov 29 09:11:58 {NODE} sshd[812]: Accepted publickey for goodput-mallory from 127.0.0.1 port 50412\n"


def _micros() -> int:
    return int(datetime.now(UTC).timestamp() * 1_000_000)


async def test_a_users_logger_line_in_a_mixed_syslog_file_is_not_an_xid(tmp_path: Path) -> None:
    """A file that looked kernel-only at start (empty: just rotated) shows it mixes facilities with
    its first other line, and from then on not even its `kernel:` lines are believed."""
    messages = tmp_path / "messages"
    messages.write_text("")
    sink = RecordingSink()
    async with running(make_agent(sink, kernel_log=messages)) as agent:
        append(messages, SSHD + f"Nov 29 09:12:01 {NODE} goodput-mallory[4242]: {XID}\n"
                         f"2026-11-29T09:12:01.123456+00:00 {NODE} goodput-mallory: {XID}\n"
                         f"Nov 29 09:12:02 {NODE} goodput-mallory: <3>{XID}\n")
        await until(lambda: agent.stats.kernel_untrusted >= 3, "the forged lines read")
        append(messages, xid_line(79))  # `logger -t kernel`: in a file that mixes facilities, no proof either
        await until(lambda: agent.stats.kernel_untrusted >= 4, "the kernel-tagged line read")
    assert sink.anomalies == []


async def test_a_journal_record_counts_only_with_the_kernel_transport(tmp_path: Path) -> None:
    export = tmp_path / "journal.export"
    export.write_text("")
    sink = RecordingSink()
    async with running(make_agent(sink, kernel_log=export)) as agent:
        # `logger -t kernel` through journald: the identifier is the sender's to choose, _TRANSPORT is not
        append(export, f"__REALTIME_TIMESTAMP={_micros()}\n_TRANSPORT=syslog\nSYSLOG_IDENTIFIER=kernel\n"
                       f"_UID=1001\nPRIORITY=3\nMESSAGE={XID}\n_HOSTNAME={NODE}\n\n")
        append(export, f"__REALTIME_TIMESTAMP={_micros()}\n_TRANSPORT=stdout\nMESSAGE={XID}\n\n")
        await until(lambda: agent.stats.kernel_untrusted >= 2, "the forged records read")
        assert sink.anomalies == []
        append(export, f"__REALTIME_TIMESTAMP={_micros()}\nMESSAGE={XID}\n_TRANSPORT=kernel\nSYSLOG_IDENTIFIER=kernel\n"
                       f"_HOSTNAME={NODE}\n\n")
        await until(lambda: sink.anomalies, "the kernel's own record")
    assert [a.signature_ids for a in sink.anomalies] == [("xid-79",)]


async def test_a_kernel_only_file_still_works(tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text(f"Nov 29 09:11:58 {NODE} kernel: usb 1-1: new high-speed USB device number 2\n")
    sink = RecordingSink()
    async with running(make_agent(sink, kernel_log=kern)):
        append(kern, xid_line(79))
        await until(lambda: sink.anomalies, "the Xid")
    dmesg = tmp_path / "dmesg.log"
    dmesg.write_text("")
    sink = RecordingSink()
    async with running(make_agent(sink, kernel_log=dmesg)):
        append(dmesg, f"[ 8812.221004] {XID}\n")
        await until(lambda: sink.anomalies, "the dmesg Xid")


async def test_the_agent_refuses_a_file_that_mixes_facilities_at_start(tmp_path: Path) -> None:
    messages = tmp_path / "messages"
    messages.write_text(SSHD + f"Nov 29 09:11:59 {NODE} kernel: usb 1-1: new high-speed USB device number 2\n")
    config = AgentConfig(node=NODE, probe="none", kernel_log=messages)
    stop = asyncio.Event()
    with pytest.raises(KernelLogRefusedError, match="mixes facilities"):
        await run_agent(config, "c1", FakeScheduler(demo_cluster()), RecordingSink(), stop)
    sink = RecordingSink()  # the operator's explicit acceptance: read, and said loudly (doctor, the log)
    accepted = make_agent(sink, kernel_log=messages)
    accepted._accept_mixed = True
    async with running(accepted):
        append(messages, xid_line(79))
        await until(lambda: sink.anomalies, "the Xid in the accepted file")


def test_doctor_says_whether_the_kernel_log_is_kernel_only(tmp_path: Path) -> None:
    from goodput.cli.doctor import Status
    from workers.doctor import kernel_log_check
    messages = tmp_path / "messages"
    messages.write_text(SSHD + xid_line(79))
    mixed = kernel_log_check(messages, accept_mixed=False)
    assert mixed.status is Status.FAIL and "mixes facilities" in mixed.found and "sshd" in mixed.found
    assert "journalctl -k" in mixed.fix
    accepted = kernel_log_check(messages, accept_mixed=True)
    assert accepted.status is Status.WARN and "any local account" in accepted.found
    assert kernel_log_check(Path("/var/log/messages"), accept_mixed=False).status is Status.FAIL  # by name
    export = tmp_path / "kernel.export"
    export.write_text(f"MESSAGE={XID}\n_TRANSPORT=kernel\n\n")
    assert kernel_log_check(export, accept_mixed=False).status is Status.OK
    kern = tmp_path / "kern.log"
    kern.write_text(xid_line(79))
    kept = kernel_log_check(kern, accept_mixed=False)
    assert kept.status is Status.WARN and "only the kernel facility" in kept.fix  # kernel-only by configuration
    assert kernel_log_check(None, accept_mixed=False).status is Status.SKIPPED


async def test_a_journal_record_cut_by_a_restart_is_read_whole_after_it(tmp_path: Path) -> None:
    """Records are judged whole now (`_TRANSPORT` may follow `MESSAGE`): the saved cursor stays at
    the start of a record still open, so the restarted agent reads all of it."""
    export, state = tmp_path / "journal.export", tmp_path / "state.json"
    export.write_text("")
    sink = RecordingSink()
    async with running(make_agent(sink, kernel_log=export, state_file=state)) as agent:
        append(export, f"__REALTIME_TIMESTAMP={_micros()}\n_TRANSPORT=stdout\nMESSAGE=unrelated\n\n"
                       f"__REALTIME_TIMESTAMP={_micros()}\nMESSAGE={XID}\n")
        await until(lambda: agent.stats.steps >= 3 and state.exists(), "the half record read and saved")
    append(export, "_TRANSPORT=kernel\n\n")  # the rest, written while the agent is down
    async with running(make_agent(sink, kernel_log=export, state_file=state)):
        await until(lambda: sink.anomalies, "the whole record after the restart")
    assert [a.signature_ids for a in sink.anomalies] == [("xid-79",)]
