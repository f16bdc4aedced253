"""`goodput trust`: each rule's track record at this site and the autonomy it earned, and pins.

The numbers an operator needs to move a partition from monitor to autonomous (docs/policies.md
#earned-autonomy): per rule, how often goodput recommended, how often operators agreed or
disagreed (and said it was wrong), how many drains found no fault, and what the rule may do alone
now and why. Rendering and argument checks only; the record is the cluster's TrustRecordWorkflow.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from goodput.cli.anomaly_input import AnomalyInputError
from goodput.cli.terminal import terminal_text
from goodput.models import Mode
from goodput.recover.trust import ReasonKind, RuleSummary

PIN_MODES = ("monitor", "approve", "autonomous", "none")


def trust_json(summaries: Sequence[RuleSummary]) -> str:
    """JSON Lines, one rule a line (the CLI's contract for lists); no rules, no lines."""
    return "\n".join(json.dumps(s.model_dump(mode="json")) for s in summaries)


def trust_table(cluster: str, summaries: Sequence[RuleSummary]) -> Table:
    table = Table(title=f"track record per rule on {cluster} (goodput trust pin RULE MODE to override)")
    for column in ("rule", "recommended", "agreed", "disagreed", "wrong", "false drains", "job not node",
                   "verified", "autonomy", "why"):
        table.add_column(column, justify="left" if column in ("rule", "autonomy", "why") else "right")
    for s in summaries:
        level = Text(str(s.autonomy) + (" (pinned)" if s.pinned else ""),
                     style="bold green" if s.autonomy is Mode.AUTONOMOUS else "")
        table.add_row(terminal_text(s.rule), str(s.recommendations), str(s.agreed), str(s.disagreed), str(s.wrong),
                      str(s.false_drains), str(s.job_not_node), str(s.verified), level, terminal_text(s.why))
    return table


def pin_target(rule: str | None, mode: str | None, reason: str | None) -> tuple[str, Mode | None]:
    """The rule and mode of `goodput trust pin RULE MODE --reason ...` (`none` unpins)."""
    if not rule or not mode:
        raise AnomalyInputError("trust pin needs RULE and MODE (monitor, approve, autonomous or none)")
    if mode not in PIN_MODES:
        raise AnomalyInputError(f"trust pin: mode must be one of {', '.join(PIN_MODES)}, not {mode!r}")
    if not reason:
        raise AnomalyInputError("trust pin needs --reason")
    if len(rule) > 200:
        raise AnomalyInputError("trust pin: a rule id is at most 200 characters")
    return rule, None if mode == "none" else Mode(mode)


def reason_with_kind(kind: str | None, reason: str) -> str:
    """A cancel's reason as the track record reads it: `KIND: text` (goodput.recover.trust.parse_reason)."""
    if kind is None:
        return reason
    return f"{ReasonKind(kind).value}: {reason}"


REASON_KINDS = tuple(k.value for k in ReasonKind)
