"""Launcher prefixes: who printed a line, and the line without the prefixes.

Distributed jobs interleave the output of hundreds of processes; the prefixes that launchers and
loggers add are often the only way to tell which host or rank a line came from. They are peeled
off in a fixed order (outermost first) so that signature regexes can anchor on the message itself
(`^KeyError:`) and the culprit can be named. Every prefix pattern runs on RE2 (linear time) and
matches ASCII only, so its length in bytes is its length in characters.
"""

from __future__ import annotations

from collections.abc import Sequence

from goodput.diagnose.signatures.hostshape import host_shaped, numbered_machine
from goodput.diagnose.signatures.model import LineContext
from goodput.untrusted_text import LinearRegex, utf8

_HOST = r"[A-Za-z][A-Za-z0-9_.\-]{0,127}"

# `srun -l` / `--label`: the Slurm task id, right-aligned.
_SRUN_TASK = LinearRegex(r"\s*(\d{1,6}): ")
# pdsh-style (DeepSpeed launcher) host prefix, only when another known prefix follows, since a bare
# `word: ` is just as likely to be `RuntimeError: `. The follower is matched but not consumed: the
# prefix ends two bytes after the host (RE2 has no lookahead; the host cannot contain ": ").
_PDSH = LinearRegex(rf"({_HOST}): (?:\[rank\d|\[Rank \d|\[default\d|{_HOST}:\d+:\d+ \[)")
# Any other `name: ` first on a line (pdsh and clush with any follower, `talosctl dmesg`'s
# `10.0.3.17: kern: ...`, a site's own wrapper): a host only when the name has a machine's shape
# (`hostshape.host_shaped`: an address, or an RFC 1123 name whose first label carries a digit), so
# `RuntimeError: `, `torch.distributed.run: ` and `rank3: ` stay messages.
_NAME_COLON = LinearRegex(r"([A-Za-z0-9][A-Za-z0-9.\-]{0,252}): ")
# `docker compose logs`: the container's name, padded, then `| ` (`trainer-worker-3  | ...`).
_COMPOSE = LinearRegex(r"([A-Za-z0-9][A-Za-z0-9.\-]{0,252}) +\| ")
# `kubectl logs --prefix`: `[pod/<pod>/<container>] `; a pod's name is its host name.
_KUBECTL = LinearRegex(r"\[pod/([a-z0-9][a-z0-9.\-]{0,252})/[a-z0-9][a-z0-9\-]{0,62}\] ")
# torchrun (PyTorch 2.x) worker prefix `[rank3]:`; DeepSpeed's `[Rank 3]` log lines.
_TORCH_RANK = LinearRegex(r"\[[Rr]ank ?(\d{1,6})\]: ?")
# NCCL_DEBUG lines: `host:pid:tid [dev] NCCL ...`.
_NCCL = LinearRegex(rf"({_HOST}):\d+:\d+ \[\d+\] ")
# The same prefix from a host whose name starts with a digit (RFC 1123 allows it), or a container
# whose hostname is its IP address; a non-digit in the name and the `:pid:tid [dev] ` tail keep it
# apart from a time stamp (`12:30:01 [0]`).
_NCCL_NUMERIC = LinearRegex(r"([0-9]{1,16}[A-Za-z_.\-][A-Za-z0-9_.\-]{0,111}):\d+:\d+ \[\d+\] ")
# syslog / journal: `Nov 29 09:00:01 host kernel: ...` or ISO timestamps. RFC 3164 (4.1.2) lets the
# HOSTNAME field be the originator's IPv4 address when it has no name.
_SYSLOG_HOST = rf"({_HOST}|\d{{1,3}}(?:\.\d{{1,3}}){{3}})"
_SYSLOG = LinearRegex(
    rf"(?:[A-Z][a-z]{{2}} [ \d]\d \d\d:\d\d:\d\d|\d{{4}}-\d\d-\d\dT[\d:.,+\-]+Z?) {_SYSLOG_HOST} "
    r"(?:kernel|nvidia-[\w\-]+|slurmd|slurmstepd|nv-fabricmanager|systemd[\w\-]*)(?:\[\d+\])?: "
    r"(?:\[\s*\d+\.\d+\] )?")
# A bare ISO time stamp some log shippers put first (`2019-06-02T16:13:44.884Z: `).
_STAMP = LinearRegex(r"\d{4}-\d\d-\d\d[T ][\d:.,]{5,20}(?:Z|[+\-]\d\d:?\d\d)?:? ")
# Open MPI's `--tag-output`: `[jobid,rank]<stdout>:`.
_OMPI = LinearRegex(r"\[\d{1,6},(\d{1,6})\]<std(?:out|err)>: ?")
# NVRx's launcher logger: 0.4.x `[2026-12-01 06:43:41,184] [INFO] [ft_launcher26073@vm] ` (its rank
# monitors `[RankMonServer26080@vm:1] `, the rank after the colon); 0.6+ after a bare time stamp
# `[WARNING] [vm] [workload:?(1) infra:?(?)] rank_monitor_server.py:497 ` (the rank in the brackets).
_NVRX_OLD = LinearRegex(r"\[\d{4}-\d\d-\d\d [\d:,.]{8,15}\] \[[A-Z]{3,8}\] "
                        rf"\[[A-Za-z_]{{1,32}}\d{{0,9}}@({_HOST})(?::(\d{{1,6}}))?\] ")
