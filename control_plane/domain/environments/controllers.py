from __future__ import annotations

from litestar import Controller, get, post
from litestar.params import JSONBody

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx
from control_plane.domain.environments import schemas as s
from control_plane.domain.environments import services
from control_plane.errors import StrictBody


class EnvironmentController(Controller):
    path = "/environments"
    tags = ["environments"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/", summary="List environments")
    async def list_environments(self, ctx: Ctx) -> s.EnvironmentList:
        envs = await services.list_environments(ctx)
        return s.EnvironmentList(environments=envs, count=len(envs))

    @post(
        "/", dto=StrictBody[s.EnvironmentCreate], return_dto=None, summary="Create an environment"
    )
    async def create_environment(
        self, ctx: Ctx, data: JSONBody[s.EnvironmentCreate]
    ) -> s.Environment:
        return await services.create_environment(ctx, data)
