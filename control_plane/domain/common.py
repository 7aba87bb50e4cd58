"""What every service needs: the caller, the transaction, audit entries and snapshot versions."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from sqlalchemy import ColumnElement, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from control_plane.access import Permission, Role, holds, lacking
from control_plane.auth import Principal
from control_plane.db.ids import new_id
from control_plane.db.models import AuditEntry, Base, Environment
from control_plane.errors import forbidden, not_found, stale_version
from control_plane.publishing.change import Change, Reason


@dataclass(frozen=True, slots=True)
class Actor:
    """Who makes a change, and with what role: a person (their email is the ``label``), a key
    as a service account (its name), the CLI or the schedule runner (the system: an admin)."""

    key_id: str | None
    label: str
    user_id: str | None = None
    role: Role = Role.ADMIN
    may_turn_off: bool = False
    identity: str = ""  # Principal.identity: one per person or service account
    private_attributes: tuple[str, ...] = ()  # the key's (``rows.private_attributes``)

    @classmethod
    def of(cls, principal: Principal) -> Actor:
        label = principal.name or f"{principal.kind.value} key {principal.key_id}"
        return cls(
            principal.key_id,
            label[:200],
            principal.user_id,
            principal.role,
            principal.may_turn_off,
            principal.identity,
            principal.private_attributes,
        )

    @property
    def maker(self) -> str | None:
        """Whose a management key this actor makes is (``ApiKey.owner_identity``): a person's
        or a key's identity, a key's own maker's included, so a key minted is still its
        maker; None for the CLI and the system (the key is its own service account)."""
        return self.identity if self.identity and (self.user_id or self.key_id) else None


CLI_ACTOR = Actor(None, "cli", identity="cli")


@dataclass(frozen=True, slots=True)
class Hooks:
    """What the domains tell the rest of the control plane, without importing it: an audited
    change, and an announcement (an experiment's winner). The app injects the webhooks' outbox
    (``webhooks/outbox.py``: ``OUTBOX``), which turns each into a webhook event written in the
    same transaction."""

    audited: Callable[[AsyncSession, AuditEntry], None]
    announced: Callable[[AsyncSession, str, str, Any], None]  # session, project, type, data
    # many audited changes at once (``Scope.write_audits``): their entries' rows, written
    audited_rows: Callable[[AsyncSession, str, list[dict[str, Any]]], Awaitable[None]]


@dataclass(slots=True)
class Scope:
    """One request's unit of work: the session (one transaction), the project, the actor, and
    what the transaction changes in the snapshots (published after the commit)."""

    session: AsyncSession
    project_id: str
    actor: Actor
    bayesian_prior_sd: float | None = 0.3
    if_match: str | None = None  # the write's If-Match header, as sent
    hooks: Hooks = field(kw_only=True)
    change: Change = field(init=False)
    # events or exposures were written or deleted: the ingest generation moves on after the
    # commit (see control_plane.db.generation), so that results cached by it are computed afresh
    events_written: bool = field(default=False, init=False)
    # the permissions this unit of work was found to hold (``require``); an audited change
    # must have asked for one (``audit``)
    held: set[Permission] = field(default_factory=set, init=False)
    # the change request this unit of work applies (its id, title, author and approvers), set
    # only by the change requests' apply: the protection gate (``domain.protection``) lets its
    # writes through, and every audit entry written meanwhile names it (``changeRequest``)
    applying: dict[str, Any] | None = field(default=None, init=False)
    # the file a project document was applied from (``domain.projectfile``): every audit entry
    # written meanwhile says so (``appliedFrom``)
    source: str | None = field(default=None, init=False)
    # a rehearsal of writes that is rolled back (a project document's plan): each write is
    # checked as when made, and no audit entry is made for what is never kept
    rehearsal: bool = field(default=False, init=False)
    # the audit entries of many writes, kept to be written together (``write_audits``: a
    # project document's apply); none: each is added to the session as it is made
    batch: list[dict[str, Any]] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.change = Change(self.project_id)

    async def expect_version(
        self,
        entity: type[Base],
        version: InstrumentedAttribute[int],
        current: int,
        *where: ColumnElement[bool],
    ) -> None:
        """Optimistic concurrency: with ``If-Match``, go on only while the row (``where``) is at
        the version named there, else 412 with the current version and nothing written.

        The comparison is an UPDATE of the row to itself, so it also locks the row until the
        transaction ends: of two writers naming the same version, the second waits, finds the
        version moved on, and is refused (SQLite serialises writers with BEGIN IMMEDIATE)."""
        if self.if_match is None:
            return
        wanted = {tag.strip().removeprefix("W/").strip('"') for tag in self.if_match.split(",")}
        if "*" in wanted:
            return
        if str(current) in wanted:
            held = await self.session.execute(
                update(entity).where(*where, version == current).values({version.key: version})
            )
            if held.rowcount == 1:  # type: ignore[attr-defined]
                return
            current = int(await self.session.scalar(select(version).where(*where)) or current)
        raise stale_version(current)

    def require(self, permission: Permission) -> None:
        """Go on only if the actor holds ``permission`` (``control_plane.access``), else 403
        naming it. Every service that changes anything asks first: the API, the console, the
        CLI and the schedule runner all reach the same rule here."""
        if not holds(self.actor.role, self.actor.may_turn_off, permission):
            raise forbidden(lacking(self.actor.role, permission), permission=permission.value)
        self.held.add(permission)

    def holds(self, permission: Permission) -> bool:
        """Whether the actor holds ``permission`` (to choose a path, not to refuse one)."""
        return holds(self.actor.role, self.actor.may_turn_off, permission)

    def audit(
        self,
        action: str,
        resource_type: str,
        resource_key: str,
        *,
        before: Any = None,
        after: Any = None,
        environment: str | None = None,
    ) -> None:
        """Record the change, and tell the hooks (same transaction): the outbox makes it a
        webhook event. A change is made only by who may make it: a service that audits without
        having asked ``require`` is a defect, refused here rather than written."""
        if not self.held:
            raise RuntimeError(
                f"{action} was about to be written without a permission check (Scope.require)"
            )
        if self.rehearsal:
            return
        row = {
            "id": new_id("aud"),
            "project_id": self.project_id,
            "actor_key_id": self.actor.key_id,
            "actor_user_id": self.actor.user_id,
            "actor": self.actor.label,
            "action": action,
            "resource_type": resource_type,
            "resource_key": resource_key,
            "environment": environment,
            "before": to_json(before),
            "after": self._with_request(to_json(after)),
        }
        if self.batch is not None:
            self.batch.append(row)
            return
        entry = AuditEntry(**row)
        self.session.add(entry)
        self.hooks.audited(self.session, entry)

    async def write_audits(self) -> None:
        """Write the audit entries kept so far (``batch``), in one statement, and hand them to
        the hooks (their webhook events, in one more)."""
        if not self.batch:
            return
        rows, self.batch = self.batch, []
        await self.session.execute(insert(AuditEntry), rows)
        await self.hooks.audited_rows(self.session, self.project_id, rows)

    def _with_request(self, after: Any) -> Any:
        if self.source is not None and isinstance(after, dict | None):
            after = {**(after or {}), "appliedFrom": self.source}
        if self.applying is None or not isinstance(after, dict) or "changeRequest" in after:
            return after
        return {**after, "changeRequest": self.applying}

    def announce(self, event_type: str, data: Any) -> None:
        """Tell the hooks of something that happened (same transaction): ``experiment.winner``."""
        self.hooks.announced(self.session, self.project_id, event_type, data)

    async def environments(self) -> list[Environment]:
        result = await self.session.scalars(
            select(Environment)
            .where(Environment.project_id == self.project_id)
            .order_by(Environment.created_at, Environment.key)
        )
        return list(result)

    async def environment(self, key: str) -> Environment:
        env = await self.session.scalar(
            select(Environment).where(
                Environment.project_id == self.project_id, Environment.key == key
            )
        )
        if env is None:
            raise not_found("environment", key)
        return env

    async def changed(
        self,
        environment_ids: Iterable[str],
        *,
        flags: Iterable[str] = (),
        segments: Iterable[str] = (),
        reason: Reason | None = None,
    ) -> None:
        """Bump the snapshot version of environments whose served state this change alters, and
        note what it alters there (these flags, these segments, or a ``reason``; nothing named:
        the whole environment) for the publisher.

        An environment's version moves once per unit of work, however many of its writes it
        makes: the commit is published once, as that one version (the first bump also locks the
        environment's row until the commit)."""
        ids = sorted(set(environment_ids))
        if not ids:
            return
        versions = {
            environment_id: held.version
            for environment_id in ids
            if (held := self.change.environments.get(environment_id)) is not None
            and held.version is not None
        }
        fresh = [environment_id for environment_id in ids if environment_id not in versions]
        if fresh:
            bumped = await self.session.execute(
                update(Environment)
                .where(Environment.id.in_(fresh))
                .values(snapshot_version=Environment.snapshot_version + 1)
                .returning(Environment.id, Environment.snapshot_version)
            )
            versions.update({environment_id: int(version) for environment_id, version in bumped})
        self.change.add(ids, flags=flags, segments=segments, reason=reason, versions=versions)


async def serialise_project_writes(session: AsyncSession, project_id: str) -> None:
    """Hold the project's write lock until the transaction ends: the one home of the rule that
    the check and the write of what goes into a snapshot are serialised per project.

    A write checks the project's state (a prerequisite or segment cycle, a segment in use, a
    key taken) and then writes; two of them at once, each checking before the other's commit,
    could both pass and store together what neither check allowed (issue #33: two PUTs made a
    prerequisite cycle that relays then refused). Taken before the write's first read, the
    lock makes every such check see the previous writer's commit, on every replica:

    - PostgreSQL: a transaction-scoped advisory lock keyed by the project, released by the
      commit or rollback. Under READ COMMITTED (the default) each statement after it sees what
      the previous holder committed; under REPEATABLE READ or SERIALIZABLE the transaction's
      snapshot is taken at its first statement, so callers take the lock first
      (``control_plane.deps.unit_of_work`` ends the read-only key lookup's transaction before).
    - SQLite: nothing to take: every transaction starts with ``BEGIN IMMEDIATE``
      (``control_plane.db.engine``), which already holds the database's single write lock from
      the transaction's first statement to its end.
    """
    if session.get_bind().dialect.name != "postgresql":
        return
    await session.execute(
        text("SELECT pg_advisory_xact_lock(:key)"), {"key": project_lock_key(project_id)}
    )


def project_lock_key(project_id: str) -> int:
    """The advisory lock key of a project: 64 signed bits of a hash of its id (stable across
    processes and versions, unlike Python's ``hash``)."""
    digest = hashlib.blake2b(f"vane.project-writes:{project_id}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


async def every(
    poll_s: float, step: Callable[[], Awaitable[Any]], log: logging.Logger, what: str
) -> None:
    """Run ``step`` at once, then every ``poll_s``, for ever (a runner's loop: due scheduled
    changes, due change requests); a failure is logged and looked at again next time."""
    while True:
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed; retrying", what)
        await asyncio.sleep(poll_s)


def percent(units: int) -> float | int:
    """A weight stored out of 100000 as the percentage users write (50, or 33.333)."""
    return units // 1000 if units % 1000 == 0 else units / 1000


def to_json(value: Any) -> Any:
    """Structs and datetimes to plain JSON values (for audit before/after columns)."""
    if value is None:
        return None
    return msgspec.json.decode(msgspec.json.encode(value))
