"""The matcher as it was before RE2, kept as a test oracle: Python's `re` over the same catalogue.

Only for short, trusted test lines: this is the engine a crafted line could freeze. The launcher
prefix patterns are the old ones verbatim (with the lookahead RE2 has no use for). The one
catalogue pattern rewritten for RE2, `nccl-socket-closed`, changed on purpose: its old form,
`...|socketProgress(?!.*Connection closed)`, missed a `socketProgress: Connection closed by <peer
in another form>` line altogether; the rewrite matches it (without a peer). The oracle uses the
catalogue's pattern for it, and tests/unit/test_signatures_linear.py pins the change. The prefix
rules follow the shipped ones where those changed on purpose since (a leading ISO stamp, Open MPI's
`[job,rank]<stdout>:` tag, the launcher's host kept over NCCL's own hostname, UCX's `[host:pid:thread]`
after its time stamp, NCCL's prefix from a host named by a digit or an IP address, a machine-shaped
`name: `, `docker compose`'s `name | ` and `kubectl logs --prefix`'s `[pod/name/container] `, a
syslog header quoted inside a line), so that the oracle keeps checking the engine, not the rules.
"""

from __future__ import annotations

import re

from goodput.diagnose.signatures import Catalogue, LineContext, default_catalogue
from goodput.diagnose.signatures.hostshape import host_shaped, numbered_machine

_HOST = r"[A-Za-z][A-Za-z0-9_.\-]{0,127}"
_SYSLOG_HOST = rf"({_HOST}|\d{{1,3}}(?:\.\d{{1,3}}){{3}})"
_SRUN_TASK = re.compile(r"\s*(\d{1,6}): ")
_PDSH = re.compile(rf"({_HOST}): (?=\[rank\d|\[Rank \d|\[default\d|{_HOST}:\d+:\d+ \[)")
_NAME_COLON = re.compile(r"([A-Za-z0-9][A-Za-z0-9.\-]{0,252}): ")
_COMPOSE = re.compile(r"([A-Za-z0-9][A-Za-z0-9.\-]{0,252}) +\| ")
_KUBECTL = re.compile(r"\[pod/([a-z0-9][a-z0-9.\-]{0,252})/[a-z0-9][a-z0-9\-]{0,62}\] ")
_SYSLOG_QUOTED = re.compile(
    rf"(?:[A-Z][a-z]{{2}} [ \d]\d \d\d:\d\d:\d\d|\d{{4}}-\d\d-\d\dT[\d:.,+\-]+Z?) {_SYSLOG_HOST} "
    r"(?:kernel|nvidia-[\w\-]+|slurmd|slurmstepd|nv-fabricmanager)(?:\[\d+\])?: ")
_TORCH_RANK = re.compile(r"\[[Rr]ank ?(\d{1,6})\]: ?")
_NCCL = re.compile(rf"({_HOST}):\d+:\d+ \[\d+\] ")
_NCCL_NUMERIC = re.compile(r"([0-9]{1,16}[A-Za-z_.\-][A-Za-z0-9_.\-]{0,111}):\d+:\d+ \[\d+\] ")
_SYSLOG = re.compile(
    rf"(?:[A-Z][a-z]{{2}} [ \d]\d \d\d:\d\d:\d\d|\d{{4}}-\d\d-\d\dT[\d:.,+\-]+Z?) {_SYSLOG_HOST} "
    r"(?:kernel|nvidia-[\w\-]+|slurmd|slurmstepd|nv-fabricmanager|systemd[\w\-]*)(?:\[\d+\])?: "
    r"(?:\[\s*\d+\.\d+\] )?")
_DMESG = re.compile(r"\[\s*\+?\d+\.\d+\] ")
_MPI = re.compile(rf"\[({_HOST}):\d+(?: ?:\d+:\d+)?\] ")
_UCX = re.compile(rf"\[({_HOST}):\d+:\d+\] +")
_STAMP = re.compile(r"\d{4}-\d\d-\d\d[T ][\d:.,]{5,20}(?:Z|[+\-]\d\d:?\d\d)?:? ")
_OMPI = re.compile(r"\[\d{1,6},(\d{1,6})\]<std(?:out|err)>: ?")
_NVRX_OLD = re.compile(rf"\[\d{{4}}-\d\d-\d\d [\d:,.]{{8,15}}\] \[[A-Z]{{3,8}}\] \[[A-Za-z_]{{1,32}}\d{{0,9}}@({_HOST})"
                       r"(?::(\d{1,6}))?\] ", re.ASCII)
