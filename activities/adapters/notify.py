"""Webhook notifier: incidents posted as JSON to Slack-compatible incoming webhooks (or any URL).

The body carries both Slack's `text` (so a Slack, Mattermost or Teams-compatible webhook shows a
readable line) and the full notification under `goodput`, for tools that want structure. Failures
raise, so the notify activity retries them; the JSON-lines notifier stays the local record.

A webhook URL is a credential (whoever has a Slack incoming-webhook URL can post to the channel),
and an activity's error message ends up in workflow history, visible to everyone with UI access:
errors name only the URL's scheme and host, and never chain the HTTP library's exception (whose
text may carry the full URL). For the same reason proxy variables and .netrc are never read.
"""

from __future__ import annotations

from typing import Any

import httpx

from goodput.recover.incident import Notification


class WebhookError(RuntimeError):
    pass


def redacted(url: str) -> str:
    """`https://hooks.slack.com/services/T0/B0/XYZ` -> `https://hooks.slack.com/…`."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "<webhook URL>"
    return f"{parsed.scheme}://{parsed.host}/…" if parsed.host else "<webhook URL>"


def webhook_body(notification: Notification, ui_url: str | None = None) -> dict[str, Any]:
    link = f" <{ui_url}/namespaces/default/workflows/{notification.incident_id}|open>" if ui_url else ""
    text = f"goodput {notification.incident_id} [{notification.state}]: {notification.summary}{link}"
    return {"text": text, "goodput": notification.model_dump(mode="json")}


class WebhookNotifier:
    def __init__(self, url: str, *, ui_url: str | None = None, timeout_s: float = 10.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._url = url
        self._ui_url = ui_url
        # trust_env=False: a proxy named by the environment would see the whole URL (the
        # credential), and a .netrc would add a header of its own choosing.
        self._client = httpx.AsyncClient(timeout=timeout_s, transport=transport, follow_redirects=False,
                                         trust_env=False)

    async def notify(self, notification: Notification) -> None:
        where = redacted(self._url)
        try:
            response = await self._client.post(self._url, json=webhook_body(notification, self._ui_url))
        except httpx.HTTPError as err:
            detail = str(err).replace(self._url, where)
            raise WebhookError(f"webhook {where} unreachable: {type(err).__name__}: {detail}") from None
        if response.status_code >= 300:
            body = response.text[:200].replace(self._url, where)
            raise WebhookError(f"webhook {where} answered {response.status_code}: {body}")


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
