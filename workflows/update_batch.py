"""The bound on one batched update, shared by the entity workflows that take one and the batcher that sends it.

Concurrent asks of the node memory and the drain breaker go together as one update
(activities.adapters.update_batch); each workflow's validator refuses a batch outside the bound.
"""

from __future__ import annotations

# An update's payload stays far below Temporal's 2 MB blob limit (a request is well under 4 KB).
MAX_BATCH = 100
# The node memory's consultations: a 500-job storm filled batches of 100 (#29), and an
# observation names its job's every node, so its batches are bounded in bytes as well.
MEMORY_MAX_BATCH = 500
MEMORY_MAX_BYTES = 512 * 1024


def check_batch(size: int, what: str, limit: int = MAX_BATCH) -> None:
    """An update validator's check: 1 to `limit` `what` in one batch."""
    if not 0 < size <= limit:
        raise ValueError(f"a batch holds 1 to {limit} {what}, not {size}")
