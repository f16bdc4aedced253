"""The `Notifier` seam: how people hear about incidents (recommendations, escalations, outcomes).

The default writes JSON lines to a file an operator can tail or ship; Slack, PagerDuty or email
adapters implement the same Protocol.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from goodput.recover.incident import Notification


@runtime_checkable
class Notifier(Protocol):
    """Tells people about an incident (a recommendation, an escalation, an outcome)."""
    async def notify(self, notification: Notification) -> None:
        """Deliver one notification; a failure raises (the activity retries it)."""
        ...


class JsonLinesNotifier:
    """Appends notifications as JSON lines to a file an operator can tail or ship."""
    def __init__(self, path: Path) -> None:
        self._path = path

    async def notify(self, notification: Notification) -> None:
        """Append the notification as one JSON line."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        with self._path.open("a", encoding="utf-8") as out:
            out.write(notification.model_dump_json() + "\n")
