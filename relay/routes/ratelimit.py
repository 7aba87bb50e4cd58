"""Per-key rate limits of the browser endpoints: a token bucket per key, 429 past it."""

from __future__ import annotations

import time

from relay.http import ErrorBody, Response, cors_headers
from shared.ratelimit import RateLimiter


class RateGate:
    """``per_s`` requests a second per key with bursts of ``burst``; ``per_s <= 0`` is no limit."""

    __slots__ = ("limiter",)

    def __init__(self, per_s: float, burst: int) -> None:
        self.limiter = RateLimiter(per_s, burst) if per_s > 0 else None

    def check(self, key_id: str, origin: bytes | None, error_body: ErrorBody) -> Response | None:
        """429 with ``Retry-After`` when the key is over its rate, else None."""
        if self.limiter is None:
            return None
        wait = self.limiter.retry_after(key_id, time.monotonic())
        if not wait:
            return None
        headers = cors_headers(origin)
        headers.append((b"retry-after", str(wait).encode()))
        return Response(429, error_body(429, "rate limit exceeded"), headers)
