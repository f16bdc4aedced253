"""TokenReview under a flood of made-up bearer tokens (issue #26): an unauthenticated gRPC peer
must not buy one API-server call per token, nor evict the connector's cached verdict."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from activities.adapters.nvsentinel import TokenReviewer
from goodput.detect.nvsentinel import TokenReviewSettings

SA_USER = "system:serviceaccount:nvsentinel:platform-connector"
GOOD = "projected-sa-token-of-the-connector"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reviewer(tmp_path: Path, reviews: list[str], clock: Clock) -> TokenReviewer:
    (tmp_path / "sa").write_text("goodput-own-sa-token")

    def answer(request: httpx.Request) -> httpx.Response:
        token = json.loads(request.content)["spec"]["token"]
        reviews.append(token)
        status = {"authenticated": True, "user": {"username": SA_USER}} if token == GOOD else {"authenticated": False}
        return httpx.Response(201, json={"status": status})

    settings = TokenReviewSettings(enabled=True, api_url="https://kubernetes.default.svc", allowed_users=(SA_USER,),
                                   token_file=tmp_path / "sa", cache_s=60)
    return TokenReviewer(settings, transport=httpx.MockTransport(answer), clock=clock)


async def test_a_flood_of_made_up_tokens_is_rate_limited_and_evicts_nothing(tmp_path: Path) -> None:
    reviews: list[str] = []
    clock = Clock()
    checker = reviewer(tmp_path, reviews, clock)
    try:
        assert await checker.check(GOOD) is True
        verdicts = [await checker.check(f"made-up-token-{i:05d}") for i in range(3000)]
        assert verdicts.count(True) == 0
        assert len(reviews) <= 1 + 20, len(reviews)  # a burst, not one call per token
        assert await checker.check(GOOD) is True and reviews.count(GOOD) == 1  # still cached
        assert await checker.check("made-up-token-00000") is False and reviews.count("made-up-token-00000") == 1
        clock.now += 61  # the connector's verdict expired, the bucket is still drained by the flood
        for i in range(100):
            await checker.check(f"more-made-up-{i}")
        assert await checker.check(GOOD) is True  # a token that passed before is reviewed again at once
        assert reviews.count(GOOD) == 2
    finally:
        await checker.aclose()
