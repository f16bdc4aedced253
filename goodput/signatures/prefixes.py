"""Launcher prefixes: who printed a line, and the line without the prefixes.

Distributed jobs interleave the output of hundreds of processes; the prefixes that launchers and
loggers add are often the only way to tell which host or rank a line came from. They are peeled
off in a fixed order (outermost first) so that signature regexes can anchor on the message itself
(`^KeyError:`) and the culprit can be named.
"""

from __future__ import annotations

import re

from goodput.signatures.model import LineContext

_HOST = r"[A-Za-z][A-Za-z0-9_.\-]{0,127}"

# `srun -l` / `--label`: the Slurm task id, right-aligned.
_SRUN_TASK = re.compile(r"\s*(\d{1,6}): ")
# pdsh-style (DeepSpeed launcher) host prefix, only when another known prefix follows, since a bare
# `word: ` is just as likely to be `RuntimeError: `.
_PDSH = re.compile(rf"({_HOST}): (?=\[rank\d|\[Rank \d|\[default\d|{_HOST}:\d+:\d+ \[)")
# torchrun (PyTorch 2.x) worker prefix `[rank3]:`; DeepSpeed's `[Rank 3]` log lines.
_TORCH_RANK = re.compile(r"\[[Rr]ank ?(\d{1,6})\]: ?")
# NCCL_DEBUG lines: `host:pid:tid [dev] NCCL ...`.
_NCCL = re.compile(rf"({_HOST}):\d+:\d+ \[\d+\] ")
# syslog / journal: `Nov 29 09:00:01 host kernel: ...` or ISO timestamps.
_SYSLOG = re.compile(
    rf"(?:[A-Z][a-z]{{2}} [ \d]\d \d\d:\d\d:\d\d|\d{{4}}-\d\d-\d\dT[\d:.,+\-]+Z?) ({_HOST}) "
    r"(?:kernel|nvidia-[\w\-]+|slurmd|slurmstepd|nv-fabricmanager|systemd[\w\-]*)(?:\[\d+\])?: "
    r"(?:\[\s*\d+\.\d+\] )?")
# dmesg time stamps carry no host but must not hide the message.
_DMESG = re.compile(r"\[\s*\d+\.\d+\] ")
# MPI / UCX style `[host:pid]` or `[host:pid :0:tid]`.
_MPI = re.compile(rf"\[({_HOST}):\d+(?: ?:\d+:\d+)?\] ")


def split_prefix(line: str) -> tuple[LineContext, str]:
    """The printing host/rank/task (where known) and the message body."""
    host: str | None = None
    rank: int | None = None
    task: int | None = None
    pos = 0

    m = _SRUN_TASK.match(line, pos)
    if m:
        task = int(m.group(1))
        pos = m.end()
    m = _PDSH.match(line, pos)
    if m:
        host = m.group(1)
        pos = m.end()
    m = _TORCH_RANK.match(line, pos)
    if m:
        rank = int(m.group(1))
        pos = m.end()
    m = _NCCL.match(line, pos) or _SYSLOG.match(line, pos) or _MPI.match(line, pos)
    if m:
        host = m.group(1)
        pos = m.end()
    else:
        m = _DMESG.match(line, pos)
        if m:
            pos = m.end()
    if host is None and rank is None and task is None:
        return _EMPTY, line[pos:]
    return LineContext(host=host, rank=rank, task=task), line[pos:]


_EMPTY = LineContext()
