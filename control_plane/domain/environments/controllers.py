from __future__ import annotations

from typing import Annotated

from litestar import Controller, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx, IfMatch
from control_plane.domain.environments import schemas as s
from control_plane.domain.environments import services
from control_plane.domain.paging import DEFAULT_LIMIT, Cursor, Limit
from control_plane.errors import StrictBody


class EnvironmentController(Controller):
    path = "/environments"
    tags = ["environments"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/", summary="List environments")
    async def list_environments(
        self, ctx: Ctx, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
    ) -> s.EnvironmentList:
        found = await services.list_environments(ctx, limit=limit, cursor=cursor)
        return s.EnvironmentList(
            environments=found.items,
            count=len(found.items),
            next_cursor=found.next_cursor,
            has_more=found.has_more,
        )

    @post(
        "/",
        dto=StrictBody[s.EnvironmentCreate],
        return_dto=None,
        summary="Create an environment (empty, or a copy of another's flag settings)",
    )
    async def create_environment(
        self, ctx: Ctx, data: JSONBody[s.EnvironmentCreate]
    ) -> s.Environment:
        return await services.create_environment(ctx, data)

    @get("/{key:str}", summary="An environment")
    async def get_environment(self, ctx: Ctx, key: FromPath[str]) -> s.Environment:
        return await services.get_environment(ctx, key)

    @patch(
        "/{key:str}",
        dto=StrictBody[s.EnvironmentPatch],
        return_dto=None,
        summary="Rename an environment (its keys stay bound to it), or set its protection",
        description="`requiredApprovals` (0 to 5, admin): above 0 the environment is protected: "
        "flag settings, rules, targets, prerequisites, rollouts, schedules there and segments "
        "its flags use change only through an approved change request (`/change-requests`); "
        "turning a flag off stays immediate for whoever holds `turn-off`.",
    )
    async def patch_environment(
        self,
        ctx: Ctx,
        key: FromPath[str],
        data: JSONBody[s.EnvironmentPatch],
        if_match: IfMatch = None,
    ) -> s.Environment:
        return await services.patch_environment(ctx, key, data)

    @delete(
        "/{key:str}",
        status_code=200,
        summary="Delete an environment and its flag settings",
        description="409 while keys are bound to it, unless `revokeKeys=true` (they are revoked "
        "and removed with it); 409 for the project's last environment.",
    )
    async def delete_environment(
        self,
        ctx: Ctx,
        key: FromPath[str],
        revoke_key: NamedDependency[services.RevokeKey],
        revoke_keys: Annotated[bool, QueryParameter(name="revokeKeys")] = False,
        if_match: IfMatch = None,
    ) -> s.EnvironmentDeleted:
        revoke = revoke_key if revoke_keys else None
        return await services.delete_environment(ctx, key, revoke=revoke)
