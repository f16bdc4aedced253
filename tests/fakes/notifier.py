"""A notifier that remembers what it was told, for tests and the demo."""

from __future__ import annotations

from goodput.recover.incident import Notification


class RecordingNotifier:
    def __init__(self) -> None:
        self.sent: list[Notification] = []

    async def notify(self, notification: Notification) -> None:
        self.sent.append(notification)
