from __future__ import annotations

from litestar import Controller, get, put
from litestar.params import FromPath, JSONBody

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx
from control_plane.domain.coderefs import schemas as s
from control_plane.domain.coderefs import services
from control_plane.errors import StrictBody


class CodeRefController(Controller):
    path = "/"
    tags = ["code references"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @put(
        "/code-refs",
        dto=StrictBody[s.CodeRefUpload],
        return_dto=None,
        summary="Upload a repository's flag references, replacing its previous upload",
    )
    async def upload(self, ctx: Ctx, data: JSONBody[s.CodeRefUpload]) -> s.UploadResult:
        return await services.upload(ctx, data)

    @get("/code-refs/stale", summary="Temporary flags no code references")
    async def stale(self, ctx: Ctx) -> s.StaleFlags:
        return await services.stale_flags(ctx)

    @get("/flags/{key:str}/code-refs", summary="Where a flag's key is used in code")
    async def flag_refs(self, ctx: Ctx, key: FromPath[str]) -> s.FlagCodeRefs:
        return await services.refs_of_flag(ctx, key)
