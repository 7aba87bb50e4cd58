"""Per-environment histories (an environment's current snapshot and the recent patches to it)
and the relays connected to this control-plane replica.

After a commit, ``Hub.apply`` takes what it changed (from the publisher) and, per environment,
reads only that from the database (``domain.snapshots.compile_change``: the changed flags and
segments) into the next snapshot and the patch from the previous version, then marks the
environment pending on every relay connection that reads it. Only when the hub does not hold the version
just before the commit's (it missed a change, or never built the history) or the change is not one
of flags, segments, experiments or access, does it compile the whole environment
(``Hub.refresh``, also what the reconciler uses). The full snapshot frame is encoded only when a
relay needs it.

A flag, segment or experiment that cannot be encoded for the wire (stored before the API bounded
its values) never stops its environment from publishing: the item is left out — the relays keep
the last version of it they were sent, if any — and reported (``Hub.left_out``, the control
plane's ``/readyz`` and ``/metrics``, an error in the log). An environment whose publication
fails for any other reason is reported the same way (``Hub.failing``) until one succeeds; so is
a snapshot the relays' engine would refuse (a prerequisite or segment cycle the write checks
missed, data written behind the API): every snapshot is compiled as relays compile it before it
is published (``compiled_as_relays_would``), and what does not compile is never sent: the
item it names is left out like one the wire cannot carry (counted in the failures, too), so a
kill switch of any other flag still goes out at once.
Deleted environments (``Change.removed``, or found gone by the reconciler) leave every history
and connection at once: a relay is sent a new ``Welcome`` without them, a provider's stream ends.

Delivery is latest-wins per relay: a connection holds at most one pending marker per
environment, and its sender decides at send time what to send — nothing if the relay is
current, the chain of patches from the relay's version if the history still has it, or the full
snapshot. A slow relay therefore never queues more than one item per environment, and never
delays the others (each connection has its own sender task).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.db.models import ApiKey, Environment
from control_plane.domain.snapshots import compile_change, compile_environment
from control_plane.publishing.change import Change, EnvironmentChange
from shared.engine import CompiledEnvironment, CompileError, compile_patch, compile_snapshot
from shared.wire import protocol as p
from shared.wire.snapshot import Snapshot

logger = logging.getLogger("vane.publishing")

PATCH_HISTORY = 64
UNENCODABLE = (OverflowError, TypeError, ValueError, msgspec.EncodeError)
"""What msgspec raises for a value the wire cannot carry (an integer past 64 bits, above all)."""
_item_encoder = msgspec.msgpack.Encoder()
ITEM_KINDS = ("flags", "segments", "experiments")


def leave_out_unencodable(
    snapshot: Snapshot, previous: Snapshot | None
) -> tuple[Snapshot, dict[str, str]]:
    """``snapshot`` without the flags, segments and experiments that cannot be encoded, each
    replaced by its version in ``previous`` (what relays were last sent) when there is one; and
    why each was left out (``{"flags.<key>": reason}``). Items shared with ``previous`` were
    encoded before and are not checked again."""
    left_out: dict[str, str] = {}
    unencodable: list[tuple[str, str]] = []
    for kind in ITEM_KINDS:
        items: dict[str, Any] = getattr(snapshot, kind)
        before: dict[str, Any] = getattr(previous, kind) if previous is not None else {}
        for key, item in items.items():
            if before.get(key) is item:
                continue
            try:
                _item_encoder.encode(item)
            except UNENCODABLE as exc:
                left_out[f"{kind}.{key}"] = f"cannot be encoded for the relays: {exc}"
                unencodable.append((kind, key))
    for kind, key in unencodable:  # what relays were sent differs: it was encoded
        snapshot = leave_out_item(snapshot, previous, kind, key)
    return snapshot, left_out


class Unpublishable(Exception):
    """A snapshot the relays' engine would refuse (it does not compile): never published.
    ``path`` locates what it refuses (``flags.<key>.prerequisites[0]``), as the engine says."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def item_at(snapshot: Snapshot, path: str) -> tuple[str, str] | None:
    """The flag, segment or experiment (kind, key) a compile error's ``path`` points into, or
    None. Keys may hold dots, so the longest key the path starts with wins."""
    for kind in ITEM_KINDS:
        rest = path.removeprefix(kind + ".")
        if rest != path:
            keys = [
                key
                for key in getattr(snapshot, kind)
                if rest == key or rest.startswith((key + ".", key + "["))
            ]
            if keys:
                return kind, max(keys, key=len)
    return None


