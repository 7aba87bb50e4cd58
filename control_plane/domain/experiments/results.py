"""An experiment's results and their time series: its metrics as the results read them, the
parameters checked, then :mod:`control_plane.domain.results` on its exposures and events."""

from __future__ import annotations

import math
from dataclasses import replace

from sqlalchemy import select

from control_plane.db.models import Experiment, Metric
from control_plane.domain.common import Scope
from control_plane.domain.experiments import decisions
from control_plane.domain.experiments import schemas as s
from control_plane.domain.experiments.canonical import CONTROL
from control_plane.domain.experiments.power import MIN_RELATIVE_EFFECT
from control_plane.domain.experiments.services import experiment_out, find
from control_plane.domain.results.cache import cached
from control_plane.domain.results.caps import percentile_cap
from control_plane.domain.results.forecast import running_days
from control_plane.domain.results.metric import ALPHA, MetricDef, capping_block, metric_specs
from control_plane.domain.results.slices import describe as describe_slice
from control_plane.domain.results.slices import one_slice, parse_split
from control_plane.domain.results.sql import MetricSpec
from control_plane.domain.results.subject import DEFAULT_TARGET_EFFECT, analyse_subject
from control_plane.domain.results.timeseries import DayIncrement, cumulative_days, day_increments
from control_plane.domain.results.units import Slicer
from control_plane.errors import FieldError, invalid, invalid_many


async def _metric_defs(scope: Scope, row: Experiment) -> tuple[MetricDef, list[MetricDef]]:
    """The primary metric (the ``goal`` as a conversion metric when none is set) and the
    guardrails."""
    ids = [i for i in [row.primary_metric_id, *row.guardrail_metric_ids] if i]
    by_id = (
        {m.id: m for m in await scope.session.scalars(select(Metric).where(Metric.id.in_(ids)))}
        if ids
        else {}
    )
    primary = (
        MetricDef.of(by_id[row.primary_metric_id])
        if row.primary_metric_id in by_id
        else MetricDef(
            key=f"goal:{row.goal}",
            name=row.goal,
            event=row.goal,
            aggregation="conversion",
            direction="higher",
        )
    )
    return primary, [MetricDef.of(by_id[i]) for i in row.guardrail_metric_ids if i in by_id]


async def timeseries(
    scope: Scope,
    id_or_key: str,
    metric: str | None,
    *,
    dimension: str | None = None,
    value: str | None = None,
    which: str | None = None,
    top: int | None = None,
) -> s.Timeseries:
    """Cumulative results per UTC day of one metric (the primary unless ``metric`` names a
    guardrail), with the experiment's engine and capping; with a ``dimension``, of the units of
    one slice (a ``value`` among its ``top``, or ``which``: other or none)."""
    row = await find(scope, id_or_key)
    primary, guardrails = await _metric_defs(scope, row)
    chosen = primary
    if metric is not None:
        found = [m for m in (primary, *guardrails) if m.key == metric]
        if not found:
            raise invalid_many(
                [FieldError("metric", "the key of the experiment's primary metric or a guardrail")]
            )
        chosen = found[0]
    part = None
    if dimension is not None:
        part = await _time_slice(scope, row, dimension, value, which, top)
    elif value is not None or which is not None:
        raise invalid("dimension", "a value or slice belongs to a dimension: give it")
    if chosen.is_quantile:  # no running sums to add up day by day: each day would sort anew
        return s.Timeseries(
            experiment=row.key,
            metric=chosen.describe(),
            engine=row.stats_engine,
            control=CONTROL,
            capping=None,
            days=[],
            notes=[
                "a quantile metric has no time series: each day's quantile needs its own order "
                "statistics; the results show it as of now"
            ],
        )
    spec = metric_specs([chosen])[0]

    async def compute() -> tuple[MetricSpec, dict[int, dict[str, DayIncrement]]]:
        resolved = spec
        if spec.percentile is not None:
            cap = await percentile_cap(
                scope.session, scope.project_id, "experiment", row.id, spec, spec.percentile
            )
            resolved = replace(spec, cap=cap, percentile=None)
        only = (
            None if part is None else part[0].holds(scope.project_id, "experiment", row.id, part[1])
        )
        return resolved, await day_increments(
            scope.session, scope.project_id, "experiment", row.id, resolved, only
        )

    spec, increments = await cached(
        scope.session, ("day_increments", scope.project_id, row.id, spec, part), compute
    )
    days = cumulative_days(
        increments,
        arms=[x["key"] for x in row.variants],
        control=CONTROL,
        engine=row.stats_engine,
        ratio=chosen.is_ratio,
        alpha=ALPHA,
        prior_sd=scope.bayesian_prior_sd,
    )
    notes = ["cumulative as of the end of each UTC day"]
    if part is not None:
        notes.append(
            "the units of one slice, capped as in the whole experiment"
            if spec.cap is not None
            else "the units of one slice"
        )
    if row.cuped:
        notes.append("CUPED is not applied to the time series (the results are adjusted)")
    return s.Timeseries(
        experiment=row.key,
        metric=chosen.describe(),
        engine=row.stats_engine,
        control=CONTROL,
        capping=capping_block(chosen, spec.cap),
        days=days,
        notes=notes,
        slice=(
            None
            if part is None or dimension is None
            else s.TimeSlice(dimension=dimension, **describe_slice(part[1], part[0].values))
        ),
    )


