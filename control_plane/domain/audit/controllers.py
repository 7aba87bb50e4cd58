"""``GET /audit``: the project's whole audit trail, filtered and paged; and one flag's or one
segment's history, the same trail filtered to it (served here, so flags and segments do not
import the audit)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from litestar import Controller, get
from litestar.params import FromPath, FromQuery, QueryParameter

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx
from control_plane.domain.audit import schemas as s
from control_plane.domain.audit.services import AuditFilter, entries
from control_plane.domain.rows import find_flag

Limit = Annotated[int, QueryParameter(ge=1, le=1000)]


class AuditController(Controller):
    path = "/audit"
    tags = ["audit"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get(
        "/",
        summary="Every change in the project, newest first",
        description=(
            "Filters: `resourceType` (flag, segment, experiment, layer, holdout, metric, "
            "environment, change_request, key, token, user, webhook, repository: code "
            "references), `resource` (its key or id), `action` (e.g. `flag.toggle`), `actor` "
            "(the acting key's or person's id), `environment`, `since`/`until` (RFC 3339). Page with "
            "`cursor` = the previous answer's `nextCursor`."
        ),
    )
    async def list_entries(
        self,
        ctx: Ctx,
        resource_type: Annotated[str | None, QueryParameter(name="resourceType")] = None,
        resource: FromQuery[str | None] = None,
        action: FromQuery[str | None] = None,
        actor: FromQuery[str | None] = None,
        environment: FromQuery[str | None] = None,
        since: FromQuery[datetime | None] = None,
        until: FromQuery[datetime | None] = None,
        limit: Limit = 100,
        cursor: FromQuery[str | None] = None,
    ) -> s.AuditList:
        where = AuditFilter(
            resource_type=resource_type,
            resource_key=resource,
            action=action,
            actor_key_id=actor,
            environment=environment,
            since=since,
            until=until,
        )
        return await entries(ctx, where, limit=limit, cursor=cursor)


class FlagHistoryController(Controller):
    """``GET /flags/:key/audit``: one flag's history (the trail, filtered to it)."""

    path = "/flags"
    tags = ["flags"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/{key:str}/audit", summary="Change history of a flag, newest first")
    async def audit(
        self, ctx: Ctx, key: FromPath[str], limit: Limit = 100, cursor: FromQuery[str | None] = None
    ) -> s.AuditList:
        await find_flag(ctx, key)  # 404 for an unknown flag
        where = AuditFilter(resource_type="flag", resource_key=key)
        return await entries(ctx, where, limit=limit, cursor=cursor)


class SegmentHistoryController(Controller):
    """``GET /segments/:key/audit``: one segment's history (the trail, filtered to it)."""

    path = "/segments"
    tags = ["segments"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/{key:str}/audit", summary="Change history of a segment, newest first")
    async def audit(
        self, ctx: Ctx, key: FromPath[str], limit: Limit = 100, cursor: FromQuery[str | None] = None
    ) -> s.AuditList:
        where = AuditFilter(resource_type="segment", resource_key=key)
        return await entries(ctx, where, limit=limit, cursor=cursor)
