"""NVSentinel's own duplicate key, and the window of events already handled under it.

NVSentinel delivers at least once: `DedupWindow` remembers the events already handled, so an
at-least-once redelivery costs no scheduler call and opens nothing twice. Bounded in time and in
keys, since the keys come from the network.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from datetime import datetime, timedelta

from goodput.detect.nvsentinel.events import HealthEvent


def dedup_key(event: HealthEvent) -> str:
    """NVSentinel's own duplicate key: node, check, entities, error codes, strategy, healthy.

    Lists are sorted, so a redelivery that lists the same entities in another order is the same
    event. The generated timestamp is not part of it: a monitor re-reporting a standing condition
    is the same condition.
    """
    entities = sorted(f"{e.entity_type}={e.entity_value}" for e in event.entities_impacted)
    parts = [event.node_name, event.check_name, "\x1f".join(entities), "\x1f".join(sorted(event.error_code)),
             event.processing_strategy.value, str(event.is_healthy)]
    return hashlib.sha256("\x1e".join(parts).encode("utf-8", "replace")).hexdigest()[:32]


class DedupWindow:
    """Event keys handled in the last `window_s`, at most `max_keys` of them (oldest forgotten first).

    A healthy event for a (node, check) forgets what was remembered for it: after the condition
    cleared, the same fault again is a new fault. All operations are O(1) amortised.
    """

    def __init__(self, window_s: float, max_keys: int) -> None:
        self._window = timedelta(seconds=window_s)
        self._max = max_keys
        self._expiry: OrderedDict[str, datetime] = OrderedDict()
        self._by_check: dict[tuple[str, str], set[str]] = {}
        self._check_of: dict[str, tuple[str, str]] = {}

    def __len__(self) -> int:
        return len(self._expiry)

    def seen(self, key: str, now: datetime) -> bool:
        self._expire(now)
        return key in self._expiry

    def remember(self, key: str, node: str, check: str, now: datetime) -> None:
        self._drop(key)
        self._expiry[key] = now + self._window
        self._by_check.setdefault((node, check), set()).add(key)
        self._check_of[key] = (node, check)
        while len(self._expiry) > self._max:
            self._drop(next(iter(self._expiry)))

    def forget_check(self, node: str, check: str) -> int:
        keys = self._by_check.pop((node, check), set())
        for key in keys:
            self._expiry.pop(key, None)
            self._check_of.pop(key, None)
        return len(keys)

    def _expire(self, now: datetime) -> None:
        while self._expiry:
            key, expires = next(iter(self._expiry.items()))
            if expires > now:
                return
            self._drop(key)

    def _drop(self, key: str) -> None:
        if self._expiry.pop(key, None) is None:
            return
        check = self._check_of.pop(key, None)
        if check is not None:
            keys = self._by_check.get(check)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_check[check]
