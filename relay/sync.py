"""The relay's websocket client: hello, then snapshots and patches, heartbeats both ways.

It reconnects with full-jitter exponential backoff (0.1 s doubling to 10 s). A patch that does
not start at the version the relay holds makes it ask again (a new ``Hello``); the control plane
then sends the full snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

import websockets
from websockets.asyncio.client import ClientConnection

from relay.persistence import SnapshotFiles
from relay.settings import RelaySettings
from relay.store import EnvironmentState, Store
from shared.engine import CompileError
from shared.wire import protocol as p
from shared.wire.snapshot import Snapshot

logger = logging.getLogger("vane.relay.sync")

MAX_BACKOFF_S = 10.0


class SyncClient:
    def __init__(self, settings: RelaySettings, store: Store, files: SnapshotFiles) -> None:
        self.settings = settings
        self.store = store
        self.files = files
        self.heartbeat_s = settings.heartbeat_s
        self.connects = 0

    async def run(self) -> None:
        attempt = 0
        while True:
            try:
                await self._session()
                attempt = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: back off and reconnect
                logger.warning("upstream %s: %s", self.settings.websocket_url, exc)
            finally:
                self.store.connected = False
            attempt += 1
            await asyncio.sleep(random.uniform(0, min(MAX_BACKOFF_S, 0.1 * 2**attempt)))

    async def _session(self) -> None:
        async with websockets.connect(
            self.settings.websocket_url,
            additional_headers={"Authorization": f"Bearer {self.settings.key}"},
            max_size=None,
            ping_interval=None,  # the protocol has its own heartbeats
            open_timeout=10,
        ) as socket:
            await socket.send(
                p.encode(p.Hello(relay=self.settings.relay_id, versions=self.store.versions()))
            )
            self.connects += 1
            self.store.connected = True
            self.store.upstream_alive()
            heartbeat = asyncio.create_task(self._heartbeat(socket))
            try:
                async for frame in socket:
                    if isinstance(frame, str):
                        continue
                    self.store.upstream_alive()
                    await self._handle(socket, p.decode_to_relay(frame))
            finally:
                heartbeat.cancel()
                with contextlib.suppress(BaseException):
                    await heartbeat

    async def _handle(self, socket: ClientConnection, message: p.ToRelay) -> None:
        match message:
            case p.Welcome(environments=environments, heartbeat_ms=heartbeat_ms):
                self.store.expected = frozenset(environments)
                self.heartbeat_s = heartbeat_ms / 1000
                self.store.stale_after = max(self.settings.stale_after_s, 3 * self.heartbeat_s)
                for environment in set(self.store.states) - set(environments):
                    logger.warning("no longer allowed to serve %s; dropping it", environment)
                    del self.store.states[environment]
            case p.SnapshotMessage(snapshot=snapshot, access=access):
                self._accept(snapshot, access)
            case p.Patch() as patch:
                current = self.store.get(patch.environment)
                if current is None or current.version != patch.from_version:
                    logger.info("patch %s does not follow our version; resyncing", patch.version)
                    await socket.send(
                        p.encode(
                            p.Hello(relay=self.settings.relay_id, versions=self.store.versions())
                        )
                    )
                    return
                self._accept(p.apply_patch(current.snapshot, patch), patch.access or current.access)
            case p.Ping(sent_at=sent_at):
                await socket.send(p.encode(p.Pong(sent_at=sent_at)))
            case p.Pong():
                pass

    def _accept(self, snapshot: Snapshot, access: p.Access) -> None:
        try:
            state = EnvironmentState.build(
                snapshot, access, previous=self.store.get(snapshot.environment)
            )
        except CompileError as exc:  # never expected: the control plane validates on write
            logger.error(
                "refusing version %s of %s: %s", snapshot.version, snapshot.environment, exc
            )
            return
        self.store.swap(state)
        self.files.schedule(snapshot, access)

    async def _heartbeat(self, socket: ClientConnection) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            if time.monotonic() - self.store.last_upstream_message > 3 * self.heartbeat_s:
                await socket.close(4408, "no heartbeat from the control plane")
                return
            await socket.send(p.encode(p.Ping(sent_at=time.time_ns() // 1_000_000)))
