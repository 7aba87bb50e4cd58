"""The ``Publisher`` that takes what one commit changed (``change.Change``) to the relays.

A service says what its write altered (``Scope.changed``: these flags, these segments, or a
reason such as ``access`` that needs more than single keys); the request's unit of work
(``control_plane.deps.provide_scope``) commits and hands the gathered ``Change`` to the
publisher exactly once. Publishing runs in the background: a committed write is answered with
its success whatever publishing does, and the hub's reconciler (comparing served versions with
the database) delivers anything a failed or lost publication missed.

- ``LocalPublisher``: this replica's hub compiles the change and marks the relays to send it to.
- ``RedisPublisher``: the same, and the change travels over Redis pub/sub to every other
  replica, whose hub applies it to its own relays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
from redis import asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy import select

from control_plane.db.models import Deployment
from control_plane.publishing.change import Change
from control_plane.publishing.hub import Hub
from shared.backoff import Backoff

logger = logging.getLogger("vane.publishing")


class Publisher(Protocol):
    """Takes a committed change to the relays; called once per commit that changed anything."""

    def publish(self, change: Change) -> None:
        """Start publishing ``change`` in the background; never raises, never waits."""

    async def start(self) -> None: ...

    async def stop(self) -> None:
        """Finish publications under way, then release what ``start`` took."""


@dataclass
class LocalPublisher:
    """Publishes to this replica's relays through its hub."""

    hub: Hub
    failures: int = 0
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def publish(self, change: Change) -> None:
        self.hub.announce(change)
        self._background(self._deliver_announced(change))

    async def _deliver_announced(self, change: Change) -> None:
        try:
            await self.deliver(change)
        finally:
            self.hub.settle(change)

    async def deliver(self, change: Change) -> None:
        try:
            await self.hub.apply(change)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.failures += 1
            logger.exception(
                "publishing a change to %s failed; the reconciler will deliver it",
                ", ".join(sorted(change.environments)),
            )

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def channel_of(deployment_id: str) -> str:
    """The pub/sub channel of one deployment: two deployments sharing a Redis never hear each
    other's changes, and every replica of one reads the same id from the database it shares."""
    return f"vane:{deployment_id}:changes"


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Change).decode


class RedisPublisher(LocalPublisher):
    """Publishes to this replica's relays and, over Redis pub/sub, to every other replica's.

    A change lost while Redis was away is caught by each hub's reconcile; after a lost
    subscription this replica reconciles at once.
    """

    def __init__(self, hub: Hub, url: str, replica_id: str) -> None:
        super().__init__(hub)
        self._url = url
        self._replica_id = replica_id
        self._redis: aioredis.Redis | None = None
        self._listener: asyncio.Task[None] | None = None
        self.subscribed = asyncio.Event()
        self._backoff = Backoff(base=0.2, cap=5.0)
        self.channel = ""

    def publish(self, change: Change) -> None:
        super().publish(change)  # a listener of its own: a failed local push does not stop it
        self._background(self._announce(change))

    async def start(self) -> None:
        async with self.hub.sessionmaker() as session:
            deployment = await session.scalar(select(Deployment.id))
        if deployment is None:
            raise RuntimeError("the database has no deployment id: run the migrations")
        self.channel = channel_of(deployment)
        self._redis = aioredis.from_url(self._url)
        self._listener = asyncio.create_task(self._listen_forever())

    async def stop(self) -> None:
        await super().stop()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(BaseException):
                await self._listener
        if self._redis is not None:
            await self._redis.aclose()

    async def _announce(self, change: Change) -> None:
        if self._redis is None:
            return
        notice = _encode(msgspec.structs.replace(change, origin=self._replica_id))
        for attempt in range(3):
            try:
                await self._redis.publish(self.channel, notice)
                return
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                # a pooled connection that died while Redis was away fails once; redis-py then
                # connects afresh, so try again before giving up on this notice
                if attempt == 2:
                    logger.warning("could not publish a change to Redis: %s", exc)
                    return
                await asyncio.sleep(0.05 * (attempt + 1))
            except Exception:  # Redis away: the other replicas' reconcile will catch up
                logger.exception("could not publish a change to Redis")
                return

    async def _listen_forever(self) -> None:
        """Subscribe, and resubscribe after any failure (capped, jittered backoff); whatever was
        published meanwhile is caught up from the database. Ends only by cancellation."""
        while True:
            reason: object = "the subscription ended"
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = exc
            self.subscribed.clear()
            delay = self._backoff.failed()
            logger.warning("Redis subscription lost (%s); retrying in %.1f s", reason, delay)
            await asyncio.sleep(delay)
            try:
                await self.hub.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("catching up after Redis came back failed; will retry")

    async def _listen(self) -> None:
        assert self._redis is not None
        pubsub = self._redis.pubsub()
        try:
            await pubsub.subscribe(self.channel)
            self.subscribed.set()
            self._backoff.reset()
            logger.info("subscribed to Redis channel %s", self.channel)
            async for message in pubsub.listen():
                if message.get("type") != "message":
                    continue
                try:
                    change = _decode(message["data"])
                except msgspec.ValidationError:
                    logger.warning("ignoring a malformed change notice on %s", self.channel)
                    continue
                if change.origin != self._replica_id:
                    await self.deliver(change)
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