def leave_out_item(snapshot: Snapshot, previous: Snapshot | None, kind: str, key: str) -> Snapshot:
    """``snapshot`` with one item left out: its version in ``previous`` (what relays were last
    sent) where that differs, else none (a version relays hold that no longer compiles, as one
    side of a cycle whose other side changed, cannot be kept)."""
    items: dict[str, Any] = dict(getattr(snapshot, kind))
    before: dict[str, Any] = getattr(previous, kind) if previous is not None else {}
    if key in before and before[key] != items[key]:
        items[key] = before[key]
    else:
        del items[key]
    return msgspec.structs.replace(snapshot, **{kind: items})


def compiled_as_relays_would(
    snapshot: Snapshot, old: History | None, patch: p.Patch | None
) -> CompiledEnvironment:
    """``snapshot`` compiled with the engine relays run (``shared.engine``, strict, as
    ``relay.store``), from the previous history's compiled form where there is one, so a patch
    costs what it changed; raises ``Unpublishable`` saying why a relay would refuse it."""
    try:
        if old is not None and old.compiled is not None and patch is not None:
            flags, segments = p.patched_keys(patch)
            return compile_patch(old.compiled, snapshot, flags=flags, segments=segments)
        return compile_snapshot(snapshot, previous=old.compiled if old is not None else None)
    except CompileError as exc:
        where = f"{exc.path}: " if exc.path else ""
        message = f"v{snapshot.version} would be refused by relays: {where}{exc.message}"
        raise Unpublishable(message, exc.path) from exc


@dataclass
class History:
    """The newest snapshot of one environment and the recent patches that led to it."""

    environment_id: str
    project_id: str
    snapshot: Snapshot
    access: p.Access
    patches: deque[tuple[p.Patch, bytes]] = field(
        default_factory=lambda: deque(maxlen=PATCH_HISTORY)
    )
    _full_frame: bytes | None = None
    compiled: CompiledEnvironment | None = None  # as relays compile it: checked before publishing

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
    heartbeat_ms: int = 0
    welcome_again: bool = False  # an environment it reads was deleted: tell it which are left
    refused: dict[str, p.Refused] = field(default_factory=dict)  # by environment key
    closing: bool = False  # the control plane is stopping: the stream ends at its next wake

    def mark(self, environment_id: str) -> None:
        self.pending.add(environment_id)
        self.wake.set()

    async def changes(self, keepalive_s: float) -> AsyncIterator[frozenset[str] | None]:
        """For a stream that only follows changes (a provider's feed, the console): the
        environment ids marked since the last wake, or None after ``keepalive_s`` without one;
        ends when the control plane stops (``Hub.close_all``)."""
        while not self.closing:
            try:
                await asyncio.wait_for(self.wake.wait(), keepalive_s)
            except TimeoutError:
                yield None
                continue
            if self.closing:
                return
            self.wake.clear()
            marked = frozenset(self.pending)
            self.pending.clear()
            yield marked

    def drop(self, environment_id: str, environment_key: str | None) -> None:
        """``environment_id`` (``environment_key``) was deleted: stop reading it."""
        self.environment_ids = self.environment_ids - {environment_id}
        self.pending.discard(environment_id)
        if environment_key is not None:
            self.versions.pop(environment_key, None)
        self.welcome_again = True
        self.wake.set()


