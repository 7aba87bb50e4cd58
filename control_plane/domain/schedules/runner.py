"""Carries out due scheduled changes, in whichever replica gets there first, exactly once.

The claim is ``UPDATE scheduled_changes SET status='done' WHERE id=:id AND status='pending'`` in
the *same transaction* as the change itself (the flag service a user's toggle or update calls,
so it is validated, audited, published and sent to webhooks like any change). One replica's
claim wins: on PostgreSQL the other's UPDATE waits for the row lock and then matches nothing; on
SQLite writers queue. If the change fails (the flag was archived, a rollout names a variation
that is gone), the transaction is rolled back and the change is marked ``failed`` with the
reason, once; it is not retried. A database error leaves it pending for the next look.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.access import Permission
from control_plane.db.models import Environment, Flag, ScheduledChange
from control_plane.db.types import utcnow
from control_plane.domain.common import Actor, Hooks, Scope, every, serialise_project_writes
from control_plane.domain.schedules.services import schedule_out
from control_plane.errors import ApiError
from control_plane.publishing.change import Change

logger = logging.getLogger("vane.schedules")

BATCH = 50
Publish = Callable[[Change], None]  # ``Publisher.publish``
Apply = Callable[[Scope, ScheduledChange, str, str], Awaitable[str]]
"""Carries a claimed change out in the scope (flag key, environment key), answers what it did.
The app passes the flags' ``apply_scheduled``: the service a user's toggle or update calls."""


class ScheduleRunner:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        replica_id: str,
        publish: Publish,
        apply: Apply,
        poll_s: float = 1.0,
        bayesian_prior_sd: float | None = 0.3,
        hooks: Hooks,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.replica_id = replica_id
        self.publish = publish
        self.apply = apply
        self.poll_s = poll_s
        self.bayesian_prior_sd = bayesian_prior_sd
        self.hooks = hooks

    async def run(self) -> None:
        """Look at once (what came due while stopped runs at start-up), then every ``poll_s``."""
        await every(self.poll_s, self.run_due, logger, "looking for due scheduled changes")

    async def run_due(self) -> int:
        async with self.sessionmaker() as session:
            due = list(
                await session.scalars(
                    select(ScheduledChange.id)
                    .where(ScheduledChange.status == "pending", ScheduledChange.at <= utcnow())
                    .order_by(ScheduledChange.at, ScheduledChange.id)
                    .limit(BATCH)
                )
            )
        done = 0
        for schedule_id in due:
            done += await self.execute(schedule_id)
        return done

    async def execute(self, schedule_id: str) -> int:
        """1 if this replica carried the change out (or recorded its failure), else 0."""
        async with self.sessionmaker() as session:
            try:
                claimed = await session.execute(
                    update(ScheduledChange)
                    .where(ScheduledChange.id == schedule_id, ScheduledChange.status == "pending")
                    .values(status="done", finished_at=utcnow(), finished_by=self.replica_id)
                    .execution_options(synchronize_session=False)
                )
                if cast(CursorResult[Any], claimed).rowcount != 1:
                    await session.rollback()
                    return 0
                row, flag_key, env_key = await _load(session, schedule_id)
                # READ COMMITTED: the reads after the lock see the previous writer's commit
                await serialise_project_writes(session, row.project_id)
                scope = self._scope(session, row)
                row.reason = await self.apply(scope, row, flag_key, env_key)
                await session.commit()
            except ApiError as exc:
                await session.rollback()
                await self._failed(schedule_id, exc.message)
                return 1
            except DBAPIError:
                await session.rollback()
                logger.exception(
                    "scheduled change %s: database error, will look again", schedule_id
                )
                return 0
            except Exception as exc:  # a defect: recorded once, not retried on every look
                await session.rollback()
                logger.exception("scheduled change %s failed unexpectedly", schedule_id)
                await self._failed(schedule_id, f"internal error: {type(exc).__name__}: {exc}")
                return 1
        if scope.change:
            self.publish(scope.change)
        logger.info("scheduled change %s carried out: %s", schedule_id, row.reason)
        return 1

    def _scope(self, session: AsyncSession, row: ScheduledChange) -> Scope:
        # the runner carries out what was checked when the schedule was made: as the system
        actor = Actor(row.created_by_key_id, f"schedule {row.id} ({row.created_by})"[:200])
        return Scope(session, row.project_id, actor, self.bayesian_prior_sd, hooks=self.hooks)

    async def _failed(self, schedule_id: str, reason: str) -> None:
        async with self.sessionmaker() as session, session.begin():
            marked = await session.execute(
                update(ScheduledChange)
                .where(ScheduledChange.id == schedule_id, ScheduledChange.status == "pending")
                .values(
                    status="failed",
                    reason=reason,
                    finished_at=utcnow(),
                    finished_by=self.replica_id,
                )
                .execution_options(synchronize_session=False)
            )
            if cast(CursorResult[Any], marked).rowcount != 1:
                return
            row, flag_key, env_key = await _load(session, schedule_id)
            out = schedule_out(row, flag_key, env_key)
            scope = self._scope(session, row)
            scope.require(Permission.EDIT)
            scope.audit("schedule.fail", "flag", flag_key, after=out, environment=env_key)
        logger.warning("scheduled change %s failed: %s", schedule_id, reason)


async def _load(session: AsyncSession, schedule_id: str) -> tuple[ScheduledChange, str, str]:
    found = (
        await session.execute(
            select(ScheduledChange, Flag.key, Environment.key)
            .join(Flag, Flag.id == ScheduledChange.flag_id)
            .join(Environment, Environment.id == ScheduledChange.environment_id)
            .where(ScheduledChange.id == schedule_id)
            .execution_options(populate_existing=True)
        )
    ).one()
    row, flag_key, env_key = found
    return row, flag_key, env_key
