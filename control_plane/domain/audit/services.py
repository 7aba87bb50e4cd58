"""The audit trail: every write of the API and the CLI, newest first, paged by a cursor that is
the id of the last entry shown (ids sort by time; the other lists' cursors are opaque, see
``paging``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from control_plane.db.models import AuditEntry
from control_plane.domain.audit import schemas as s
from control_plane.domain.common import Scope
from control_plane.domain.paging import CursorFormat, Position, paged
from control_plane.errors import invalid

_CURSOR = re.compile(r"^aud_[0-9a-hjkmnp-tv-z]{26}$")


def _read_cursor(_list_name: str, cursor: str) -> Position:
    if not _CURSOR.match(cursor):
        raise invalid("cursor", "not a cursor from a previous page (use nextCursor as given)")
    return (cursor,)


ENTRY_ID = CursorFormat(encode=lambda _list_name, position: position[0], decode=_read_cursor)
"""The audit's cursor, as it was before the lists shared theirs: the last entry's id."""


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

    async def convert(rows: list[AuditEntry]) -> list[s.AuditEntry]:
        return [
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
        ]

    found = await paged(
        scope,
        query,
        AuditEntry.id,
        list_name="audit",
        limit=limit,
        cursor=cursor,
        convert=convert,
        descending=True,
        cursors=ENTRY_ID,
    )
    return s.AuditList(entries=found.items, next_cursor=found.next_cursor, has_more=found.has_more)
