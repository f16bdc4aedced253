"""Kubernetes TokenReview: NVSentinel's projected ServiceAccount tokens, vouched for by the API server.

NVSentinel's chart means its grpc sink's `tokenPath` to be a projected ServiceAccount token, which
only the Kubernetes API server can validate; the gRPC receiver asks it, and caches the answer.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import httpx

from goodput.detect.nvsentinel import TokenReviewSettings

log = logging.getLogger("goodput.nvsentinel")


class TokenReviewer:
    """Asks the Kubernetes API server whether a bearer token is a valid ServiceAccount token of an
    allowed user (`authentication.k8s.io/v1` TokenReview), as NVSentinel expects of a grpc sink.

    `check` answers True (valid, allowed), False (invalid, or another user) or None (the API server
    could not be asked: the caller should retry later). Answers are cached per token digest for
    `cache_s` (at most `MAX_CACHED` tokens), so a connector sending one event after another costs
    one review a minute. The client reads no proxy or certificate variables from the environment.
    """

    MAX_CACHED = 1024

    def __init__(self, settings: TokenReviewSettings, *, transport: httpx.AsyncBaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        verify: ssl.SSLContext | bool = True
        if settings.ca_file is not None:
            verify = ssl.create_default_context(cafile=str(settings.ca_file.expanduser()))
        self._client = httpx.AsyncClient(base_url=settings.api_url.rstrip("/"), verify=verify, trust_env=False,
                                         timeout=settings.timeout_s, transport=transport)
        self._cache: OrderedDict[str, tuple[bool, float]] = OrderedDict()
        self.reviews = 0

    async def aclose(self) -> None:
        await self._client.aclose()

    async def check(self, token: str) -> bool | None:
        if not token or len(token) > 16_384:
            return False
        key = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        verdict = await self._review(token)
        if verdict is not None:
            self._cache.pop(key, None)
            self._cache[key] = (verdict, now + self._settings.cache_s)
            while len(self._cache) > self.MAX_CACHED:
                self._cache.popitem(last=False)
        return verdict

    async def _review(self, token: str) -> bool | None:
        settings = self._settings
        body: dict[str, Any] = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                "spec": {"token": token}}
        if settings.audiences:
            body["spec"]["audiences"] = list(settings.audiences)
        self.reviews += 1
        try:
            own = settings.token_file.expanduser().read_text(encoding="utf-8").strip()
            response = await self._client.post("/apis/authentication.k8s.io/v1/tokenreviews", json=body,
                                               headers={"Authorization": f"Bearer {own}"})
            if response.status_code not in (200, 201):
                log.warning("NVSentinel: TokenReview answered HTTP %d; refusing for now", response.status_code)
                return None
            status = response.json().get("status") or {}
        except (OSError, httpx.HTTPError, ValueError) as err:
            log.warning("NVSentinel: TokenReview failed (%s: %s); refusing for now", type(err).__name__, err)
            return None
        user = (status.get("user") or {}).get("username") if isinstance(status, dict) else None
        if not (isinstance(status, dict) and status.get("authenticated") is True and user in settings.allowed_users):
            log.warning("NVSentinel: a gRPC call's token was refused by TokenReview (user %r)", user)
            return False
        return not settings.audiences or bool(set(status.get("audiences") or ()) & set(settings.audiences))
