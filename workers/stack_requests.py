"""The service's side of the stack captures a hang incident asks of node agents, over the heartbeat.

The service never connects to a node. A request sits in the in-memory `StackRequestTable`
(`goodput.detect.stack_requests`, filled by the `capture_stacks` activity in this same process);
the node's agent learns of it in the response to its own heartbeat (`pending`, called with the
node the heartbeat's token proved, so a node sees its own requests only), captures, and POSTs the
result to `/v1/stacks` with the same token. That endpoint checks the token against the node the
body names, reads at most `MAX_RESULT_BYTES`, validates the result (bounded dumps, a known request
for this node and job) and answers with a typed error otherwise: 401 a token that is not this
node's, 413 a body over the bound, 400 a malformed result, 409 a request that is unknown, expired,
or not this node's. A repeated answer is accepted and ignored (an agent retrying a lost reply).
A restart of this process loses the open requests; the waiting incident then goes on at its bound.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from goodput.detect.stack_requests import MAX_RESULT_BYTES, NodeStacks, StackRequestTable, StackResultError
from goodput.identifiers import validate_node_name
from workers.agent_requests import AgentRequestRefused, agent_json_body, refusal, require_node_token

log = logging.getLogger("goodput.liveness")

STACKS_PATH = "/v1/stacks"


class StackEndpoint:
    """`POST /v1/stacks`, and the pending requests a node's heartbeat response carries."""

    def __init__(self, table: StackRequestTable, cluster: str, secret: bytes, clock: Callable[[], datetime]) -> None:
        self.table = table
        self._cluster = cluster
        self._secret = secret
        self._clock = clock
        self.accepted = 0
        self.rejected = 0

    def route(self) -> Route:
        return Route(STACKS_PATH, self._post, methods=["POST"])

    def pending(self, node: str) -> list[dict[str, str]]:
        """What `node` (proved by its token) is asked to capture now: request id and job id only."""
        return [p.model_dump() for p in self.table.pending_for(node, self._clock())]

    def _refuse(self, status: int, message: str) -> JSONResponse:
        self.rejected += 1
        return refusal(status, message)

    async def _post(self, request: Request) -> JSONResponse:
        try:
            body = await agent_json_body(request, MAX_RESULT_BYTES, "a stack result")
            try:
                sent = json.loads(body)
                if not isinstance(sent, dict):
                    raise ValueError("not a JSON object")
                node = validate_node_name(str(sent.get("node", ""))[:256])
                cluster = str(sent.get("cluster", ""))[:256]
            except (ValueError, TypeError, RecursionError) as err:
                raise AgentRequestRefused(400, f"bad stack result: {str(err)[:200]}") from err
            require_node_token(request, self._secret, self._cluster, cluster, node)
        except AgentRequestRefused as refused:
            return self._refuse(refused.status, refused.message)
        try:
            result = NodeStacks.model_validate(sent.get("result"))
        except ValidationError as err:
            return self._refuse(400, f"bad stack result: {err.errors(include_url=False, include_input=False)!s:.300}")
        try:
            fresh = self.table.answer(node, result, self._clock())
        except StackResultError as err:
            return self._refuse(409, str(err))
        if fresh:
            self.accepted += 1
            log.info("stacks from %s for job %s: %d dump(s), %d signalled, %d skipped%s", node, result.job_id,
                     len(result.dumps), len(result.signalled), len(result.skipped),
                     f" ({result.error})" if result.error else "")
        return JSONResponse({"request_id": result.request_id, "accepted": fresh})
