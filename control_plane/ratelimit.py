"""Per-key rate limits on the control plane: a token bucket per API key (``VANE_RATE_LIMIT``
requests a second, ``VANE_RATE_BURST`` at once), shared by every replica through Redis when
``VANE_REDIS_URL`` is set, in this process's memory otherwise. Over the limit: 429 with
``Retry-After``. Relay keys are not limited: they carry every browser's events and a relay retries
on its own schedule.

The Redis flavour runs ``shared.ratelimit.take``'s arithmetic in one Lua script, on Redis's clock,
so a bucket is read and written atomically whichever replica a request reaches. If Redis cannot
be reached the request passes (and the failure is logged): a rate limit never takes the API down.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from shared.ratelimit import RateLimiter, bucket_size

logger = logging.getLogger("vane.ratelimit")

_TAKE = """
local rate = tonumber(ARGV[1])
local size = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(bucket[1]) or size
local at = tonumber(bucket[2]) or now
tokens = math.min(size, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = math.max(1, math.ceil((1 - tokens) / rate))
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(size / rate * 1000) + 1000)
return wait
"""


class Limiter(Protocol):
    async def retry_after(self, key_id: str) -> int:
        """0 if a request with this key may pass now (and takes a token), else seconds to wait."""
        ...


class LocalLimiter:
    def __init__(self, rate_per_s: float, burst: int) -> None:
        self._buckets = RateLimiter(rate_per_s, burst)

    async def retry_after(self, key_id: str) -> int:
        return self._buckets.retry_after(key_id, time.monotonic())


class RedisLimiter:
    def __init__(self, redis_url: str, rate_per_s: float, burst: int) -> None:
        self._redis: Redis = Redis.from_url(redis_url, socket_timeout=1, socket_connect_timeout=1)
        self._take = self._redis.register_script(_TAKE)
        self._rate = rate_per_s
        self._size = bucket_size(rate_per_s, burst)

    async def retry_after(self, key_id: str) -> int:
        try:
            wait = await self._take(
                keys=[f"vane:ratelimit:{key_id}"], args=[self._rate, self._size]
            )
        except RedisError:
            logger.warning("rate limit not checked: Redis is unavailable", exc_info=True)
            return 0
        return int(wait)

    async def close(self) -> None:
        await self._redis.aclose()


def make_limiter(rate_per_s: float, burst: int, redis_url: str | None) -> Limiter | None:
    if rate_per_s <= 0:
        return None
    if redis_url:
        return RedisLimiter(redis_url, rate_per_s, burst)
    return LocalLimiter(rate_per_s, burst)
