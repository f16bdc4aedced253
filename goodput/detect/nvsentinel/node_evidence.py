"""The evidence-only events seen per node, kept to show beside a later fatal one.

`NodeEvidence` keeps the last evidence-only events per node (STORE_ONLY, advice, events
NVSentinel was told not to drain for): never acted on, but what led up to a fault is worth
reading beside it. Bounded in nodes and lines, since the node names come from the network.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from datetime import datetime


class NodeEvidence:
    """The last few evidence-only events per node (bounded in nodes and lines), as one-line summaries."""

    def __init__(self, per_node: int, max_nodes: int) -> None:
        self._per_node = per_node
        self._max_nodes = max_nodes
        self._lines: OrderedDict[str, deque[tuple[datetime, str]]] = OrderedDict()

    def record(self, node: str, at: datetime, line: str) -> None:
        if self._per_node <= 0:
            return
        lines = self._lines.pop(node, None) or deque(maxlen=self._per_node)
        lines.append((at, line))
        self._lines[node] = lines
        while len(self._lines) > self._max_nodes:
            self._lines.popitem(last=False)

    def recent(self, node: str, since: datetime) -> list[str]:
        return [line for at, line in self._lines.get(node, ()) if at >= since]

    def nodes(self) -> int:
        return len(self._lines)
