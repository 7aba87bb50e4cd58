"""Experiment and flag results: SQL sufficient statistics → the chosen engine → JSON.

Metrics analysed: the primary metric (or, with none set, the experiment's ``goal`` as a
conversion metric) and each guardrail. A sequential engine's always-valid p-values are kept as a
running minimum across looks (``sequential_looks``), which keeps them valid and monotone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.analysis import (
    AnalysisResult,
    Comparison,
    SequentialBounds,
    Verdict,
    planned_units_per_arm,
    srm_check,
    verdict,
)
from control_plane.analysis.power import DEFAULT_POWER as POWER
from control_plane.db.models import SequentialLook
from control_plane.domain.results.cache import cached
from control_plane.domain.results.dimensions import dimension_block, split_of
from control_plane.domain.results.forecast import power_block
from control_plane.domain.results.metric import (
    ALPHA,
    EMPTY,
    MetricDef,
    analyse_metric,
    finite,
    metric_block,
    metric_specs,
)
from control_plane.domain.results.quantiles import arm_quantiles
from control_plane.domain.results.slices import Split, slice_totals
from control_plane.domain.results.sql import ArmAggregate
from control_plane.domain.results.sums import arm_moments
from control_plane.domain.results.units import Slicer

DEFAULT_TARGET_EFFECT = 0.05  # relative: the effect whose sample size the results estimate


async def _previous_looks(
    session: AsyncSession, subject: str, metric: str
) -> tuple[dict[str, float | None], dict[str, SequentialBounds]]:
    rows = list(
        await session.scalars(
            select(SequentialLook).where(
                SequentialLook.subject == subject, SequentialLook.metric == metric
            )
        )
    )
    return (
        {row.arm: row.min_p_value for row in rows},
        {
            row.arm: SequentialBounds(
                row.ci_low, row.ci_high, row.difference_low, row.difference_high
            )
            for row in rows
        },
    )


async def _remember_looks(
    session: AsyncSession, subject: str, metric: str, result: AnalysisResult
) -> None:
    """Keep each arm's running minimum p-value and the intersection of its sequences."""
    for arm, comparison in result.comparisons.items():
        p_value = comparison.always_valid_p_value
        if p_value is None or not math.isfinite(p_value):
            continue
        bounds = result.sequential_bounds.get(arm, SequentialBounds())
        row = await session.get(SequentialLook, (subject, metric, arm))
        if row is None:
            row = SequentialLook(
                subject=subject, metric=metric, arm=arm, min_p_value=p_value, looks=0
            )
            session.add(row)
        row.min_p_value = min(row.min_p_value, p_value)
        row.looks += 1
        row.ci_low, row.ci_high = finite(bounds.ci_low), finite(bounds.ci_high)
        row.difference_low = finite(bounds.difference_low)
        row.difference_high = finite(bounds.difference_high)
    await session.flush()


