"""Layer and holdout endpoints of the interface (management key)."""

from __future__ import annotations

from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, JSONBody

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx, IfMatch
from control_plane.domain.layers import schemas as s
from control_plane.domain.layers import services
from control_plane.domain.paging import DEFAULT_LIMIT, Cursor, Limit
from control_plane.errors import StrictBody


class LayerController(Controller):
    path = "/layers"
    tags = ["layers"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get(
        "/",
        summary="The project's layers, a page at a time",
        description="Oldest first. Each shows the parts its running experiments hold.",
    )
    async def list_layers(
        self, ctx: Ctx, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
    ) -> s.LayerList:
        found = await services.list_layers(ctx, limit=limit, cursor=cursor)
        return s.LayerList(
            layers=found.items,
            count=len(found.items),
            next_cursor=found.next_cursor,
            has_more=found.has_more,
        )

    @post(
        "/",
        dto=StrictBody[s.LayerCreate],
        return_dto=None,
        summary="Create a layer: its experiments never share a unit",
    )
    async def create_layer(self, ctx: Ctx, data: JSONBody[s.LayerCreate]) -> s.Layer:
        return await services.create_layer(ctx, data)

    @get("/{id_or_key:str}", summary="A layer and the parts of it its running experiments hold")
    async def get_layer(self, ctx: Ctx, id_or_key: FromPath[str]) -> s.Layer:
        return await services.layer_out(ctx, await services.find_layer(ctx, id_or_key))

    @patch(
        "/{id_or_key:str}",
        dto=StrictBody[s.LayerPatch],
        return_dto=None,
        summary="Change a layer's name or description",
    )
    async def update_layer(
        self,
        ctx: Ctx,
        id_or_key: FromPath[str],
        data: JSONBody[s.LayerPatch],
        if_match: IfMatch = None,
    ) -> s.Layer:
        return await services.update_layer(ctx, id_or_key, data)

    @delete(
        "/{id_or_key:str}",
        status_code=200,
        summary="Delete a layer no experiment or holdout names (409 otherwise)",
    )
    async def delete_layer(
        self, ctx: Ctx, id_or_key: FromPath[str], if_match: IfMatch = None
    ) -> s.Deleted:
        return await services.delete_layer(ctx, id_or_key)


class HoldoutController(Controller):
    path = "/holdouts"
    tags = ["holdouts"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/", summary="The project's holdouts, a page at a time", description="Oldest first.")
    async def list_holdouts(
        self, ctx: Ctx, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
    ) -> s.HoldoutList:
        found = await services.list_holdouts(ctx, limit=limit, cursor=cursor)
        return s.HoldoutList(
            holdouts=found.items,
            count=len(found.items),
            next_cursor=found.next_cursor,
            has_more=found.has_more,
        )

    @post(
        "/",
        dto=StrictBody[s.HoldoutCreate],
        return_dto=None,
        summary="Create a holdout (running): a share of units kept out of every experiment "
        "of the project, or of one layer",
    )
    async def create_holdout(self, ctx: Ctx, data: JSONBody[s.HoldoutCreate]) -> s.Holdout:
        return await services.create_holdout(ctx, data)

    @get("/{id_or_key:str}", summary="A holdout and the units exposed in each group")
    async def get_holdout(self, ctx: Ctx, id_or_key: FromPath[str]) -> s.Holdout:
        return await services.holdout_out(ctx, await services.find_holdout(ctx, id_or_key))

    @get(
        "/{id_or_key:str}/results",
        summary="The combined effect of everything launched in the holdout's scope",
        description="The general group against the held-out units (the control), per metric, "
        "in the blocks of an experiment's results.",
    )
    async def get_results(self, ctx: Ctx, id_or_key: FromPath[str]) -> s.HoldoutResults:
        return await services.holdout_results(ctx, id_or_key)

    @patch(
        "/{id_or_key:str}",
        dto=StrictBody[s.HoldoutPatch],
        return_dto=None,
        summary="Rename a holdout, change its metrics, stop or restart it",
    )
    async def update_holdout(
        self,
        ctx: Ctx,
        id_or_key: FromPath[str],
        data: JSONBody[s.HoldoutPatch],
        if_match: IfMatch = None,
    ) -> s.Holdout:
        return await services.update_holdout(ctx, id_or_key, data)

    @delete(
        "/{id_or_key:str}",
        status_code=200,
        summary="Delete a stopped holdout and its exposures",
    )
    async def delete_holdout(
        self, ctx: Ctx, id_or_key: FromPath[str], if_match: IfMatch = None
    ) -> s.Deleted:
        return await services.delete_holdout(ctx, id_or_key)
