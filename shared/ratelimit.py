"""Per-key token buckets (pure): ``rate`` tokens a second up to ``burst``; a request takes one.

Used as is by relays (per public key, per process) and by a control plane without Redis; the
control plane's Redis flavour (``control_plane.ratelimit``) runs the same arithmetic in one Lua
script, so replicas share each key's bucket.
"""

from __future__ import annotations

import math


def bucket_size(rate_per_s: float, burst: int) -> float:
    """The bucket's capacity: ``burst``, or one second's worth of requests when unset."""
    return float(burst if burst > 0 else max(1, math.ceil(rate_per_s)))


def take(tokens: float, elapsed_s: float, rate_per_s: float, size: float) -> tuple[float, int]:
    """Refill a bucket holding ``tokens`` for ``elapsed_s`` and take one token.

    Returns the tokens left and 0 if the request may pass, or the tokens (unchanged but refilled)
    and the whole seconds to wait (``Retry-After``) if it may not.
    """
    tokens = min(size, tokens + max(0.0, elapsed_s) * rate_per_s)
    if tokens >= 1.0:
        return tokens - 1.0, 0
    return tokens, max(1, math.ceil((1.0 - tokens) / rate_per_s))


class RateLimiter:
    """A token bucket per key id, in this process's memory."""

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate = rate_per_s
        self.burst = bucket_size(rate_per_s, burst)
        self.buckets: dict[str, list[float]] = {}  # key id -> [tokens, monotonic time]

    def retry_after(self, key_id: str, now: float) -> int:
        """0 when a request may pass (and take a token), else whole seconds to wait."""
        bucket = self.buckets.get(key_id)
        if bucket is None:
            bucket = self.buckets[key_id] = [self.burst, now]
        bucket[0], wait = take(bucket[0], now - bucket[1], self.rate, self.burst)
        bucket[1] = now
        return wait
