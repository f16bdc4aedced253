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
    could not be asked, or not now: the caller should retry later). Answers are cached per token
    digest for `cache_s`, so a connector sending one event after another costs one review a minute.

    The gRPC port takes calls before anyone is authenticated, so a flood of made-up tokens must
    cost neither an API-server call each nor the connector's verdict: refusals have their own
    bounded cache (they can evict only each other), and tokens never accepted before are reviewed
    at most `reviews_per_s` a second (burst `review_burst`); past that they are answered None
    (UNAVAILABLE, retry later). A token accepted before is reviewed again at once when its verdict
    expires. The client reads no proxy or certificate variables from the environment.
    """

    MAX_CACHED = 1024
    MAX_ACCEPTED = 64

    def __init__(self, settings: TokenReviewSettings, *, transport: httpx.AsyncBaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        verify: ssl.SSLContext | bool = True
        if settings.ca_file is not None:
            verify = ssl.create_default_context(cafile=str(settings.ca_file.expanduser()))
        self._client = httpx.AsyncClient(base_url=settings.api_url.rstrip("/"), verify=verify, trust_env=False,
                                         timeout=settings.timeout_s, transport=transport)
        self._accepted: OrderedDict[str, float] = OrderedDict()  # digest -> expiry
        self._refused: OrderedDict[str, float] = OrderedDict()
        self._known: OrderedDict[str, None] = OrderedDict()  # accepted once: never rate-limited
        self._allowance = float(settings.review_burst)
        self._refilled = clock()
        self.reviews = 0
        self.limited = 0

    async def aclose(self) -> None:
        await self._client.aclose()

    async def check(self, token: str) -> bool | None:
        if not token or len(token) > 16_384:
            return False
        key = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
        now = self._clock()
        if self._accepted.get(key, now) > now:
            return True
        if self._refused.get(key, now) > now:
            return False
        if key not in self._known and not self._take(now):
            self.limited += 1
            if self.limited in (1, 10, 100) or self.limited % 1000 == 0:
                log.warning("NVSentinel: %d gRPC call(s) with unknown tokens over the TokenReview rate "
                            "(%g/s): answered UNAVAILABLE", self.limited, self._settings.reviews_per_s)
            return None
        verdict = await self._review(token)
        if verdict is True:
            _remember(self._accepted, key, now + self._settings.cache_s, self.MAX_ACCEPTED)
            self._known.pop(key, None)
            self._known[key] = None
            while len(self._known) > self.MAX_ACCEPTED:
                self._known.popitem(last=False)
        elif verdict is False:
            _remember(self._refused, key, now + self._settings.cache_s, self.MAX_CACHED)
        return verdict

    def _take(self, now: float) -> bool:
        """One review from the token bucket."""
        settings = self._settings
        self._allowance = min(float(settings.review_burst),
                              self._allowance + (now - self._refilled) * settings.reviews_per_s)
        self._refilled = now
        if self._allowance < 1:
            return False
        self._allowance -= 1
        return True

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


def _remember(cache: OrderedDict[str, float], key: str, expiry: float, limit: int) -> None:
    cache.pop(key, None)
    cache[key] = expiry
    while len(cache) > limit:
        cache.popitem(last=False)
