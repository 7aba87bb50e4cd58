from __future__ import annotations

from typing import Annotated

from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx
from control_plane.domain.keys import schemas as s
from control_plane.domain.keys import services
from control_plane.domain.paging import DEFAULT_LIMIT, Cursor, Limit
from control_plane.errors import StrictBody


class KeyController(Controller):
    path = "/keys"
    tags = ["keys"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get(
        "/",
        summary="List API keys (never their secrets), a page at a time",
        description="In issue order. `revoked=true` includes revoked keys; `environment`: the "
        "environment a key is bound to.",
    )
    async def list_keys(
        self,
        ctx: Ctx,
        limit: Limit = DEFAULT_LIMIT,
        cursor: Cursor = None,
        revoked: FromQuery[bool] = False,
        kind: FromQuery[s.KindName | None] = None,
        environment: Annotated[str | None, QueryParameter(max_length=128)] = None,
    ) -> s.KeyList:
        found = await services.list_keys(
            ctx,
            include_revoked=revoked,
            kind=kind,
            environment=environment,
            limit=limit,
            cursor=cursor,
        )
        return s.KeyList(
            keys=found.items,
            count=len(found.items),
            next_cursor=found.next_cursor,
            has_more=found.has_more,
        )

    @post(
        "/",
        dto=StrictBody[s.KeyCreate],
        return_dto=None,
        summary="Issue a key; its secret is shown once",
    )
    async def create_key(self, ctx: Ctx, data: JSONBody[s.KeyCreate]) -> s.CreatedKey:
        return await services.create_key(ctx, data)

    @patch(
        "/{key_id:str}",
        dto=StrictBody[s.KeyPatch],
        return_dto=None,
        summary="Change a key's name, or a management key's role and 'may turn off' grant",
        description="Each field left out stays. Only a management key (a service account) has "
        "a `role` and `mayTurnOff`: either on a key of another kind is a 422 naming it. The key "
        "acts with its new role from its next request; its secret is not shown again. A revoked "
        "key stays as it was (409), and a key does not demote itself (409: another admin does). "
        "Audited as `key.update`. Needs `admin`.",
    )
    async def patch_key(self, ctx: Ctx, key_id: FromPath[str], data: JSONBody[s.KeyPatch]) -> s.Key:
        return await services.patch_key(ctx, key_id, data)

    @delete("/{key_id:str}", status_code=200, summary="Revoke a key; it stops working at once")
    async def revoke_key(self, ctx: Ctx, key_id: FromPath[str]) -> s.Key:
        return await services.revoke_key(ctx, key_id)
