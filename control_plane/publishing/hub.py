"""Per-environment snapshot feeds and the relays connected to this control-plane replica.

After a commit, ``Hub.apply`` takes what it changed (from the publisher) and, per environment,
reads only that from the database (``compiler.compile_change``: the changed flags and segments)
into the next snapshot and the patch from the previous version, then marks the environment
pending on every relay connection that reads it. Only when the hub does not hold the version
just before the commit's (it missed a change, or never built the feed) or the change is not one
of flags, segments, experiments or access, does it compile the whole environment
(``Hub.refresh``, also what the reconciler uses). The full snapshot frame is encoded only when a
relay needs it.

Delivery is latest-wins per relay: a connection holds at most one pending marker per
environment, and its sender decides at send time what to send — nothing if the relay is
current, the chain of patches from the relay's version if the feed still has it, or the full
snapshot. A slow relay therefore never queues more than one item per environment, and never
delays the others (each connection has its own sender task).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.db.models import ApiKey, Environment
from control_plane.publishing.compiler import compile_change, compile_environment
from shared.wire import protocol as p
from shared.wire.snapshot import Snapshot

if TYPE_CHECKING:
    from control_plane.publishing.publisher import Change, EnvironmentChange

logger = logging.getLogger("vane.publishing")

PATCH_HISTORY = 64


@dataclass
class Feed:
    """The newest snapshot of one environment and the recent patches that led to it."""

    environment_id: str
    project_id: str
    snapshot: Snapshot
    access: p.Access
    patches: deque[tuple[p.Patch, bytes]] = field(
        default_factory=lambda: deque(maxlen=PATCH_HISTORY)
    )
    _full_frame: bytes | None = None

    @property
    def full_frame(self) -> bytes:
        """The encoded full snapshot (encoded on first use: most changes never need it)."""
        if self._full_frame is None:
            self._full_frame = p.encode(
                p.SnapshotMessage(snapshot=self.snapshot, access=self.access)
            )
        return self._full_frame

    @property
    def key(self) -> str:
        return self.snapshot.environment

    @property
    def version(self) -> int:
        return self.snapshot.version

    def frames_since(self, version: int | None) -> list[bytes]:
        """What a relay at ``version`` needs: nothing, consecutive patches, or the full snapshot."""
        if version == self.version:
            return []
        chain = self.patches_since(version)
        return [frame for _patch, frame in chain] if chain is not None else [self.full_frame]

    def patches_since(self, version: int | None) -> list[tuple[p.Patch, bytes]] | None:
        """The consecutive patches from ``version`` to this one; None if not held."""
        patches = list(self.patches)
        for index, (patch, _frame) in enumerate(patches):
            if patch.from_version == version:
                return patches[index:]
        return None


@dataclass(eq=False)
class Connection:
    """One relay's websocket: what it may read, what it holds, what is pending for it."""

    relay_id: str
    project_id: str
    environment_ids: frozenset[str]
    bound: bool = False  # the relay key reads one environment; else every one of the project
    versions: dict[str, int] = field(default_factory=dict)  # by environment key
    pending: set[str] = field(default_factory=set)  # environment ids
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def mark(self, environment_id: str) -> None:
        self.pending.add(environment_id)
        self.wake.set()


