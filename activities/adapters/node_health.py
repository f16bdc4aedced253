"""Return to service, the effects: the health check as a command, and the NodeHealth workflows.

`CommandNodeCheck` runs the site's check (its argv from `policy.return_to_service.check_command`,
with the node's name filled in) as a child process of the worker, without a shell, with a time
limit; the exit status decides and the output's tail is kept as evidence. Whether the command
reaches the node through `srun -w`, `ssh` or a site tool is the site's choice, as it is for the
Slurm backends. `TemporalNodeHealth` starts (or signals) a node's NodeHealthWorkflow after goodput
drained it, naming the incident and the shared faults whose drain the return may undo.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy

from goodput.recover.node_health import MAX_OUTPUT, CheckResult, ReturnToServicePolicy
from goodput.recover.spares import SparePolicy
from workflows.node_health import NodeHealthStart, NodeHealthWorkflow, node_health_workflow_id


class CommandNodeCheck:
    async def run(self, argv: tuple[str, ...], timeout_s: float) -> CheckResult:
        if not argv:
            return CheckResult(passed=False, ran=False,
                               detail="no health check configured (policy.return_to_service.check_command)")
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as err:
            return CheckResult(passed=False, ran=False, detail=f"cannot run {argv[0]}: {err.strerror or err}")
        try:
            output, _ = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            await process.wait()
            return CheckResult(passed=False, ran=False, detail=f"timed out after {timeout_s:.0f} s")
        tail = output.decode("utf-8", "replace")[-MAX_OUTPUT + 40:].strip()
        status = process.returncode
        return CheckResult(passed=status == 0, detail=f"exit {status}" + (f": {tail}" if tail else ""))


class TemporalNodeHealth:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    async def drained(self, cluster: str, node: str, incident_id: str, policy: ReturnToServicePolicy, *,
                      rule: str = "", spares: SparePolicy | None = None, faults: tuple[str, ...] = ()) -> None:
        # The faults go with the signal only when there are any: a drain with the incident's own
        # reason signals exactly what a worker from before them expects.
        signal_args: list[object] = [incident_id, list(faults)] if faults else [incident_id]
        await self._client.start_workflow(
            NodeHealthWorkflow.run, NodeHealthStart(cluster=cluster, node=node, incident_id=incident_id,
                                                    policy=policy, spares=spares, rule=rule, faults=faults),
            id=node_health_workflow_id(cluster, node), task_queue=self._task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            start_signal="drained_again", start_signal_args=signal_args)
