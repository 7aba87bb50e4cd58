from __future__ import annotations

from litestar import Controller, delete, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx
from control_plane.domain.keys import schemas as s
from control_plane.domain.keys import services
from control_plane.errors import StrictBody


class KeyController(Controller):
    path = "/keys"
    tags = ["keys"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/", summary="List API keys (never their secrets)")
    async def list_keys(self, ctx: Ctx, revoked: FromQuery[bool] = False) -> s.KeyList:
        keys = await services.list_keys(ctx, include_revoked=revoked)
        return s.KeyList(keys=keys, count=len(keys))

    @post(
        "/",
        dto=StrictBody[s.KeyCreate],
        return_dto=None,
        summary="Issue a key; its secret is shown once",
    )
    async def create_key(self, ctx: Ctx, data: JSONBody[s.KeyCreate]) -> s.CreatedKey:
        return await services.create_key(ctx, data)

    @delete("/{key_id:str}", status_code=200, summary="Revoke a key; it stops working at once")
    async def revoke_key(self, ctx: Ctx, key_id: FromPath[str]) -> s.Key:
        return await services.revoke_key(ctx, key_id)
