"""The relay's websocket client: hello, then snapshots and patches, heartbeats both ways.

Upstreams are tried in order (``--upstream`` may be repeated; the first is preferred): a failed
connection moves on to the next at once, and only when every one failed does the client back off
(``shared.backoff``: full jitter, capped at ``backoff_cap_s``, never overflowing however long the
outage). Each new round starts again from the preferred upstream, so a relay that failed over
returns to it once it is back and the current one goes away.

Versions only move forward at the relay: a snapshot or patch not newer than what it serves (a
lagging control-plane replica, a duplicate) is refused and logged, never served. A patch that
does not start at the version the relay holds makes it ask again (a new ``Hello`` naming its
versions); the control plane then sends what the relay lacks.

A version whose snapshot does not compile is refused: the relay keeps serving the last good one,
says so (``/readyz`` not ready with the reason, ``vane_relay_refused_versions``, and its
heartbeat ``Ping`` to the control plane), logs it once, and asks for the environment's full
snapshot rather than the patch again; the first good version published serves at once.

An environment the control plane no longer names in a ``Welcome`` (sent again when one is
deleted) or in its heartbeat ``Ping`` is removed cleanly: its keys stop resolving at once, its
open event streams end, its disk copy is deleted. The ``Ping`` also names the newest committed
version of each environment, so a relay the control plane failed to send a change to reports
itself behind (``/readyz`` ``versionsBehind``) instead of current.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

import websockets
from websockets.asyncio.client import ClientConnection

from relay.persistence import SnapshotFiles
from relay.settings import RelaySettings, websocket_url
from relay.store import EnvironmentState, Store
from shared.backoff import Backoff
from shared.clock import now_ms
from shared.engine import CompileError
from shared.wire import protocol as p

logger = logging.getLogger("vane.relay.sync")

Sleep = Callable[[float], Awaitable[None]]


class SyncClient:
    def __init__(
        self,
        settings: RelaySettings,
        store: Store,
        files: SnapshotFiles,
        *,
        sleep: Sleep = asyncio.sleep,
        backoff: Backoff | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.files = files
        self.heartbeat_s = settings.heartbeat_s
        self.connects = 0
        self.failures = 0  # connection attempts that failed, all upstreams
        self.refused = 0  # snapshots/patches refused for not being newer
        self.upstream = settings.upstream_urls[0]  # the one connected to, or tried last
        self.backoff = backoff or Backoff(base=0.1, cap=settings.backoff_cap_s)
        self._sleep = sleep

    async def run(self) -> None:
        """Connect, serve the session, and on any failure try the next upstream; never ends
        except by cancellation."""
        while True:
            for upstream in self.settings.upstream_urls:
                self.upstream = self.store.upstream = upstream
                try:
                    await self._session(upstream)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # any failure: next upstream, then back off
                    self.failures += 1
                    level = logging.WARNING if self.backoff.attempt < 10 else logging.DEBUG
                    logger.log(level, "upstream %s: %s", upstream, exc or type(exc).__name__)
                finally:
                    self.store.connected = False
            delay = self.backoff.failed()
            if self.backoff.attempt % 100 == 0:
                logger.warning(
                    "%d rounds without a control plane (%s); still retrying",
                    self.backoff.attempt,
                    ", ".join(self.settings.upstream_urls),
                )
            await self._sleep(delay)

    async def _session(self, upstream: str) -> None:
        async with websockets.connect(
            websocket_url(upstream),
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
            self.backoff.reset()
            logger.info("connected to %s", upstream)
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
                self._drop_all_but(environments)
            case p.SnapshotMessage(snapshot=snapshot, access=access):
                self.store.note_offered(snapshot.environment, snapshot.version)
                previous = self.store.get(snapshot.environment)
                refusing = snapshot.environment in self.store.refusing
                accepted = self._accept(
                    snapshot.environment,
                    snapshot.version,
                    lambda: EnvironmentState.build(snapshot, access, previous=previous),
                )
                if refusing != (snapshot.environment in self.store.refusing) or not accepted:
                    await self._report_refusals(socket)
            case p.Patch() as patch:
                self.store.note_offered(patch.environment, patch.version)
                current = self.store.get(patch.environment)
                if current is not None and patch.version <= current.version:
                    self._refuse(patch.environment, patch.version, current.version)
                    return
                if current is None or current.version != patch.from_version:
                    logger.info("patch %s does not follow our version; resyncing", patch.version)
                    await self._resync(socket)
                    return
                base = current
                refusing = patch.environment in self.store.refusing
                if not self._accept(
                    patch.environment,
                    patch.version,
                    lambda: EnvironmentState.patched(base, patch),
                    patch,
                ):
                    await self._report_refusals(socket)
                    await self._resync(socket)  # the whole snapshot, not this patch again
                elif refusing:  # recovered: the control plane hears it now, not a heartbeat later
                    await self._report_refusals(socket)
            case p.Ping(sent_at=sent_at, environments=committed):
                await socket.send(p.encode(p.Pong(sent_at=sent_at)))
                if committed is not None:
                    for environment, version in committed.items():
                        self.store.note_offered(environment, version)
                    self._drop_all_but(committed)
            case p.Pong():
                pass

    async def _resync(self, socket: ClientConnection) -> None:
        """Ask for what the relay lacks: ``Hello`` naming the version held of each environment,
        except those holding back a refused version, whose full snapshot it asks for instead (a
        patch chain from the held version would replay the patch it refused)."""
        versions = {
            env: version
            for env, version in self.store.versions().items()
            if env not in self.store.refusing
        }
        await socket.send(p.encode(p.Hello(relay=self.settings.relay_id, versions=versions)))

    async def _report_refusals(self, socket: ClientConnection) -> None:
        """Tell the control plane at once which versions the relay refuses, when that changes (a
        refusal, a recovery); every heartbeat says it again."""
        await socket.send(p.encode(self._ping()))

    def _ping(self) -> p.Ping:
        return p.Ping(sent_at=now_ms(), refused=dict(self.store.refusing))

    def _drop_all_but(self, environments: Iterable[str]) -> None:
        """Stop serving every environment upstream no longer names (deleted, or the key lost
        access): its keys stop resolving at once, its streams end, its disk copy goes."""
        for environment in sorted(set(self.store.states) - set(environments)):
            logger.warning("no longer allowed to serve %s; dropping it", environment)
            self.store.remove(environment)
            self.files.schedule_removal(environment)

    def _refuse(self, environment: str, version: int, current: int) -> None:
        self.refused += 1
        logger.warning(
            "refusing version %d of %s from %s: serving %d already (a lagging replica?)",
            version,
            environment,
            self.upstream,
            current,
        )

    def _accept(
        self,
        environment: str,
        version: int,
        build: Callable[[], EnvironmentState],
        patch: p.Patch | None = None,
    ) -> bool:
        """Serve the state ``build`` makes (a full snapshot, or ``patch`` of the state held) if
        ``version`` moves ``environment`` forward; save it (a patch: appended to the log).

        False if it does not compile (never expected: the control plane checks writes and what
        it publishes with the same engine): the last good version goes on being served, the
        refusal is reported (``/readyz`` not ready, ``/metrics``, the control plane) and logged
        once per version, and nothing of it is saved, so a restart never loads it."""
        if not self.store.is_newer(environment, version):
            current = self.store.version(environment)
            assert current is not None
            self._refuse(environment, version, current)
            return True
        try:
            state = build()
        except CompileError as exc:
            reason = f"{exc.path}: {exc.message}" if exc.path else exc.message
            if self.store.refuse(environment, version, reason):
                logger.error(
                    "refusing version %d of %s from %s, serving %s: %s",
                    version,
                    environment,
                    self.upstream,
                    self.store.version(environment) or "nothing",
                    reason,
                )
            return False
        self.store.swap(state)
        self.files.schedule(state.snapshot, state.access, patch)
        return True

    async def _heartbeat(self, socket: ClientConnection) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            if time.monotonic() - self.store.last_upstream_message > 3 * self.heartbeat_s:
                await socket.close(4408, "no heartbeat from the control plane")
                return
            await socket.send(p.encode(self._ping()))
