"""Preflight and CORS for admin origins, and per-key rate limits in one process (no Redis)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from control_plane.app import create_app
from control_plane.settings import Settings
from shared.ratelimit import RateLimiter

ADMIN = "https://admin.example"


@pytest.fixture
def client(database_url: str) -> Iterator[tuple[TestClient[Any], dict[str, str]]]:
    settings = Settings(
        database_url=database_url,
        admin_origins=(ADMIN,),
        rate_limit_per_s=0.01,  # two at once, then one per 100 s
        rate_limit_burst=2,
    )
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        keys = {key.kind.value: key.token for key in app.state.issued_keys}
        yield test_client, keys


def test_admin_origins_get_cors_and_others_do_not(
    client: tuple[TestClient[Any], dict[str, str]],
) -> None:
    test_client, _ = client
    preflight = test_client.options(
        "/api/v1/flags",
        headers={
            "Origin": ADMIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "Authorization, Content-Type",
        },
    )
    assert preflight.status_code in {200, 204}
    assert preflight.headers["access-control-allow-origin"] == ADMIN
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    stranger = test_client.options(
        "/api/v1/flags",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert stranger.headers.get("access-control-allow-origin") != "https://evil.example"


def test_each_key_has_its_own_bucket_and_429_says_when(
    client: tuple[TestClient[Any], dict[str, str]],
) -> None:
    test_client, keys = client

    def flags(kind: str) -> Any:
        return test_client.get("/api/v1/flags", headers={"Authorization": f"Bearer {keys[kind]}"})

    assert [flags("management").status_code for _ in range(3)] == [200, 200, 429]
    refused = flags("management")
    assert refused.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 100
    server = test_client.post(
        "/api/v1/track",
        json={"unit": "u", "event": "e"},
        headers={"Authorization": f"Bearer {keys['server']}"},
    )
    assert server.status_code == 200  # another key, another bucket
    relay = [
        test_client.post(
            "/api/v1/events",
            json={"events": [{"unit": "u", "event": "e"}]},
            headers={"Authorization": f"Bearer {keys['relay']}"},
        ).status_code
        for _ in range(4)
    ]
    assert relay == [200] * 4  # relay keys carry every browser's events: not limited


def test_token_bucket_refills_at_its_rate() -> None:
    limiter = RateLimiter(rate_per_s=2, burst=2)
    assert [limiter.retry_after("k", 0.0) for _ in range(3)] == [0, 0, 1]
    assert limiter.retry_after("k", 0.4) == 1  # 0.8 of a token so far
    assert limiter.retry_after("k", 0.5) == 0  # one whole token at 0.5 s
    assert limiter.retry_after("other", 0.5) == 0