async def analyse_subject(
    session: AsyncSession,
    project_id: str,
    *,
    kind: str,
    subject: str,
    arms: Sequence[str],
    control: str,
    weights: Mapping[str, float] | None,
    primary: MetricDef,
    guardrails: Sequence[MetricDef],
    engine: str,
    cuped: bool,
    prior_sd: float | None = 0.3,
    target_effect: float = DEFAULT_TARGET_EFFECT,
    running_days: float | None = None,
    dimension: tuple[str, Slicer, int, int] | None = None,
) -> dict[str, Any]:
    """The ``results`` block for an experiment (``kind`` experiment) or a flag (``kind`` flag);
    with a ``dimension`` (its name, slicer, top and minimum units) also the results per slice
    (:mod:`control_plane.domain.results.slices`)."""
    metrics = [primary, *guardrails]
    specs = metric_specs(metrics)

    async def quantile_aggregates() -> dict[str, dict[str, ArmAggregate]]:
        out = {}
        for spec in specs:
            if spec.quantile is not None:
                by_arm = await arm_quantiles(session, project_id, kind, subject, spec)
                out[spec.key] = {
                    arm: ArmAggregate(q.summary(), q.units_with_events) for arm, q in by_arm.items()
                }
        return out

    async def compute() -> tuple[dict[str, dict[str, ArmAggregate]], dict[str, float | None]]:
        found: dict[str, float | None] = {}
        means = [spec for spec in specs if spec.quantile is None]
        sums = await arm_moments(session, project_id, kind, subject, means, cuped=cuped, caps=found)
        return {**sums, **await quantile_aggregates()}, found

    split: Split | None = None
    if dimension is not None and all(spec.percentile is None for spec in specs):
        # the slices partition the units, so the totals are the sums of the slices': one pass
        # over the events (a percentile cap is the whole experiment's and must come first)
        caps: dict[str, float | None] = {s.key: s.cap for s in specs if s.cap is not None}
        split = await split_of(session, project_id, kind, subject, specs, caps, cuped, dimension)
        aggregates = slice_totals(specs, split[2])
        if any(spec.quantile is not None for spec in specs):
            quantile_key = ("quantiles", project_id, kind, subject, tuple(specs))
            aggregates |= await cached(session, quantile_key, quantile_aggregates)
    else:
        aggregates, caps = await cached(
            session, ("arm_moments", project_id, kind, subject, tuple(specs), cuped), compute
        )
        if dimension is not None:
            split = await split_of(
                session, project_id, kind, subject, specs, caps, cuped, dimension
            )
    exposed = {arm: aggregates[primary.key].get(arm, EMPTY).moments.n for arm in arms}
    srm = srm_check(exposed, weights)
    blocks: dict[str, dict[str, Any]] = {}
    comparisons: dict[str, Mapping[str, Comparison]] = {}
    results_by_metric: dict[str, AnalysisResult] = {}
    for metric in metrics:
        by_arm = aggregates[metric.key]
        previous, bounds = (
            await _previous_looks(session, subject, metric.key)
            if engine == "sequential"
            else (None, None)
        )
        result = analyse_metric(
            metric,
            by_arm,
            arms,
            control,
            engine=engine,
            cuped=cuped,
            prior_sd=prior_sd,
            previous=previous,
            bounds=bounds,
        )
        if engine == "sequential":
            await _remember_looks(session, subject, metric.key, result)
        comparisons[metric.key] = result.comparisons
        results_by_metric[metric.key] = result
        blocks[metric.key] = metric_block(
            metric, result, by_arm, arms, control, exposed, caps.get(metric.key)
        )
    primary_block = blocks[primary.key]
    primary_result = results_by_metric[primary.key]
    decided = verdict(
        comparisons[primary.key],
        {g.key: comparisons[g.key] for g in guardrails},
        {g.key: g.direction for g in guardrails},  # type: ignore[misc]
        engine=engine,  # type: ignore[arg-type]
        exposed=exposed,
        planned_per_arm=planned_units_per_arm(
            primary_result, DEFAULT_TARGET_EFFECT, alpha=ALPHA, power=POWER
        ),
        primary_direction=primary.direction,  # type: ignore[arg-type]
        control_key=control,
    )
    why = decided.reason
    if srm.flagged:
        why = f"{why}; sample ratio mismatch (p={srm.p_value:.2g}): check assignment before trusting this"
    split_block = (
        dimension_block(
            metrics,
            caps,
            arms,
            control,
            engine=engine,
            cuped=cuped,
            prior_sd=prior_sd,
            dimension=dimension,
            split=split,
        )
        if dimension is not None and split is not None
        else None
    )
    return {
        "engine": engine,
        "alpha": ALPHA,
        "control": control,
        "metric": primary_block["metric"],
        "variants": primary_block["variants"],
        "cuped": primary_block["cuped"],
        "capping": primary_block["capping"],
        "winner": decided.winner,
        "winnerReason": why,
        "verdict": verdict_block(decided),
        "srm": {
            "pValue": finite(srm.p_value),
            "statistic": finite(srm.statistic),
            "flagged": srm.flagged,
            "threshold": srm.threshold,
            "expected": dict(srm.expected),
            "note": srm.reason,
        },
        "guardrails": [blocks[g.key] for g in guardrails],
        "power": power_block(
            primary_result, sum(exposed.values()), target_effect, running_days, len(arms)
        ),
        "notes": primary_block["notes"],
        **({"dimension": split_block} if split_block is not None else {}),
    }


def verdict_block(decided: Verdict) -> dict[str, Any]:
    """The verdict as the results show it (``winner`` repeats the top-level field)."""
    return {
        "state": decided.state,
        "winner": decided.winner,
        "plannedPerArm": decided.planned_per_arm,
        "reachedPerArm": decided.reached_per_arm,
        "unitsStillNeeded": decided.units_still_needed,
        "targetEffect": 100.0 * DEFAULT_TARGET_EFFECT if decided.planned_per_arm else None,
        "power": POWER if decided.planned_per_arm else None,
        "reading": decided.reading,
    }