class Hub:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker
        self.feeds: dict[str, Feed] = {}
        self.connections: set[Connection] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._announced: dict[str, int] = {}  # environment id -> changes announced, not applied

    # --- building feeds ---------------------------------------------------------------------

    async def _access(self, session: AsyncSession, environment: Environment) -> p.Access:
        rows = await session.execute(
            select(
                ApiKey.id, ApiKey.kind, ApiKey.secret_hash, ApiKey.origins, ApiKey.environment_id
            )
            .where(ApiKey.project_id == environment.project_id, ApiKey.revoked_at.is_(None))
            .order_by(ApiKey.id)
        )
        # Every live key of the project, so a relay can tell a key of the wrong kind (403) from
        # an unknown one (401) and accept management keys where the API does. Public keys and
        # server keys bound to an environment appear in their own environment's snapshot only.
        keys = tuple(
            p.AccessKey(
                id=key_id,
                kind=kind,
                hash=secret_hash,
                origins=tuple(origins or ()),
                environment=environment.key if kind == "server" and env_id else None,
            )
            for key_id, kind, secret_hash, origins, env_id in rows
            if env_id is None or kind == "relay" or env_id == environment.id
        )
        return p.Access(keys=keys)

    async def _build(
        self, environment_id: str, newer_than: int | None
    ) -> tuple[str, Snapshot, p.Access] | None:
        """(project id, snapshot, access) in one session; None if the environment is gone or not
        newer than ``newer_than`` (already compiled, e.g. the reconciler raced a request)."""
        async with self._sessionmaker() as session:
            environment = await session.get(Environment, environment_id)
            if environment is None:
                return None
            if newer_than is not None and environment.snapshot_version <= newer_than:
                return None
            snapshot = await compile_environment(session, environment)
            access = await self._access(session, environment)
            return environment.project_id, snapshot, access

    async def feed(self, environment_id: str) -> Feed | None:
        """The environment's feed, compiled on first use."""
        feed = self.feeds.get(environment_id)
        if feed is None:
            await self.refresh_one(environment_id)
            feed = self.feeds.get(environment_id)
        return feed

    def announce(self, change: Change) -> None:
        """A committed change is on its way to ``apply``: the reconciler leaves its environments
        alone meanwhile (it would compile them whole, racing the change's own patch)."""
        for environment_id in change.environments:
            self._announced[environment_id] = self._announced.get(environment_id, 0) + 1

    def settle(self, change: Change) -> None:
        """An announced change was applied, or failed to be (the reconciler then delivers it)."""
        for environment_id in change.environments:
            left = self._announced.get(environment_id, 1) - 1
            if left > 0:
                self._announced[environment_id] = left
            else:
                self._announced.pop(environment_id, None)

    async def apply(self, change: Change) -> None:
        """Publish one commit's change: per environment, read and ship only what it touched."""
        for environment_id, what in sorted(change.environments.items()):
            await self.apply_one(change.project_id, environment_id, what)

    async def apply_one(
        self, project_id: str, environment_id: str, what: EnvironmentChange
    ) -> None:
        lock = self._locks.setdefault(environment_id, asyncio.Lock())
        async with lock:
            old = self.feeds.get(environment_id)
            if old is None:
                pass  # no relay read it yet: compiled when one does (``feed``), not now
            elif "environment" in what.reasons:
                built = await self._build(environment_id, old.version)
                if built is None:
                    return
                project_id, snapshot, access = built
                self._install(environment_id, project_id, snapshot, access, old, None)
            else:
                if what.version is not None and what.version <= old.version:
                    return  # already in what this replica serves (compiled whole meanwhile)
                async with self._sessionmaker() as session:
                    environment = await session.get(Environment, environment_id)
                    if environment is None or environment.snapshot_version <= old.version:
                        return  # gone, or already published (the reconciler raced us)
                    if what.since == old.version and what.version is not None:
                        # this very change follows what is served: compile only what it touched,
                        # under its own version (a later change's notice brings the rest)
                        snapshot, patch = await compile_change(
                            session,
                            environment,
                            old.snapshot,
                            flags=what.flags,
                            segments=what.segments,
                            experiments="experiments" in what.reasons,
                            version=what.version,
                        )
                    else:  # changes this replica was not told about (yet) came between
                        snapshot = await compile_environment(session, environment)
                        patch = None
                    access = (
                        await self._access(session, environment)
                        if "access" in what.reasons or patch is None
                        else old.access
                    )
                    project_id = environment.project_id
                if patch is not None and access != old.access:
                    patch = msgspec.structs.replace(patch, access=access)
                self._install(environment_id, project_id, snapshot, access, old, patch)
        self._mark(environment_id, project_id)

    def _install(
        self,
        environment_id: str,
        project_id: str,
        snapshot: Snapshot,
        access: p.Access,
        old: Feed | None,
        patch: p.Patch | None,
    ) -> None:
        """Make ``snapshot`` the environment's feed; keep the patch from ``old`` to it."""
        feed = Feed(environment_id, project_id, snapshot, access)
        if old is not None:
            feed.patches = old.patches
            if patch is None:
                patch = p.diff(old.snapshot, snapshot, access if access != old.access else None)
            feed.patches.append((patch, p.encode(patch)))
        self.feeds[environment_id] = feed

    async def refresh(self, environment_ids: Iterable[str]) -> None:
        for environment_id in sorted(set(environment_ids)):
            await self.refresh_one(environment_id)

    async def refresh_one(self, environment_id: str) -> None:
        """Recompile one environment; if its version moved on, tell every relay that reads it."""
        lock = self._locks.setdefault(environment_id, asyncio.Lock())
        async with lock:
            old = self.feeds.get(environment_id)
            built = await self._build(environment_id, old.version if old is not None else None)
            if built is None:
                return
            project_id, snapshot, access = built
            self._install(environment_id, project_id, snapshot, access, old, None)
        self._mark(environment_id, project_id)

    def _mark(self, environment_id: str, project_id: str) -> None:
        for connection in self.connections:
            if environment_id not in connection.environment_ids:
                if connection.bound or connection.project_id != project_id:
                    continue
                # an environment created while the relay is connected: it reads that one too
                connection.environment_ids = connection.environment_ids | {environment_id}
            connection.mark(environment_id)

    async def reconcile(self) -> None:
        """Catch up with changes this replica was not told about (a missed Redis notice)."""
        if not self.feeds:
            return
        async with self._sessionmaker() as session:
            rows = await session.execute(
                select(Environment.id, Environment.snapshot_version).where(
                    Environment.id.in_(list(self.feeds))
                )
            )
            stale = [
                env_id
                for env_id, version in rows
                if version > self.feeds[env_id].version and env_id not in self._announced
            ]
        await self.refresh(stale)

    async def environments_of(
        self, project_id: str, environment_id: str | None
    ) -> list[Environment]:
        async with self._sessionmaker() as session:
            query = select(Environment).where(Environment.project_id == project_id)
            if environment_id is not None:
                query = query.where(Environment.id == environment_id)
            return list(
                await session.scalars(query.order_by(Environment.created_at, Environment.key))
            )

    # --- serving relays -----------------------------------------------------------------------

    def attach(self, connection: Connection) -> None:
        self.connections.add(connection)

    def detach(self, connection: Connection) -> None:
        self.connections.discard(connection)

    async def frames_for(self, connection: Connection) -> list[bytes]:
        """Everything pending for ``connection``; updates what it is known to hold."""
        frames: list[bytes] = []
        while connection.pending:
            environment_id = connection.pending.pop()
            feed = await self.feed(environment_id)
            if feed is None:
                continue
            held = connection.versions.get(feed.key)
            if held is not None and held > feed.version:
                # the relay is ahead of this replica (it missed a notice): catch up from the
                # database; never send the relay something older than it holds
                await self.refresh_one(environment_id)
                connection.pending.discard(environment_id)
                feed = self.feeds[environment_id]
                if held > feed.version:
                    logger.warning(
                        "relay %s holds %s v%d, newer than this replica's v%d; sending nothing",
                        connection.relay_id,
                        feed.key,
                        held,
                        feed.version,
                    )
                    continue
            frames.extend(feed.frames_since(held))
            connection.versions[feed.key] = feed.version
        return frames


async def run_reconciler(hub: Hub, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            await hub.reconcile()
        except Exception:
            logger.exception("reconciling snapshot feeds failed; retrying in %.0f s", every_s)


def now_ms() -> int:
    return time.time_ns() // 1_000_000
