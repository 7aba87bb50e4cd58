"""Scheduled changes of a flag in one environment: created, listed and cancelled here; carried
out by ``runner.py`` through the same flag service a user's toggle or update goes through."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import msgspec
from sqlalchemy import CursorResult, select, update

from control_plane.access import Permission
from control_plane.db.ids import new_id
from control_plane.db.models import Environment, Flag, ScheduledChange
from control_plane.db.types import utcnow
from control_plane.domain.common import Scope
from control_plane.domain.paging import Page, paged
from control_plane.domain.problems import Problems
from control_plane.domain.protection import refuse_unapproved
from control_plane.domain.rows import flag_setting, refuse_archived, variation_indexes
from control_plane.domain.schedules import schemas as s
from control_plane.domain.targeting import clauses as targeting
from control_plane.errors import ApiError, not_found

PAST_SLACK = timedelta(minutes=1)  # a clock a little behind still schedules "now"
HORIZON = timedelta(days=5 * 366)


def schedule_out(row: ScheduledChange, flag_key: str, env_key: str) -> s.ScheduledChange:
    return s.ScheduledChange(
        id=row.id,
        flag=flag_key,
        environment=env_key,
        at=row.at,
        kind=row.kind,  # type: ignore[arg-type]
        status=row.status,  # type: ignore[arg-type]
        reason=row.reason,
        created_by=row.created_by,
        created_at=row.created_at,
        finished_at=row.finished_at,
        enabled=row.enabled if row.kind == "toggle" and row.enabled is not None else msgspec.UNSET,
        fallthrough=row.fallthrough if row.kind == "rollout" else msgspec.UNSET,
    )


async def create(scope: Scope, key: str, env_key: str, body: s.ScheduleIn) -> s.ScheduledChange:
    scope.require(Permission.EDIT)
    flag, env, _ = await flag_setting(scope, key, env_key)
    refuse_unapproved(
        scope, env, f"scheduling a change of flag {key!r} (a change request may carry applyAt)"
    )
    problems = Problems()
    now = utcnow()
    if body.at.tzinfo is None:
        problems.add("at", "an RFC 3339 time with its offset (Z or +hh:mm)")
    elif body.at < now - PAST_SLACK:
        problems.add("at", "is in the past")
    elif body.at > now + HORIZON:
        problems.add("at", "more than five years ahead")
    if (body.enabled is None) == (body.fallthrough is None):
        problems.add("enabled", "give exactly one of enabled (a toggle) or fallthrough (a rollout)")
    fallthrough = None
    if body.fallthrough is not None:
        targeting.serve(problems, "fallthrough", body.fallthrough, variation_indexes(flag))
        given = msgspec.to_builtins(body.fallthrough)
        fallthrough = {k: value for k, value in given.items() if value is not None}
    problems.raise_if_any()
    refuse_archived(flag)
    row = ScheduledChange(
        id=new_id("sch"),
        project_id=scope.project_id,
        flag_id=flag.id,
        environment_id=env.id,
        at=body.at,
        kind="toggle" if body.enabled is not None else "rollout",
        enabled=body.enabled,
        fallthrough=fallthrough,
        status="pending",
        reason="",
        created_by_key_id=scope.actor.key_id,
        created_by=scope.actor.label,
        created_at=now,
    )
    scope.session.add(row)
    await scope.session.flush()
    out = schedule_out(row, flag.key, env.key)
    scope.audit("schedule.create", "flag", flag.key, after=out, environment=env.key)
    return out


async def list_schedules(
    scope: Scope, key: str, env_key: str, status: str | None, *, limit: int, cursor: str | None
) -> Page[s.ScheduledChange]:
    """Oldest scheduled first (ids are time-sortable: the order they were made in)."""
    flag, env, _ = await flag_setting(scope, key, env_key)
    query = select(ScheduledChange).where(
        ScheduledChange.flag_id == flag.id, ScheduledChange.environment_id == env.id
    )
    if status:
        query = query.where(ScheduledChange.status == status)

    async def convert(rows: list[ScheduledChange]) -> list[s.ScheduledChange]:
        return [schedule_out(r, flag.key, env.key) for r in rows]

    return await paged(
        scope,
        query,
        ScheduledChange.id,
        list_name=f"schedules:{flag.id}:{env.id}",
        limit=limit,
        cursor=cursor,
        convert=convert,
    )


async def _find(
    scope: Scope, key: str, env_key: str, schedule_id: str
) -> tuple[ScheduledChange, Flag, Environment]:
    flag, env, _ = await flag_setting(scope, key, env_key)
    row = await scope.session.scalar(
        select(ScheduledChange).where(
            ScheduledChange.id == schedule_id,
            ScheduledChange.flag_id == flag.id,
            ScheduledChange.environment_id == env.id,
        )
    )
    if row is None:
        raise not_found("scheduled change", schedule_id)
    return row, flag, env


async def get(scope: Scope, key: str, env_key: str, schedule_id: str) -> s.ScheduledChange:
    row, flag, env = await _find(scope, key, env_key, schedule_id)
    return schedule_out(row, flag.key, env.key)


async def cancel(scope: Scope, key: str, env_key: str, schedule_id: str) -> s.ScheduledChange:
    """Only a pending change can be cancelled; the claim is the same conditional UPDATE the
    runner uses, so a cancel and an execution never both win."""
    scope.require(Permission.EDIT)
    row, flag, env = await _find(scope, key, env_key, schedule_id)
    before = schedule_out(row, flag.key, env.key)
    result = await scope.session.execute(
        update(ScheduledChange)
        .where(ScheduledChange.id == row.id, ScheduledChange.status == "pending")
        .values(
            status="cancelled", finished_at=utcnow(), reason=f"cancelled by {scope.actor.label}"
        )
        .execution_options(synchronize_session=False)
    )
    await scope.session.refresh(row)
    if cast(CursorResult[Any], result).rowcount != 1:
        raise ApiError(409, f"scheduled change {schedule_id!r} is {row.status}, not pending")
    after = schedule_out(row, flag.key, env.key)
    scope.audit(
        "schedule.cancel", "flag", flag.key, before=before, after=after, environment=env.key
    )
    return after
