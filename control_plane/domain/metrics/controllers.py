from __future__ import annotations

from typing import Annotated

from litestar import Controller, delete, get, patch, post, put
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx, IfMatch
from control_plane.domain.metrics import flag_metrics, services
from control_plane.domain.metrics import schemas as s
from control_plane.domain.paging import DEFAULT_LIMIT, Cursor, Limit
from control_plane.errors import StrictBody


class MetricController(Controller):
    path = "/metrics"
    tags = ["metrics"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/", summary="List metrics, a page at a time", description="Oldest first.")
    async def list_metrics(
        self,
        ctx: Ctx,
        limit: Limit = DEFAULT_LIMIT,
        cursor: Cursor = None,
        event: Annotated[str | None, QueryParameter(max_length=200)] = None,
    ) -> s.MetricList:
        found = await services.list_metrics(ctx, event=event, limit=limit, cursor=cursor)
        return s.MetricList(
            metrics=found.items,
            count=len(found.items),
            next_cursor=found.next_cursor,
            has_more=found.has_more,
        )

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
        self,
        ctx: Ctx,
        id_or_key: FromPath[str],
        data: JSONBody[s.MetricPatch],
        if_match: IfMatch = None,
    ) -> s.Metric:
        return await services.update_metric(ctx, id_or_key, data)

    @delete(
        "/{id_or_key:str}",
        status_code=200,
        summary="Delete a metric no experiment or flag uses",
    )
    async def delete_metric(
        self, ctx: Ctx, id_or_key: FromPath[str], if_match: IfMatch = None
    ) -> s.Deleted:
        return await services.delete_metric(ctx, id_or_key)


class FlagMetricController(Controller):
    """A flag's metrics (``/flags/{key}/metrics``): metrics' own, beside the flag's routes."""

    path = "/flags"
    tags = ["flags"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @put(
        "/{key:str}/metrics",
        dto=StrictBody[s.FlagMetricsIn],
        return_dto=None,
        summary="Attach metrics to a flag (relays then report its exposures)",
    )
    async def set_metrics(
        self, ctx: Ctx, key: FromPath[str], data: JSONBody[s.FlagMetricsIn]
    ) -> s.FlagMetrics:
        return await flag_metrics.set_flag_metrics(ctx, key, data)

    @get("/{key:str}/metrics", summary="Results of the flag's metrics per variation")
    async def metrics(
        self, ctx: Ctx, key: FromPath[str], baseline: FromQuery[int | None] = None
    ) -> s.FlagMetrics:
        return await flag_metrics.flag_metric_results(ctx, key, baseline)
