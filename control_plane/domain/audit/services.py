"""The audit trail: every write of the API and the CLI, newest first, paged by an opaque cursor
(the id of the last entry shown; ids sort by time)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from control_plane.db.models import AuditEntry
from control_plane.domain.audit import schemas as s
from control_plane.domain.common import Scope
from control_plane.errors import invalid

_CURSOR = re.compile(r"^aud_[0-9a-hjkmnp-tv-z]{26}$")


@dataclass(frozen=True, slots=True)
class AuditFilter:
    resource_type: str | None = None
    resource_key: str | None = None
    action: str | None = None
    actor_key_id: str | None = None
    environment: str | None = None
    since: datetime | None = None
    until: datetime | None = None


async def entries(
    scope: Scope, where: AuditFilter, *, limit: int, cursor: str | None
) -> s.AuditList:
    if cursor is not None and not _CURSOR.match(cursor):
        raise invalid("cursor", "not a cursor from a previous page (use nextCursor as given)")
    query = select(AuditEntry).where(AuditEntry.project_id == scope.project_id)
    if where.resource_type is not None:
        query = query.where(AuditEntry.resource_type == where.resource_type)
    if where.resource_key is not None:
        query = query.where(AuditEntry.resource_key == where.resource_key)
    if where.action is not None:
        query = query.where(AuditEntry.action == where.action)
    if where.actor_key_id is not None:  # a key's id, or a person's
        query = query.where(
            (AuditEntry.actor_key_id == where.actor_key_id)
            | (AuditEntry.actor_user_id == where.actor_key_id)
        )
    if where.environment is not None:
        query = query.where(AuditEntry.environment == where.environment)
    if where.since is not None:
        query = query.where(AuditEntry.at >= where.since)
    if where.until is not None:
        query = query.where(AuditEntry.at < where.until)
    if cursor is not None:
        query = query.where(AuditEntry.id < cursor)
    rows = list(await scope.session.scalars(query.order_by(AuditEntry.id.desc()).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return s.AuditList(
        entries=[
            s.AuditEntry(
                id=r.id,
                at=r.at,
                actor=r.actor,
                actor_key_id=r.actor_key_id,
                actor_user_id=r.actor_user_id,
                action=r.action,
                resource_type=r.resource_type,
                resource_key=r.resource_key,
                environment=r.environment,
                before=r.before,
                after=r.after,
            )
            for r in rows
        ],
        next_cursor=rows[-1].id if more and rows else None,
        has_more=more,
    )