_NVRX_NEW = LinearRegex(rf"\[[A-Z]{{3,8}}\] \[({_HOST})\] \[workload:[^(\]]{{0,16}}\((\d{{1,6}}|\?)\)[^\]]{{0,60}}\] "
                        r"[\w.\-]{1,64}:\d{1,6} ")
# A syslog record quoted inside another line (an alert forwarder's `Xid errors on instance: X,
# Error: May 29 01:37:38 X kernel: ...`): its header still names the host that logged it. Searched
# only when no prefix named a host and one of the tags is present.
_SYSLOG_QUOTED = LinearRegex(
    rf"(?:[A-Z][a-z]{{2}} [ \d]\d \d\d:\d\d:\d\d|\d{{4}}-\d\d-\d\dT[\d:.,+\-]+Z?) {_SYSLOG_HOST} "
    r"(?:kernel|nvidia-[\w\-]+|slurmd|slurmstepd|nv-fabricmanager)(?:\[\d+\])?: ")
_QUOTED_TAGS = (b" kernel", b" nvidia-", b" slurm", b" nv-fabricmanager")
# dmesg time stamps carry no host but must not hide the message.
_DMESG = LinearRegex(r"\[\s*\+?\d+\.\d+\] ")
# MPI / UCX style `[host:pid]` or `[host:pid :0:tid]`.
_MPI = LinearRegex(rf"\[({_HOST}):\d+(?: ?:\d+:\d+)?\] ")
# UCX's logger after its time stamp: `[1608298882.555115] [host:pid:thread]    file.c:123 UCX  ERROR`.
_UCX = LinearRegex(rf"\[({_HOST}):\d+:\d+\] +")
# `\s` in RE2 is ASCII whitespace: tab, newline, form feed, carriage return, space (no \v).
_SPACE_OR_DIGIT = frozenset(bytes([c]) for c in b"\t\n\f\r 0123456789")


def split_prefix_bytes(data: bytes) -> tuple[LineContext, int]:
    """The printing host/rank/task (where known) and the byte offset where the message starts."""
    host: str | None = None
    rank: int | None = None
    task: int | None = None
    pos = 0

    # Each pattern is tried only where its first byte could start it (most lines have no prefix, so
    # this skips most calls). The numbers are at most six ASCII digits: int() is always cheap.
    first = data[pos:pos + 1]
    if first == b"[" and (m := _NVRX_OLD.match_spans(data, pos)):
        host = data[m[1][0]:m[1][1]].decode("ascii")
        if m[2][0] >= 0:
            rank = int(data[m[2][0]:m[2][1]])
        pos = m[0][1]
        first = data[pos:pos + 1]
    # A syslog prefix starting with a digit (ISO time) is tried once here and its answer reused below
    # when nothing moved `pos` in between: this is the hot path for kernel logs.
    syslog_at = pos
    syslog = _SYSLOG.match_spans(data, pos) if first.isdigit() else None
    if first.isdigit() and not syslog and (m := _STAMP.match_spans(data, pos)):
        pos = m[0][1]
        first = data[pos:pos + 1]
        if first == b"[" and (m := _NVRX_NEW.match_spans(data, pos)):
            host = data[m[1][0]:m[1][1]].decode("ascii")
            if data[m[2][0]:m[2][1]].isdigit():
                rank = int(data[m[2][0]:m[2][1]])
            pos = m[0][1]
            first = data[pos:pos + 1]
    if first == b"[" and (m := _OMPI.match_spans(data, pos)):
        rank = int(data[m[1][0]:m[1][1]])
        pos = m[0][1]
        first = data[pos:pos + 1]
    if first in _SPACE_OR_DIGIT and (m := _SRUN_TASK.match_spans(data, pos)):
        task = int(data[m[1][0]:m[1][1]])
        pos = m[0][1]
        first = data[pos:pos + 1]
    if first.isalpha() and (m := _PDSH.match_spans(data, pos)):
        host = data[m[1][0]:m[1][1]].decode("ascii")
        pos = m[1][1] + 2
        first = data[pos:pos + 1]
    elif data.startswith(b"[pod/", pos) and (m := _KUBECTL.match_spans(data, pos)):
        host = data[m[1][0]:m[1][1]].decode("ascii")
        pos = m[0][1]
        first = data[pos:pos + 1]
    elif first.isalnum() and ((m := _NAME_COLON.match_spans(data, pos)) or (m := _COMPOSE.match_spans(data, pos))):
        name = data[m[1][0]:m[1][1]].decode("ascii")
        if numbered_machine(name) if data[m[0][1] - 2:m[0][1]] == b": " else host_shaped(name):
            host = name
            pos = m[0][1]
            first = data[pos:pos + 1]
    if first == b"[" and (m := _TORCH_RANK.match_spans(data, pos)):
        rank = int(data[m[1][0]:m[1][1]])
        pos = m[0][1]
        first = data[pos:pos + 1]
    if first.isalpha():
        m = _NCCL.match_spans(data, pos) or (_SYSLOG.match_spans(data, pos) if first.isupper() else None)
    elif first == b"[":
        m = _MPI.match_spans(data, pos)
    elif first.isdigit():
        m = (syslog if pos == syslog_at else _SYSLOG.match_spans(data, pos)) or _NCCL_NUMERIC.match_spans(data, pos)
    else:
        m = None
    if m:
        # The launcher's prefix (pdsh/DeepSpeed `node01: `) names the host as the scheduler knows it;
        # NCCL's own gethostname() may be a container or VM name. Keep the outer one.
        host = host or data[m[1][0]:m[1][1]].decode("ascii")
        pos = m[0][1]
    elif first == b"[" and (m := _DMESG.match_spans(data, pos)):
        pos = m[0][1]
        if data[pos:pos + 1] == b"[" and (m := _UCX.match_spans(data, pos)):
            host = data[m[1][0]:m[1][1]].decode("ascii")
            pos = m[0][1]
    if host is None and any(tag in data for tag in _QUOTED_TAGS) and (m := _SYSLOG_QUOTED.search_spans(data, pos)):
        host = data[m[1][0]:m[1][1]].decode("ascii")
    if host is None and rank is None and task is None:
        return _EMPTY, pos
    return LineContext(host=host, rank=rank, task=task), pos


