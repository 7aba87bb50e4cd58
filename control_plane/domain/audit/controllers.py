"""``GET /audit``: the project's whole audit trail, filtered and paged."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from litestar import Controller, get
from litestar.params import FromQuery, QueryParameter

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx
from control_plane.domain.audit import schemas as s
from control_plane.domain.audit.services import AuditFilter, entries

Limit = Annotated[int, QueryParameter(ge=1, le=1000)]


class AuditController(Controller):
    path = "/audit"
    tags = ["audit"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get(
        "/",
        summary="Every change in the project, newest first",
        description=(
            "Filters: `resourceType` (flag, segment, experiment, metric, key, environment, "
            "code-refs), `resource` (its key or id), `action` (e.g. `flag.toggle`), `actor` "
            "(the acting key's id), `environment`, `since`/`until` (RFC 3339). Page with "
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