_NVRX_NEW = re.compile(rf"\[[A-Z]{{3,8}}\] \[({_HOST})\] \[workload:[^(\]]{{0,16}}\((\d{{1,6}}|\?)\)[^\]]{{0,60}}\] "
                       r"[\w.\-]{1,64}:\d{1,6} ", re.ASCII)



def old_split_prefix(line: str) -> tuple[LineContext, str]:
    host: str | None = None
    rank: int | None = None
    task: int | None = None
    pos = 0
    m = _NVRX_OLD.match(line, pos)
    if m:
        host, pos = m.group(1), m.end()
        rank = int(m.group(2)) if m.group(2) else None
    m = None if _SYSLOG.match(line, pos) else _STAMP.match(line, pos)
    if m:
        pos = m.end()
        m = _NVRX_NEW.match(line, pos)
        if m:
            host, pos = m.group(1), m.end()
            rank = int(m.group(2)) if m.group(2).isdigit() else rank
    m = _OMPI.match(line, pos)
    if m:
        rank, pos = int(m.group(1)), m.end()
    m = _SRUN_TASK.match(line, pos)
    if m:
        task, pos = int(m.group(1)), m.end()
    m = _PDSH.match(line, pos) or _KUBECTL.match(line, pos)
    if m:
        host, pos = m.group(1), m.end()
    elif m := _NAME_COLON.match(line, pos):
        if numbered_machine(m.group(1)):
            host, pos = m.group(1), m.end()
    elif (m := _COMPOSE.match(line, pos)) and host_shaped(m.group(1)):
        host, pos = m.group(1), m.end()
    m = _TORCH_RANK.match(line, pos)
    if m:
        rank, pos = int(m.group(1)), m.end()
    m = (_NCCL.match(line, pos) or _SYSLOG.match(line, pos) or _MPI.match(line, pos)
         or _NCCL_NUMERIC.match(line, pos))
    if m:
        host, pos = host or m.group(1), m.end()
    else:
        m = _DMESG.match(line, pos)
        if m:
            pos = m.end()
            m = _UCX.match(line, pos)
            if m:
                host, pos = m.group(1), m.end()
    if host is None and (m := _SYSLOG_QUOTED.search(line, pos)):
        host = m.group(1)
    return LineContext(host=host, rank=rank, task=task), line[pos:]


class OldMatcher:
    """Every signature whose literal occurs and whose `re` pattern matches, generic ones displaced."""

    def __init__(self, catalogue: Catalogue | None = None) -> None:
        self.catalogue = catalogue or default_catalogue()
        self._regex = {s.id: re.compile(s.pattern, re.IGNORECASE if s.ignore_case else 0)
                       for s in self.catalogue.signatures}

    def match(self, line: str) -> list[tuple[str, tuple[tuple[str, str], ...], LineContext]]:
        line = line[:64 * 1024]
        context, body = old_split_prefix(line)
        hits = []
        for sig in self.catalogue.signatures:
            if not any(lit in line for lit in sig.literals):
                continue
            m = self._regex[sig.id].search(body)
            if m is not None:
                groups = tuple(sorted((k, v) for k, v in m.groupdict().items() if v is not None))
                hits.append((sig, groups))
        if len(hits) > 1:
            lowest = min(sig.tier for sig, _ in hits)
            hits = [(sig, g) for sig, g in hits if sig.tier == lowest]
            displaced = {i for sig, _ in hits for i in sig.supersedes}
            hits = [(sig, g) for sig, g in hits if sig.id not in displaced]
        return sorted((sig.id, g, context) for sig, g in hits)


def new_match(catalogue: Catalogue, line: str) -> list[tuple[str, tuple[tuple[str, str], ...], LineContext]]:
    return sorted((m.signature.id, tuple(sorted(m.groups.items())), m.context) for m in catalogue.match_line(line))
