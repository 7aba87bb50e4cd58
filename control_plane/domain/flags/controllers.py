"""Flag endpoints of the interface (management key)."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, delete, get, patch, post, put
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx, IfMatch
from control_plane.domain.flags import reads, services, settings
from control_plane.domain.flags import schemas as s
from control_plane.domain.paging import DEFAULT_LIMIT, Cursor, Limit
from control_plane.domain.protection import GATED_RESPONSES, TOGGLE, TOGGLE_RESPONSES
from control_plane.errors import StrictBody


class FlagController(Controller):
    path = "/flags"
    tags = ["flags"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get(
        "/",
        summary="List flags, a page at a time, by key",
        description=(
            "`archived`: `false` (default) live flags, `true` live and archived, `only` archived. "
            "`q`: part of the key or name (case-insensitive). `stale`: temporary flags no code "
            "references that have not changed for that many days."
        ),
    )
    async def list_flags(
        self,
        ctx: Ctx,
        limit: Limit = DEFAULT_LIMIT,
        cursor: Cursor = None,
        archived: FromQuery[reads.ArchivedFilter] = "false",
        q: Annotated[str | None, QueryParameter(max_length=200)] = None,
        tag: Annotated[str | None, QueryParameter(max_length=200)] = None,
        type: FromQuery[s.FlagType | None] = None,
        temporary: FromQuery[bool | None] = None,
        stale: Annotated[int | None, QueryParameter(ge=0, le=36500)] = None,
    ) -> s.FlagList:
        where = reads.FlagFilter(
            archived=archived, q=q, tag=tag, type=type, temporary=temporary, stale_days=stale
        )
        found = await reads.list_flags(ctx, where, limit=limit, cursor=cursor)
        return s.FlagList(
            flags=found.items,
            count=len(found.items),
            next_cursor=found.next_cursor,
            has_more=found.has_more,
        )

    @post("/", dto=StrictBody[s.FlagCreate], return_dto=None, summary="Create a flag")
    async def create_flag(self, ctx: Ctx, data: JSONBody[s.FlagCreate]) -> s.Flag:
        return await services.create_flag(ctx, data)

    @get("/{key:str}", summary="Get a flag")
    async def get_flag(self, ctx: Ctx, key: FromPath[str]) -> s.Flag:
        return await reads.get_flag(ctx, key)

    @patch(
        "/{key:str}",
        dto=StrictBody[s.FlagPatch],
        return_dto=None,
        summary="Update a flag",
        description="Also its variations (add, rename, change a value; a variation in use is "
        "never removed) and bucketBy; these republish every environment.",
        responses=GATED_RESPONSES,
    )
    async def patch_flag(
        self, ctx: Ctx, key: FromPath[str], data: JSONBody[s.FlagPatch], if_match: IfMatch = None
    ) -> s.Flag:
        return await services.patch_flag(ctx, key, data)

    @delete(
        "/{key:str}",
        status_code=200,
        summary="Delete an archived flag for good",
        description="409 unless the flag is archived and no flag names it as a prerequisite.",
    )
    async def delete_flag(
        self, ctx: Ctx, key: FromPath[str], if_match: IfMatch = None
    ) -> s.FlagDeleted:
        return await services.delete_flag(ctx, key)

    @post(
        "/{key:str}/archive",
        status_code=200,
        summary="Archive a flag",
        responses=GATED_RESPONSES,
    )
    async def archive(self, ctx: Ctx, key: FromPath[str], if_match: IfMatch = None) -> s.Flag:
        return await services.archive_flag(ctx, key)

    @post(
        "/{key:str}/restore",
        status_code=200,
        summary="Restore an archived flag",
        responses=GATED_RESPONSES,
    )
    async def restore(self, ctx: Ctx, key: FromPath[str], if_match: IfMatch = None) -> s.Flag:
        return await services.restore_flag(ctx, key)

    @get("/{key:str}/environments/{env:str}", summary="A flag's settings in one environment")
    async def get_settings(
        self, ctx: Ctx, key: FromPath[str], env: FromPath[str]
    ) -> s.EnvironmentSettings:
        return await reads.get_settings(ctx, key, env)

    @put(
        "/{key:str}/environments/{env:str}",
        dto=StrictBody[s.EnvironmentSettingsIn],
        return_dto=None,
        summary="Change a flag's settings in one environment",
        responses=GATED_RESPONSES,
    )
    async def put_settings(
        self,
        ctx: Ctx,
        key: FromPath[str],
        env: FromPath[str],
        data: JSONBody[s.EnvironmentSettingsIn],
        if_match: IfMatch = None,
    ) -> s.EnvironmentSettings:
        return await settings.put_settings(ctx, key, env, data)

    @post(
        "/{key:str}/environments/{env:str}/toggle",
        dto=StrictBody[s.ToggleIn],
        return_dto=None,
        status_code=200,
        summary="Turn a flag on or off in one environment (kill switch)",
        description=TOGGLE,
        responses=TOGGLE_RESPONSES,
    )
    async def toggle(
        self,
        ctx: Ctx,
        key: FromPath[str],
        env: FromPath[str],
        data: JSONBody[s.ToggleIn],
        if_match: IfMatch = None,
    ) -> s.Toggled:
        return await settings.toggle(ctx, key, env, data.enabled)

    @post(
        "/{key:str}/environments/{env:str}/evaluate",
        dto=StrictBody[s.EvaluateIn],
        return_dto=None,
        status_code=200,
        summary="Preview what a relay would serve a context, and why",
    )
    async def evaluate(
        self, ctx: Ctx, key: FromPath[str], env: FromPath[str], data: JSONBody[s.EvaluateIn]
    ) -> s.Preview:
        return await reads.preview(ctx, key, env, data.context)

    @get("/{key:str}/environments/{env:str}/rules", summary="A flag's targeting rules")
    async def get_rules(self, ctx: Ctx, key: FromPath[str], env: FromPath[str]) -> s.Rules:
        return await reads.get_rules(ctx, key, env)

    @put(
        "/{key:str}/environments/{env:str}/rules",
        dto=StrictBody[s.RulesIn],
        return_dto=None,
        summary="Replace a flag's targeting rules",
        responses=GATED_RESPONSES,
    )
    async def put_rules(
        self,
        ctx: Ctx,
        key: FromPath[str],
        env: FromPath[str],
        data: JSONBody[s.RulesIn],
        if_match: IfMatch = None,
    ) -> s.Rules:
        return await settings.put_rules(ctx, key, env, data)
