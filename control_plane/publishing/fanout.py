"""Between control-plane replicas: a Redis pub/sub notice per committed change.

The notice names the environments; each replica recompiles them from the shared database and
pushes to its own relays. A notice lost while Redis was away is caught by the hub's periodic
reconcile, which compares versions with the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterable

from redis import asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from control_plane.publishing.hub import Hub
from shared.backoff import Backoff

logger = logging.getLogger("vane.fanout")

CHANNEL = "vane:environments-changed"


class RedisFanout:
    def __init__(self, url: str, hub: Hub, replica_id: str) -> None:
        self._url = url
        self._hub = hub
        self._replica_id = replica_id
        self._redis: aioredis.Redis | None = None
        self._task: asyncio.Task[None] | None = None
        self.subscribed = asyncio.Event()
        self._backoff = Backoff(base=0.2, cap=5.0)

    async def start(self) -> None:
        self._redis = aioredis.from_url(self._url)
        self._task = asyncio.create_task(self._listen_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        if self._redis is not None:
            await self._redis.aclose()

    async def publish(self, project_id: str, environment_ids: Iterable[str]) -> None:
        if self._redis is None:
            return
        notice = json.dumps(
            {
                "origin": self._replica_id,
                "project": project_id,
                "environments": sorted(environment_ids),
            }
        )
        for attempt in range(3):
            try:
                await self._redis.publish(CHANNEL, notice)
                return
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                # a pooled connection that died while Redis was away fails once; redis-py then
                # connects afresh, so try again before giving up on this notice
                if attempt == 2:
                    logger.warning("could not publish a change notice to Redis: %s", exc)
                    return
                await asyncio.sleep(0.05 * (attempt + 1))
            except Exception:  # Redis away: the other replicas' reconcile will catch up
                logger.exception("could not publish a change notice to Redis")
                return

    async def _listen_forever(self) -> None:
        """Subscribe, and resubscribe after any failure (capped, jittered backoff); whatever was
        published meanwhile is caught up from the database. Ends only by cancellation."""
        backoff = self._backoff
        while True:
            reason: object = "the subscription ended"
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = exc
            self.subscribed.clear()
            delay = backoff.failed()
            logger.warning("Redis subscription lost (%s); retrying in %.1f s", reason, delay)
            await asyncio.sleep(delay)
            try:
                await self._hub.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("catching up after Redis came back failed; will retry")

    async def _listen(self) -> None:
        assert self._redis is not None
        pubsub = self._redis.pubsub()
        try:
            await pubsub.subscribe(CHANNEL)
            self.subscribed.set()
            self._backoff.reset()
            logger.info("subscribed to Redis channel %s", CHANNEL)
            async for message in pubsub.listen():
                if message.get("type") != "message":
                    continue
                notice = json.loads(message["data"])
                if notice.get("origin") == self._replica_id:
                    continue
                await self._hub.refresh(notice.get("environments", []))
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