class Hub:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = self.sessionmaker = sessionmaker
        self.histories: dict[str, History] = {}
        self.connections: set[Connection] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._announced: dict[str, int] = {}  # environment id -> changes announced, not applied
        self.failing: dict[str, str] = {}  # environment id -> why its last publication failed
        self.left_out: dict[str, dict[str, str]] = {}  # environment id -> item -> why
        # publications that failed since start, by environment key: this replica's own, and
        # versions a relay connected here refused (each counted once per relay and version)
        self.failures: dict[str, int] = {}
        self.names: dict[str, str] = {}  # environment id -> key, for reports

    # --- building histories -----------------------------------------------------------------

    async def _access(self, session: AsyncSession, environment: Environment) -> p.Access:
        rows = await session.execute(
            select(
                ApiKey.id,
                ApiKey.kind,
                ApiKey.secret_hash,
                ApiKey.origins,
                ApiKey.environment_id,
                ApiKey.private_attributes,
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
                private_attributes=tuple(private or ()),
            )
            for key_id, kind, secret_hash, origins, env_id, private in rows
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

    async def history(self, environment_id: str) -> History | None:
        """The environment's history, compiled on first use."""
        history = self.histories.get(environment_id)
        if history is None:
            await self.refresh_one(environment_id)
            history = self.histories.get(environment_id)
        return history

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
        """Publish one commit's change: per environment, read and ship only what it touched; an
        environment that fails is reported (``failing``) and the others still go out."""
        for environment_id in sorted(change.removed):
            self.remove(environment_id)
        for environment_id, what in sorted(change.environments.items()):
            await self._reported(
                environment_id, self.apply_one(change.project_id, environment_id, what)
            )

    async def _reported(self, environment_id: str, work: Any) -> None:
        """Await ``work`` (publishing one environment), noting whether it failed and why."""
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Unpublishable as exc:
            # the data is wrong, not the moment: reported, counted and logged once per reason
            # (the reconciler finds the same version again every few seconds)
            if self.failing.get(environment_id) != str(exc):
                self.failing[environment_id] = str(exc)
                self.count_failure(self.names.get(environment_id, environment_id))
                logger.error("not publishing %s: %s", self.names.get(environment_id), exc)
        except Exception as exc:
            self.count_failure(self.names.get(environment_id, environment_id))
            self.failing[environment_id] = f"{type(exc).__name__}: {exc}"
            logger.exception(
                "publishing %s failed; the reconciler retries it",
                self.names.get(environment_id, environment_id),
            )
        else:
            self.failing.pop(environment_id, None)

    def count_failure(self, environment: str) -> None:
        self.failures[environment] = self.failures.get(environment, 0) + 1

    def relay_refused(self, connection: Connection, refused: dict[str, p.Refused]) -> None:
        """What ``connection``'s relay says it refuses now (its heartbeat): each version newly
        refused is counted as a failed publication of its environment and logged once."""
        for environment, refusal in sorted(refused.items()):
            known = connection.refused.get(environment)
            if known is None or known.version != refusal.version:
                self.count_failure(environment)
                logger.error(
                    "relay %s refuses %s v%d and serves an older version: %s",
                    connection.relay_id,
                    environment,
                    refusal.version,
                    refusal.reason,
                )
        connection.refused = dict(refused)

    def refused_by(self) -> dict[str, dict[str, p.Refused]]:
        """Environment key -> relay id -> the version it refuses (relays connected here)."""
        found: dict[str, dict[str, p.Refused]] = {}
        for connection in self.connections:
            for environment, refusal in connection.refused.items():
                found.setdefault(environment, {})[connection.relay_id] = refusal
        return found

    def remove(self, environment_id: str) -> None:
        """``environment_id`` was deleted: drop its history, and tell every relay and provider that
        reads it (a relay gets a new ``Welcome`` without it; a provider's stream ends)."""
        history = self.histories.pop(environment_id, None)
        key = history.key if history is not None else self.names.get(environment_id)
        for report in (self.failing, self.left_out, self.names):
            report.pop(environment_id, None)
        for connection in self.connections:
            if environment_id in connection.environment_ids:
                connection.drop(environment_id, key)
        if history is not None:
            logger.info("environment %s was deleted; its relays and providers drop it", key)

    async def apply_one(
        self, project_id: str, environment_id: str, what: EnvironmentChange
    ) -> None:
        lock = self._locks.setdefault(environment_id, asyncio.Lock())
        async with lock:
            old = self.histories.get(environment_id)
            if old is None:
                pass  # no relay read it yet: compiled when one does (``history``), not now
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
        old: History | None,
        patch: p.Patch | None,
    ) -> None:
        """Make ``snapshot`` the newest of the environment's history; keep the patch from ``old``
        to it. Whatever cannot be encoded is left out and reported, never allowed to stop the
        rest."""
        self.names[environment_id] = snapshot.environment
        previous = old.snapshot if old is not None else None
        new_access = access if old is None or access != old.access else None
        found: dict[str, str] = {}  # what this snapshot leaves out, and why
        for _ in range(sum(len(getattr(snapshot, kind)) for kind in ITEM_KINDS) + 1):
            try:
                history, patch = self._history(
                    environment_id, project_id, snapshot, access, old, patch
                )
                break
            except UNENCODABLE:
                snapshot, unencodable = leave_out_unencodable(snapshot, previous)
                if not unencodable:
                    raise
                found.update(unencodable)
            except Unpublishable as exc:  # what relays would refuse: that item, not the rest
                item = item_at(snapshot, exc.path)
                if item is None:
                    raise
                snapshot = leave_out_item(snapshot, previous, *item)
                found[".".join(item)] = str(exc)
            patch = p.diff(previous, snapshot, new_access) if previous is not None else None
        else:  # pragma: no cover - each round leaves one item out, so the items run out first
            raise Unpublishable(f"{snapshot.environment}: leaving items out did not help")
        known = self.left_out.setdefault(environment_id, {})
        if any(name not in known for name in found):  # counted once, not at every reconcile
            self.count_failure(snapshot.environment)
        known.update(found)
        for item_name, why in sorted(found.items()):
            logger.error(
                "%s: %s %s; left out of what relays are sent until it is fixed",
                snapshot.environment,
                item_name,
                why,
            )
        self.names[environment_id] = snapshot.environment
        if old is not None and old.key != snapshot.environment:  # renamed: the old key is gone
            for connection in self.connections:
                if connection.versions.pop(old.key, None) is not None:
                    connection.welcome_again = True
        left = self.left_out.get(environment_id)
        if left and patch is not None:  # items the patch ships again are fixed (or deleted)
            for kind, changed, removed in (
                ("flags", patch.flags, patch.removed_flags),
                ("segments", patch.segments, patch.removed_segments),
                ("experiments", patch.experiments, patch.removed_experiments),
            ):
                for key in (*changed, *removed):
                    if f"{kind}.{key}" not in found:  # not the ones just left out
                        left.pop(f"{kind}.{key}", None)
        if not left:
            self.left_out.pop(environment_id, None)
        self.histories[environment_id] = history

    @staticmethod
    def _history(
        environment_id: str,
        project_id: str,
        snapshot: Snapshot,
        access: p.Access,
        old: History | None,
        patch: p.Patch | None,
    ) -> tuple[History, p.Patch | None]:
        """The history with ``snapshot`` newest, its frame encoded (the patch from ``old``, or the
        full snapshot for a first history): raises ``UNENCODABLE`` if the wire cannot carry it."""
        history = History(environment_id, project_id, snapshot, access)
        if old is None:
            history.compiled = compiled_as_relays_would(snapshot, None, None)
            history.full_frame  # noqa: B018 - encoded now: a relay reads this history next
            return history, None
        if patch is None:
            patch = p.diff(old.snapshot, snapshot, access if access != old.access else None)
        history.compiled = compiled_as_relays_would(snapshot, old, patch)
        frame = p.encode(patch)
        history.patches = old.patches
        history.patches.append((patch, frame))
        return history, patch

    async def refresh(self, environment_ids: Iterable[str]) -> None:
        for environment_id in sorted(set(environment_ids)):
            await self._reported(environment_id, self.refresh_one(environment_id))

    async def refresh_one(self, environment_id: str) -> None:
        """Recompile one environment; if its version moved on, tell every relay that reads it."""
        lock = self._locks.setdefault(environment_id, asyncio.Lock())
        async with lock:
            old = self.histories.get(environment_id)
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
        """Catch up with what this replica was not told about (a missed Redis notice): versions
        the database has moved past, and environments deleted meanwhile, which leave every history
        and connection (a relay holding one it should not is sent a new ``Welcome``)."""
        projects = {history.project_id for history in self.histories.values()} | {
            connection.project_id for connection in self.connections
        }
        if not projects:
            return
        async with self._sessionmaker() as session:
            rows = (
                await session.execute(
                    select(
                        Environment.id,
                        Environment.key,
                        Environment.project_id,
                        Environment.snapshot_version,
                    ).where(Environment.project_id.in_(sorted(projects)))
                )
            ).all()
        versions = {env_id: version for env_id, _key, _project, version in rows}
        keys: dict[str, set[str]] = {}
        for _env_id, key, project_id, _version in rows:
            keys.setdefault(project_id, set()).add(key)
        for environment_id in [e for e in self.histories if e not in versions]:
            self.remove(environment_id)
        for connection in self.connections:
            for environment_id in connection.environment_ids - versions.keys():
                connection.drop(environment_id, None)
            unknown = connection.versions.keys() - keys.get(connection.project_id, set())
            if unknown:  # it holds environments deleted (or renamed) meanwhile
                for key in unknown:
                    connection.versions.pop(key, None)
                connection.welcome_again = True
                connection.wake.set()
        stale = [
            env_id
            for env_id, history in self.histories.items()
            if versions.get(env_id, 0) > history.version and env_id not in self._announced
        ]
        await self.refresh(stale)

    async def environment_keys(self, environment_ids: Iterable[str]) -> tuple[str, ...]:
        """The keys of those of ``environment_ids`` that exist, in the order relays are told."""
        async with self._sessionmaker() as session:
            return tuple(
                await session.scalars(
                    select(Environment.key)
                    .where(Environment.id.in_(sorted(environment_ids)))
                    .order_by(Environment.created_at, Environment.key)
                )
            )

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

    def close_all(self) -> None:
        """The control plane is stopping: every stream (a relay's, a provider's feed, a console
        page's) ends now, so its client reconnects to another replica at once rather than
        when this process is gone."""
        for connection in list(self.connections):
            connection.closing = True
            connection.wake.set()

    async def frames_for(self, connection: Connection) -> list[bytes]:
        """Everything pending for ``connection``; updates what it is known to hold."""
        frames: list[bytes] = []
        if connection.welcome_again:  # environments were deleted: name the ones left
            connection.welcome_again = False
            environments = await self.environment_keys(connection.environment_ids)
            frames.append(
                p.encode(p.Welcome(environments=environments, heartbeat_ms=connection.heartbeat_ms))
            )
        while connection.pending:
            environment_id = connection.pending.pop()
            history = await self.history(environment_id)
            if history is None:
                continue
            held = connection.versions.get(history.key)
            if held is not None and held > history.version:
                # the relay is ahead of this replica (it missed a notice): catch up from the
                # database; never send the relay something older than it holds
                await self.refresh_one(environment_id)
                connection.pending.discard(environment_id)
                history = self.histories[environment_id]
                if held > history.version:
                    logger.warning(
                        "relay %s holds %s v%d, newer than this replica's v%d; sending nothing",
                        connection.relay_id,
                        history.key,
                        held,
                        history.version,
                    )
                    continue
            frames.extend(history.frames_since(held))
            connection.versions[history.key] = history.version
        return frames


async def run_reconciler(hub: Hub, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            await hub.reconcile()
        except Exception:
            logger.exception("reconciling snapshot histories failed; retrying in %.0f s", every_s)
