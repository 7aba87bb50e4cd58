"""Experiment endpoints of the interface (management key; assignment also a bound server key)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, delete, get, patch, post, put
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from control_plane.auth import ALSO_KEYS, KeyKind, Principal, requires
from control_plane.deps import UNSERIALISED, Ctx, IfMatch
from control_plane.domain.experiments import power as planning
from control_plane.domain.experiments import results, services
from control_plane.domain.experiments import schemas as s
from control_plane.domain.paging import DEFAULT_LIMIT, Cursor, Limit
from control_plane.errors import ApiError, StrictBody


class ExperimentController(Controller):
    path = "/experiments"
    tags = ["experiments"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get(
        "/",
        summary="The project's experiments with status, goal, selector and variants, a page at a time",
        description="Oldest first. `q`: part of the key or name (case-insensitive).",
    )
    async def list_experiments(
        self,
        ctx: Ctx,
        limit: Limit = DEFAULT_LIMIT,
        cursor: Cursor = None,
        status: FromQuery[s.Status | None] = None,
        type: FromQuery[s.ExperimentType | None] = None,
        q: Annotated[str | None, QueryParameter(max_length=200)] = None,
    ) -> s.ExperimentList:
        found = await services.list_experiments(
            ctx, status=status, type=type, q=q, limit=limit, cursor=cursor
        )
        return s.ExperimentList(
            experiments=found.items,
            count=len(found.items),
            next_cursor=found.next_cursor,
            has_more=found.has_more,
        )

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
        return planning.plan(data)

    @get(
        "/{id_or_key:str}",
        summary="An experiment with its results",
        description="`results.winner` is the verdict (`results.verdict`): a fixed-horizon engine "
        "(frequentist, bayesian) names a winner only once every arm reached the planned sample "
        "(+5 % at power 0.8, at least 1,000 units per arm; `verdict.state` is `not-yet` before), "
        "the sequential engine at any look. "
        "Query `mde` (relative, default 0.05): the effect the power block sizes for "
        "(not the verdict's plan). "
        "`dimension`: also the results per slice of an attribute the experiment captures with "
        "its exposures (one of its `dimensions`) or of a property of the units' first event of a "
        "name (`event:<event>:<property>`): the `top` values (default 10), `other` and `none`, "
        "slices with fewer than `minUnits` units in an arm (default 100) shown but not tested, "
        "p-values adjusted across slices (Holm).",
    )
    async def get_experiment(
        self,
        ctx: Ctx,
        id_or_key: FromPath[str],
        mde: FromQuery[float | None] = None,
        dimension: FromQuery[str | None] = None,
        top: FromQuery[int | None] = None,
        min_units: Annotated[int | None, QueryParameter(name="minUnits")] = None,
    ) -> s.ExperimentWithResults:
        return await results.with_results(
            ctx, id_or_key, mde, dimension=dimension, top=top, min_units=min_units
        )

    @get(
        "/{id_or_key:str}/timeseries",
        summary="Cumulative results per UTC day and variant, to chart",
        description="Query `metric`: a guardrail's key (default: the primary metric). "
        "`dimension` with `value` (one of its `top` values, default 10) or `slice` (`other` or "
        "`none`): the series of the units of that slice, as the results by dimension split them.",
    )
    async def get_timeseries(
        self,
        ctx: Ctx,
        id_or_key: FromPath[str],
        metric: FromQuery[str | None] = None,
        dimension: FromQuery[str | None] = None,
        value: FromQuery[str | None] = None,
        slice_: Annotated[str | None, QueryParameter(name="slice")] = None,
        top: FromQuery[int | None] = None,
    ) -> s.Timeseries:
        return await results.timeseries(
            ctx, id_or_key, metric, dimension=dimension, value=value, which=slice_, top=top
        )

    @post(
        "/{id_or_key:str}",
        dto=StrictBody[s.StatusIn],
        return_dto=None,
        status_code=200,
        summary="Change an experiment's status (draft, running, stopped)",
    )
    async def set_status(
        self,
        ctx: Ctx,
        id_or_key: FromPath[str],
        data: JSONBody[s.StatusIn],
        if_match: IfMatch = None,
    ) -> s.Experiment:
        return await services.set_status(ctx, id_or_key, data)

    @patch(
        "/{id_or_key:str}",
        dto=StrictBody[s.ExperimentPatch],
        return_dto=None,
        summary="Edit an experiment",
        description="`name`, `description`, `statsEngine`, `cuped` at any time; `url`, "
        "`selector`, `goal` and the variants' content only while no unit is exposed (409).",
    )
    async def patch_experiment(
        self,
        ctx: Ctx,
        id_or_key: FromPath[str],
        data: JSONBody[s.ExperimentPatch],
        if_match: IfMatch = None,
    ) -> s.Experiment:
        return await services.patch_experiment(ctx, id_or_key, data)

    @delete(
        "/{id_or_key:str}",
        status_code=200,
        summary="Delete a draft or stopped experiment (and its exposures)",
    )
    async def delete_experiment(
        self, ctx: Ctx, id_or_key: FromPath[str], if_match: IfMatch = None
    ) -> s.ExperimentDeleted:
        return await services.delete_experiment(ctx, id_or_key)

    @post(
        "/{key:str}/assign",
        dto=StrictBody[s.AssignIn],
        return_dto=None,
        status_code=200,
        summary="Assign a unit to a variant (records its first exposure)",
        description="Management key, or a server key bound to an environment (a backend).",
        opt={ALSO_KEYS: [KeyKind.SERVER], UNSERIALISED: True},  # records exposures only
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
        self,
        ctx: Ctx,
        id_or_key: FromPath[str],
        data: JSONBody[s.MetricsIn],
        if_match: IfMatch = None,
    ) -> s.MetricsSetting:
        return await services.set_metrics(ctx, id_or_key, data)
