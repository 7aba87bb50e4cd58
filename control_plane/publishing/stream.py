"""The websocket relays connect to (``rsk_`` key): see ``shared.wire.protocol``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from litestar import WebSocket, websocket
from litestar.exceptions import WebSocketDisconnect
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.auth import KeyKind, Principal, find_principal, requires
from control_plane.db.models import Environment
from control_plane.publishing.hub import Connection, Hub
from shared.clock import now_ms
from shared.wire import protocol as p

logger = logging.getLogger("vane.publishing")

CLOSE_REVOKED = 4401
CLOSE_PROTOCOL = 4400
CLOSE_SILENT = 4408
CLOSE_RESTART = 1012  # the control plane is stopping: reconnect (to another replica)


class RelaySession:
    """One connected relay: a sender, a receiver and a heartbeat, sharing one send lock."""

    def __init__(
        self, socket: WebSocket[Any, Any, Any], hub: Hub, connection: Connection, heartbeat_s: float
    ) -> None:
        self.socket = socket
        self.hub = hub
        self.connection = connection
        self.heartbeat_s = heartbeat_s
        self.last_heard = time.monotonic()
        self._send_lock = asyncio.Lock()

    async def send(self, frame: bytes) -> None:
        async with self._send_lock:
            await self.socket.send_bytes(frame)

    async def sender(self) -> None:
        while True:
            await self.connection.wake.wait()
            if self.connection.closing:
                await self.socket.close(CLOSE_RESTART, "the control plane is stopping")
                return
            self.connection.wake.clear()
            for frame in await self.hub.frames_for(self.connection):
                await self.send(frame)

    async def receiver(self) -> None:
        while True:
            message = p.decode_to_control_plane(await self.socket.receive_bytes())
            self.last_heard = time.monotonic()
            match message:
                case p.Hello(versions=versions):  # a relay asking to resync
                    self.connection.versions = dict(versions)
                    for environment_id in self.connection.environment_ids:
                        self.connection.mark(environment_id)
                case p.Ping(sent_at=sent_at, refused=refused):
                    if refused is not None:
                        self.hub.relay_refused(self.connection, refused)
                    await self.send(p.encode(p.Pong(sent_at=sent_at)))
                case p.Pong():
                    pass

    async def heartbeat(self, token: str) -> None:
        sessionmaker: async_sessionmaker[AsyncSession] = self.socket.app.state.sessionmaker
        while True:
            await asyncio.sleep(self.heartbeat_s)
            if time.monotonic() - self.last_heard > 3 * self.heartbeat_s:
                await self.socket.close(CLOSE_SILENT, "no heartbeat from relay")
                return
            environments: dict[str, int] | None = None
            try:
                async with sessionmaker() as session:
                    revoked = await find_principal(session, token) is None
                    if not revoked:
                        environments = await committed_versions(
                            session, self.connection.environment_ids
                        )
            except (SQLAlchemyError, OSError) as exc:
                # the database is away: keep serving the relay what it has; check next beat
                logger.warning("could not check relay %s's key: %s", self.connection.relay_id, exc)
                revoked = False
            if revoked:
                await self.socket.close(CLOSE_REVOKED, "relay key revoked")
                return
            await self.send(p.encode(p.Ping(sent_at=now_ms(), environments=environments)))


async def committed_versions(
    session: AsyncSession, environment_ids: frozenset[str]
) -> dict[str, int]:
    """The newest committed version of each of ``environment_ids`` that still exists, by key."""
    rows = await session.execute(
        select(Environment.key, Environment.snapshot_version).where(
            Environment.id.in_(sorted(environment_ids))
        )
    )
    return {row.key: row.snapshot_version for row in rows}


@websocket("/relay/stream", guards=[requires(KeyKind.RELAY)], include_in_schema=False)
async def relay_stream(socket: WebSocket[Principal, str, Any]) -> None:
    hub: Hub = socket.app.state.hub
    heartbeat_s: float = socket.app.state.settings.heartbeat_s
    principal = socket.user
    await socket.accept()
    try:
        hello = p.decode_to_control_plane(await socket.receive_bytes())
    except WebSocketDisconnect:
        return
    if not isinstance(hello, p.Hello):
        await socket.close(CLOSE_PROTOCOL, "the first message must be hello")
        return
    environments = await hub.environments_of(principal.project_id, principal.environment_id)
    names = {e.key for e in environments}
    connection = Connection(
        relay_id=hello.relay,
        project_id=principal.project_id,
        environment_ids=frozenset(e.id for e in environments),
        bound=principal.environment_id is not None,
        versions={key: v for key, v in hello.versions.items() if key in names},
        heartbeat_ms=int(heartbeat_s * 1000),
    )
    session = RelaySession(socket, hub, connection, heartbeat_s)
    await session.send(
        p.encode(
            p.Welcome(
                environments=tuple(e.key for e in environments),
                heartbeat_ms=connection.heartbeat_ms,
            )
        )
    )
    for environment in environments:
        connection.mark(environment.id)
    hub.attach(connection)
    logger.info("relay %s connected (%d environments)", hello.relay, len(environments))
    tasks = [
        asyncio.create_task(session.sender()),
        asyncio.create_task(session.receiver()),
        asyncio.create_task(session.heartbeat(socket.auth)),
    ]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = task.exception()
            if error is not None and not isinstance(error, WebSocketDisconnect):
                logger.warning("relay %s stream ended: %r", hello.relay, error)
    finally:
        hub.detach(connection)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        logger.info("relay %s disconnected", hello.relay)
