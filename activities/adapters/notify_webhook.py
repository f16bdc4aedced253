"""Webhook notifier: incidents posted as JSON to Slack-compatible incoming webhooks (or any URL).

The body carries both Slack's `text` (so a Slack, Mattermost or Teams-compatible webhook shows a
readable line) and the full notification under `goodput`, for tools that want structure. Failures
raise, so the notify activity retries them; the JSON-lines notifier stays the local record.
"""

from __future__ import annotations

from typing import Any

import httpx

from goodput.incident import Notification


class WebhookError(RuntimeError):
    pass


def webhook_body(notification: Notification, ui_url: str | None = None) -> dict[str, Any]:
    link = f" <{ui_url}/namespaces/default/workflows/{notification.incident_id}|open>" if ui_url else ""
    text = f"goodput {notification.incident_id} [{notification.state}]: {notification.summary}{link}"
    return {"text": text, "goodput": notification.model_dump(mode="json")}


class WebhookNotifier:
    def __init__(self, url: str, *, ui_url: str | None = None, timeout_s: float = 10.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._url = url
        self._ui_url = ui_url
        self._client = httpx.AsyncClient(timeout=timeout_s, transport=transport, follow_redirects=False)

    async def notify(self, notification: Notification) -> None:
        try:
            response = await self._client.post(self._url, json=webhook_body(notification, self._ui_url))
        except httpx.HTTPError as err:
            raise WebhookError(f"webhook {self._url} unreachable: {err}") from err
        if response.status_code >= 300:
            raise WebhookError(f"webhook {self._url} answered {response.status_code}: {response.text[:200]}")


class FanOutNotifier:
    """Every notifier hears every notification; the first failure is raised after all were tried."""

    def __init__(self, *notifiers: Any) -> None:
        self._notifiers = notifiers

    async def notify(self, notification: Notification) -> None:
        errors: list[Exception] = []
        for notifier in self._notifiers:
            try:
                await notifier.notify(notification)
            except Exception as err:  # one broken channel must not silence the others
                errors.append(err)
        if errors:
            raise errors[0]
