from __future__ import annotations

from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, JSONBody

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx
from control_plane.domain.metrics import schemas as s
from control_plane.domain.metrics import services
from control_plane.errors import StrictBody


class MetricController(Controller):
    path = "/metrics"
    tags = ["metrics"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/", summary="List metrics")
    async def list_metrics(self, ctx: Ctx) -> s.MetricList:
        metrics = await services.list_metrics(ctx)
        return s.MetricList(metrics=metrics, count=len(metrics))

    @post("/", dto=StrictBody[s.MetricCreate], return_dto=None, summary="Define a metric")
    async def create_metric(self, ctx: Ctx, data: JSONBody[s.MetricCreate]) -> s.Metric:
        return await services.create_metric(ctx, data)

    @get("/{id_or_key:str}", summary="Get a metric by id or key")
    async def get_metric(self, ctx: Ctx, id_or_key: FromPath[str]) -> s.Metric:
        return services.metric_out(await services.get(ctx, id_or_key))

    @patch(
        "/{id_or_key:str}",
        dto=StrictBody[s.MetricPatch],
        return_dto=None,
        summary="Change a metric's name, direction, format, description or capping",
    )
    async def update_metric(
        self, ctx: Ctx, id_or_key: FromPath[str], data: JSONBody[s.MetricPatch]
    ) -> s.Metric:
        return await services.update_metric(ctx, id_or_key, data)

    @delete(
        "/{id_or_key:str}", status_code=200, summary="Delete a metric no experiment or flag uses"
    )
    async def delete_metric(self, ctx: Ctx, id_or_key: FromPath[str]) -> s.Deleted:
        return await services.delete_metric(ctx, id_or_key)
