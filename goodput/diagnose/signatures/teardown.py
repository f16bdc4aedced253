"""Which hits are the job being torn down rather than why it failed.

A failing job prints far more lines while it dies than the one that killed it: the launcher's
"Failures:" summary lists the other ranks' exits, a launcher that kills a hung rank itself leaves
SIGKILL exits behind it, and everything the application prints after Slurm's termination banner is
the termination. This module follows those markers in line order (bounded memory) and demotes the
hits they cover, so that the verdict's weighing sees causes, not the teardown.
"""

from __future__ import annotations

from goodput.diagnose.signatures.model import Match, Role
from goodput.models import Category

# Bound on the summary sections remembered: a hostile log cannot grow the list without end.
MAX_SECTIONS = 1000
# A launcher that kills a hung rank itself (NVRx's rank monitor) leaves exit code -9: not the OOM killer.
_LAUNCHER_KILLS = frozenset({"nvrx-heartbeat-timeout", "nvrx-section-timeout"})
_SIGKILL_IDS = frozenset({"torchrun-exit-sigkill", "deepspeed-exit-sigkill"})
# torchrun's failure summary: "Failures:" lists the other ranks' exits, then the root cause.
_OTHER_FAILURES_ID = "torchrun-other-failures"
_ROOT_CAUSE_ID = "torchrun-root-cause"
# Categories whose lines after a Slurm termination banner are consequences of the termination.
_TEARDOWN = frozenset({Category.APP_ERROR, Category.OOM, Category.NCCL_TIMEOUT, Category.NETWORK,
                       Category.HANG, Category.STORAGE, Category.UNKNOWN})


class Teardown:
    """The teardown markers seen so far, and the role each hit plays given them."""

    def __init__(self) -> None:
        self.terminated_at: int | None = None
        self._launcher_kill_at: int | None = None
        # Line spans of torchrun's "Failures:" sections (other ranks' exits: teardown, not causes).
        self._others_from: int | None = None
        self._others: list[tuple[int, int]] = []
        self._voided: set[str] = set()

    def observe(self, match: Match) -> None:
        sig = match.signature
        self._voided.update(sig.voids)
        if sig.terminates and self.terminated_at is None:
            self.terminated_at = match.line_no
        if sig.id in _LAUNCHER_KILLS and self._launcher_kill_at is None:
            self._launcher_kill_at = match.line_no
        if sig.id == _OTHER_FAILURES_ID:
            self._others_from = match.line_no
        elif sig.id == _ROOT_CAUSE_ID and self._others_from is not None:
            if len(self._others) < MAX_SECTIONS:
                self._others.append((self._others_from, match.line_no))
            self._others_from = None

    def in_other_failures(self, line_no: int) -> bool:
        """Whether a line lies in a torchrun summary's "Failures:" section (the other ranks' exits)."""
        return any(lo < line_no < hi for lo, hi in self._others)

    def role_of(self, match: Match) -> Role:
        sig = match.signature
        if sig.id in self._voided:
            return Role.INFO
        if sig.id in _SIGKILL_IDS and self.in_other_failures(match.line_no):
            # The agent's own SIGKILL of the surviving workers (after SIGTERM's grace period), not
            # the OOM killer: it says nothing about why the job failed.
            return Role.INFO
        if sig.role is Role.ROOT and self.in_other_failures(match.line_no):
            return Role.KNOCK_ON
        if sig.id in _SIGKILL_IDS and self._launcher_kill_at is not None and match.line_no > self._launcher_kill_at:
            return Role.KNOCK_ON
        if (self.terminated_at is not None and match.line_no > self.terminated_at
                and not sig.terminates and sig.role is Role.ROOT and sig.category in _TEARDOWN):
            return Role.KNOCK_ON
        return sig.role