async def _time_slice(
    scope: Scope,
    row: Experiment,
    dimension: str,
    value: str | None,
    which: str | None,
    top: int | None,
) -> tuple[Slicer, int]:
    """The slicer and slice index a time series asks for, or 422 naming the field."""
    split = parse_split(dimension, row.dimensions or [], top, None)
    if isinstance(split, list):
        raise invalid_many(split)
    slicer, top_n, _ = split
    found = await one_slice(
        scope.session, scope.project_id, "experiment", row.id, slicer, top_n, value, which
    )
    if isinstance(found, FieldError):
        raise invalid_many([found])
    return found


async def with_results(
    scope: Scope,
    id_or_key: str,
    target_effect: float | None = None,
    *,
    dimension: str | None = None,
    top: int | None = None,
    min_units: int | None = None,
) -> s.ExperimentWithResults:
    """The experiment and its results against its metrics (``goal`` as conversion if none);
    ``target_effect`` (relative) is the effect whose sample size the power block estimates;
    ``dimension`` splits them (see :mod:`control_plane.domain.results.slices`)."""
    if target_effect is not None and not (
        math.isfinite(target_effect) and MIN_RELATIVE_EFFECT <= abs(target_effect) <= 10
    ):
        raise invalid_many(
            [
                FieldError(
                    "mde",
                    f"a relative effect such as 0.05, from {MIN_RELATIVE_EFFECT:g} to 10 in size",
                )
            ]
        )

    row = await find(scope, id_or_key)
    split = None
    if dimension is not None:
        parsed = parse_split(dimension, row.dimensions or [], top, min_units)
        if isinstance(parsed, list):
            raise invalid_many(parsed)
        split = (dimension, *parsed)
    out = await experiment_out(scope, row)
    primary, guardrails = await _metric_defs(scope, row)
    weights = {x["key"]: float(x["weight"]) for x in row.variants if x.get("weight") is not None}
    results = await analyse_subject(
        scope.session,
        scope.project_id,
        kind="experiment",
        subject=row.id,
        arms=[x["key"] for x in row.variants],
        control=CONTROL,
        weights=weights or None,
        primary=primary,
        guardrails=guardrails,
        engine=row.stats_engine,
        cuped=row.cuped,
        prior_sd=scope.bayesian_prior_sd,
        target_effect=target_effect if target_effect is not None else DEFAULT_TARGET_EFFECT,
        running_days=running_days(row.status, row.started_at),
        dimension=split,
    )
    await decisions.announce(scope, row, results)
    return s.ExperimentWithResults(
        **{f: getattr(out, f) for f in out.__struct_fields__}, results=results
    )
