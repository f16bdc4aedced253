"""`goodput audit`: the audit trail as a table, JSON lines or CSV, from the log and histories.

The log (`<data_dir>/audit.jsonl`) is read directly, so the trail is there when Temporal is not;
`--from-histories` also rebuilds it from the incidents' workflow histories (their reports carry
every record) and merges the two, which fills in what a lost or truncated log missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from goodput.recover.audit import AuditRecord, to_csv, to_jsonl


def render(records: Sequence[AuditRecord], fmt: str, out: TextIO) -> None:
    if fmt == "jsonl":
        out.write(to_jsonl(records))
    elif fmt == "csv":
        out.write(to_csv(records))
    else:
        for r in records:
            nodes = f" nodes={','.join(r.nodes)}" if r.nodes else ""
            out.write(f"{r.at:%Y-%m-%d %H:%M:%S} {r.actor:<20} {r.action:<9} job {r.cluster}/{r.job_id}{nodes} "
                      f"[{r.incident_id}] {r.result}" + (f" — {r.reason}" if r.reason else "") + "\n")
        if not records:
            out.write("no audit records\n")
