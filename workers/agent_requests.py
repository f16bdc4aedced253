"""What every endpoint the node agents POST to checks, in one place and one order.

The heartbeat, the GPU feed and the stack results share a listener and a credential: a node's
token (an HMAC of its name, `goodput.detect.node_liveness.heartbeat_authentic`) proves which node
speaks. Each endpoint refuses, before anything else, a body that is not JSON (415) or that says it
is larger than that endpoint's limit (413), reads no further than the limit whatever it said
(workers.http_site.read_body), and, once it has parsed the node and cluster the body claims, a
token that is not that node's on this cluster (401). A check written three times is a check that
one day differs; here it cannot.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from goodput.detect.node_liveness import heartbeat_authentic
from workers.http_site import content_length, content_type, json_error, read_body


class AgentRequestRefused(Exception):
    """An agent's request refused: the HTTP status and the message to send back."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def agent_json_body(request: Request, limit: int, what: str) -> bytes:
    """The raw JSON body, read no further than `limit`; 415 or 413 first (`what`: "a heartbeat")."""
    if content_type(request) != "application/json":
        raise AgentRequestRefused(415, "send application/json")
    declared = content_length(request)
    if declared is not None and declared > limit:
        raise AgentRequestRefused(413, f"{what} is at most {limit} bytes")
    return await read_body(request, limit)


def require_node_token(request: Request, secret: bytes, cluster: str, claimed_cluster: str, node: str) -> None:
    """401 unless the bearer token is `node`'s own on this cluster (and the body claims this cluster)."""
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer" or claimed_cluster != cluster or not heartbeat_authentic(
            token.strip(), secret, cluster, node):
        raise AgentRequestRefused(401, "missing or invalid token for this node")


def refusal(status: int, message: str) -> JSONResponse:
    """The typed JSON error an agent gets; a 401 names the scheme it must use."""
    challenge = {"WWW-Authenticate": 'Bearer realm="goodput-heartbeat"'} if status == 401 else None
    return json_error(status, message, challenge)
