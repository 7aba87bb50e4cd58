"""Experiment endpoints of the interface (management key; assignment also a bound server key)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get, post, put
from litestar.params import FromPath, FromQuery, JSONBody

from control_plane.auth import ALSO_KEYS, KeyKind, Principal, requires
from control_plane.deps import Ctx
from control_plane.domain.experiments import schemas as s
from control_plane.domain.experiments import services
from control_plane.errors import ApiError, StrictBody


class ExperimentController(Controller):
    path = "/experiments"
    tags = ["experiments"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/", summary="Every experiment of the project with status, goal, selector and variants")
    async def list_experiments(self, ctx: Ctx) -> s.ExperimentList:
        experiments = await services.list_experiments(ctx)
        return s.ExperimentList(experiments=experiments, count=len(experiments))

    @post(
        "/",
        dto=StrictBody[s.ExperimentCreate],
        return_dto=None,
        summary="Create (and by default start) an experiment",
    )
    async def create(self, ctx: Ctx, data: JSONBody[s.ExperimentCreate]) -> s.Experiment:
        return await services.create_experiment(ctx, data)

    @post(
        "/power",
        dto=StrictBody[s.PowerIn],
        return_dto=None,
        status_code=200,
        summary="Units per variant to detect a relative effect (plan before starting)",
    )
    async def power(self, data: JSONBody[s.PowerIn]) -> s.PowerOut:
        return services.plan(data)

    @get(
        "/{id_or_key:str}",
        summary="An experiment with its results",
        description="Query `mde` (relative, default 0.05): the effect the power block sizes for.",
    )
    async def get_experiment(
        self,
        ctx: Ctx,
        id_or_key: FromPath[str],
        mde: FromQuery[float | None] = None,
    ) -> s.ExperimentWithResults:
        return await services.with_results(ctx, id_or_key, mde)

    @get(
        "/{id_or_key:str}/timeseries",
        summary="Cumulative results per UTC day and variant, to chart",
        description="Query `metric`: a guardrail's key (default: the primary metric).",
    )
    async def get_timeseries(
        self, ctx: Ctx, id_or_key: FromPath[str], metric: FromQuery[str | None] = None
    ) -> s.Timeseries:
        return await services.timeseries(ctx, id_or_key, metric)

    @post(
        "/{id_or_key:str}",
        dto=StrictBody[s.StatusIn],
        return_dto=None,
        status_code=200,
        summary="Change an experiment's status (draft, running, stopped)",
    )
    async def set_status(
        self, ctx: Ctx, id_or_key: FromPath[str], data: JSONBody[s.StatusIn]
    ) -> s.Experiment:
        return await services.set_status(ctx, id_or_key, data)

    @post(
        "/{key:str}/assign",
        dto=StrictBody[s.AssignIn],
        return_dto=None,
        status_code=200,
        summary="Assign a unit to a variant (records its first exposure)",
        description="Management key, or a server key bound to an environment (a backend).",
        opt={ALSO_KEYS: [KeyKind.SERVER]},
    )
    async def assign(
        self,
        ctx: Ctx,
        request: Request[Principal, Any, Any],
        key: FromPath[str],
        data: JSONBody[s.AssignIn],
    ) -> s.Assignment:
        if request.user.kind is KeyKind.SERVER and request.user.environment_id is None:
            raise ApiError(
                403,
                "this server key is not bound to an environment; issue one with "
                "'vane keys create --kind server --env <environment>' to assign experiments",
            )
        return await services.assign(ctx, key, data)

    @put(
        "/{id_or_key:str}/metrics",
        dto=StrictBody[s.MetricsIn],
        return_dto=None,
        summary="Set the primary metric and guardrails (by metric key or id)",
    )
    async def set_metrics(
        self, ctx: Ctx, id_or_key: FromPath[str], data: JSONBody[s.MetricsIn]
    ) -> s.MetricsSetting:
        return await services.set_metrics(ctx, id_or_key, data)