# A name first in a line's message, in a form no prefix above names a host by (`gpu7: `, `[node-a12] `,
# `[10.0.3.17] `): a host only when many lines of the same chunk start with it (the log's own line
# prefix, whatever wrapper wrote it) and it has a machine's shape (`host_shaped` checks every byte).
MAX_PREFIX_NAME = 253
MIN_PREFIX_REPEATS = 3
# Distinct candidate prefixes judged per chunk: each costs one count over the chunk, so the work per
# chunk stays a fixed multiple of its size whatever its lines hold.
MAX_PREFIX_CANDIDATES = 32


class RepeatedPrefix:
    """The line prefixes a chunk of log repeats, judged lazily: only for lines that hold a catalogue
    literal and whose host no known prefix named (the hot path never gets here for clean lines)."""

    __slots__ = ("_chunk", "_judged", "_lines")

    def __init__(self, chunk: bytes) -> None:
        self._chunk = chunk
        # prefix bytes -> the host it names, or "" for a prefix that names none
        self._judged: dict[bytes, str] = {}
        self._lines: Sequence[str] | None = None

    @classmethod
    def of_lines(cls, lines: Sequence[str]) -> RepeatedPrefix:
        """The chunk of `lines`, joined only once a hit line asks for a host: the
        live watcher's batches are mostly clean lines, which never do."""
        layout = cls(b"")
        layout._lines = lines
        return layout

    def host(self, data: bytes, pos: int) -> tuple[str, int] | None:
        """The host a repeated prefix at `pos` of a line names, and where its message starts."""
        if data[pos:pos + 1] == b"[":
            close = data.find(b"] ", pos + 1, pos + MAX_PREFIX_NAME + 3)
            name_at, end = pos + 1, close + 2
        else:
            close = data.find(b": ", pos, pos + MAX_PREFIX_NAME + 2)
            name_at, end = pos, close + 2
        if close <= name_at:
            return None
        prefix = data[pos:end]
        known = self._judged.get(prefix)
        if known is None:
            if len(self._judged) >= MAX_PREFIX_CANDIDATES:
                return None
            if self._lines is not None:
                self._chunk, self._lines = utf8("\n".join(self._lines)), None
            name = data[name_at:close].decode("ascii", "replace")
            known = name if host_shaped(name) and self._chunk.count(prefix) >= MIN_PREFIX_REPEATS else ""
            self._judged[prefix] = known
        return (known, end) if known else None


def split_prefix(line: str) -> tuple[LineContext, str]:
    """The printing host/rank/task (where known) and the message body."""
    context, offset = split_prefix_bytes(utf8(line))
    return context, line[offset:]  # prefixes are ASCII: bytes and characters coincide


_EMPTY = LineContext()
