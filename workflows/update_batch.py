"""The bound on one batched update, shared by the entity workflows that take one and the batcher that sends it.

Concurrent asks of the node memory and the drain breaker go together as one update
(activities.adapters.update_batch); each workflow's validator refuses a batch outside the bound.
"""

from __future__ import annotations

# An update's payload stays far below Temporal's 2 MB blob limit (a request is well under 4 KB).
MAX_BATCH = 100
# An observation names its job's every node (a 1,000-node job's is about 20 KB), so the node
# memory's batches are bounded in bytes as well, far below that limit.
MEMORY_MAX_BYTES = 512 * 1024


def check_batch(size: int, what: str) -> None:
    """An update validator's check: 1 to MAX_BATCH `what` in one batch."""
    if not 0 < size <= MAX_BATCH:
        raise ValueError(f"a batch holds 1 to {MAX_BATCH} {what}, not {size}")
