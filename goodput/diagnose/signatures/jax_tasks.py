"""The JAX process XLA's coordination service names on the lines after its message.

When a JAX process stops sending heartbeats, XLA's coordination service tells every other process
"The following tasks are unhealthy (stopped sending heartbeats):" and lists the tasks, one per
line, before "The tasks have crashed." (openxla/xla, coordination_service.cc). A task is
`/job:jax_worker/replica:0/task:N`, N being JAX's `process_id`, the job's rank. `jax-tasks-unhealthy`
reads the rank only where a log flattened the message onto one line; printed as XLA prints it, the
names are on the following lines, which say nothing alone (`jax-task-name-line`). Read together:
one task listed is the rank that crashed; several name no single one.
"""

from __future__ import annotations

from collections.abc import Sequence

from goodput.diagnose.signatures.model import LineContext, Match, Role, Signature
from goodput.models import Category, CulpritKind

UNHEALTHY_ID = "jax-tasks-unhealthy"
TASK_LINE_ID = "jax-task-name-line"
# The listing follows the message at once; XLA prints no more task names than the job has.
MAX_LISTED = 64

UNHEALTHY_NAMED = Signature(
    id="jax-tasks-unhealthy-named", family="jax", category=Category.UNKNOWN, culprit_kind=CulpritKind.RANK,
    role=Role.KNOCK_ON, precedence=27, pattern=r"\A\z", literals=("jax-tasks-unhealthy-named",),
    restart=True, drain=False,
    source=("OpenXLA, xla/tsl/distributed_runtime/coordination/coordination_service.cc, CheckHeartbeatTimeout "
            "('The following tasks are unhealthy (stopped sending heartbeats):', then each task's name on a line "
            "of its own, then 'The tasks have crashed'), propagated to every task by error polling"),
    explanation=("XLA's coordination service listed one JAX process as unhealthy (it stopped sending heartbeats): "
                 "in the service's words it crashed (or was preempted). The process that prints this is a "
                 "knock-on; the named one is the fault, and its own log holds the cause. Restart the job."))


def unhealthy_named(hits: Sequence[Match], task_lines: Sequence[Match]) -> Match | None:
    """The service's message re-labelled with the one task listed under it; None where it names the
    rank on its own line, lists several tasks, or none follows."""
    # The line's own launcher prefix (`[0] `) is the rank that printed it, never the one it names.
    unnamed = [m for m in hits if m.signature.id == UNHEALTHY_ID and not (m.groups.get("rank") or m.groups.get("task"))]
    by_line = {m.line_no: m for m in task_lines}
    for message in unnamed:
        listed: list[str] = []
        line = message.line_no + 1
        while line in by_line and len(listed) <= MAX_LISTED:
            listed.append(by_line[line].groups.get("code", ""))
            line += 1
        if len(set(listed)) == 1 and listed[0]:
            return Match(signature=UNHEALTHY_NAMED, line_no=message.line_no, text=message.text,
                         groups={"rank": listed[0]}, context=LineContext())
    return None
