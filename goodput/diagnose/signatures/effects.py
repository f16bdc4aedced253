"""What the launcher and the job owner did about a failure, and what that leaves to the cluster.

Some lines say nothing about the cause but everything about restarting: a launcher that restarted
the job in-job, one that gave up after its retries, an owner's cancel or a "never restart" marker.
The last line of each kind is kept; `net` folds them into one effect and `restart` turns the
cause's wish into the cluster's decision (no double restart, no restart against the owner's word).
"""

from __future__ import annotations

from goodput.diagnose.signatures.model import Match
from goodput.models import RestartEffect


class Effects:
    """The last hit of each restart effect seen (what the launcher did about the failure)."""

    def __init__(self) -> None:
        self._last: dict[RestartEffect, Match] = {}

    def observe(self, match: Match, owner_cancel: Match | None) -> None:
        """`owner_cancel`: the owner's cancel seen so far, which means never unless a line said so."""
        if match.signature.restart_effect is not RestartEffect.NONE:
            self._last[match.signature.restart_effect] = match
        if owner_cancel is not None and RestartEffect.NEVER not in self._last:
            self._last[RestartEffect.NEVER] = owner_cancel

    def said(self, effect: RestartEffect) -> Match | None:
        """The line that said `effect`, if any."""
        return self._last.get(effect)

    def ids(self) -> tuple[str, ...]:
        """The signatures of the lines kept, once each."""
        return tuple(dict.fromkeys(m.signature.id for m in self._last.values()))

    def net(self) -> RestartEffect:
        """What the lines so far say about restarting: never beats everything; an in-job restart
        counts until the launcher gives up after it."""
        if RestartEffect.NEVER in self._last:
            return RestartEffect.NEVER
        in_job = self._last.get(RestartEffect.IN_JOB)
        gave_up = self._last.get(RestartEffect.GAVE_UP)
        if in_job is not None and (gave_up is None or gave_up.line_no < in_job.line_no):
            return RestartEffect.IN_JOB
        return RestartEffect.GAVE_UP if gave_up is not None else RestartEffect.NONE

    def restart(self, wanted: bool) -> tuple[bool, str | None]:
        """The cluster's restart decision: the cause's, unless the job's launcher already restarted it
        in-job (and did not give up afterwards) or the job asked never to be restarted."""
        if not wanted:
            return False, None
        never = self._last.get(RestartEffect.NEVER)
        if never is not None:
            return False, (f"Not restarted: line {never.line_no} ({never.signature.id}) says so. "
                           f"{never.signature.explanation}")
        in_job = self._last.get(RestartEffect.IN_JOB)
        gave_up = self._last.get(RestartEffect.GAVE_UP)
        if in_job is not None and (gave_up is None or gave_up.line_no < in_job.line_no):
            return False, (f"The job's own launcher restarted it in-job (line {in_job.line_no}) and did not give "
                           "up afterwards; a cluster restart on top would be a double restart.")
        return True, None
