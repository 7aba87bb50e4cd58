"""Scheduled changes of a flag in one environment (management key)."""

from __future__ import annotations

from typing import Literal

from litestar import Controller, delete, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx
from control_plane.domain.paging import DEFAULT_LIMIT, Cursor, Limit
from control_plane.domain.protection import GATED_RESPONSES
from control_plane.domain.schedules import schemas as s
from control_plane.domain.schedules import services
from control_plane.errors import StrictBody


class ScheduleController(Controller):
    path = "/flags/{key:str}/environments/{env:str}/schedule"
    tags = ["flags"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @post(
        "/",
        dto=StrictBody[s.ScheduleIn],
        return_dto=None,
        summary="Schedule a toggle ({at, enabled}) or a rollout step ({at, fallthrough})",
        responses=GATED_RESPONSES,
    )
    async def create_schedule(
        self, ctx: Ctx, key: FromPath[str], env: FromPath[str], data: JSONBody[s.ScheduleIn]
    ) -> s.ScheduledChange:
        return await services.create(ctx, key, env, data)

    @get("/", summary="A flag's scheduled changes in one environment, pending and past")
    async def list_schedules(
        self,
        ctx: Ctx,
        key: FromPath[str],
        env: FromPath[str],
        status: FromQuery[Literal["pending", "done", "failed", "cancelled"] | None] = None,
        limit: Limit = DEFAULT_LIMIT,
        cursor: Cursor = None,
    ) -> s.ScheduleList:
        found = await services.list_schedules(ctx, key, env, status, limit=limit, cursor=cursor)
        return s.ScheduleList(
            schedules=found.items,
            count=len(found.items),
            next_cursor=found.next_cursor,
            has_more=found.has_more,
        )

    @get("/{schedule_id:str}", summary="One scheduled change and its outcome")
    async def get_schedule(
        self, ctx: Ctx, key: FromPath[str], env: FromPath[str], schedule_id: FromPath[str]
    ) -> s.ScheduledChange:
        return await services.get(ctx, key, env, schedule_id)

    @delete("/{schedule_id:str}", status_code=200, summary="Cancel a pending scheduled change")
    async def cancel_schedule(
        self, ctx: Ctx, key: FromPath[str], env: FromPath[str], schedule_id: FromPath[str]
    ) -> s.ScheduledChange:
        return await services.cancel(ctx, key, env, schedule_id)
