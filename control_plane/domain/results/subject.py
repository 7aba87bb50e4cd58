"""Experiment and flag results: SQL sufficient statistics → the chosen engine → JSON.

Metrics analysed: the primary metric (or, with none set, the experiment's ``goal`` as a
conversion metric) and each guardrail. A sequential engine's always-valid p-values are kept as a
running minimum across looks (``sequential_looks``), which keeps them valid and monotone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.analysis import (
    AnalysisResult,
    Comparison,
    Moments,
    SequentialBounds,
    Verdict,
    analyse,
    planned_units_per_arm,
    srm_check,
    units_needed,
    verdict,
)
from control_plane.analysis.power import DEFAULT_POWER as POWER
from control_plane.analysis.power import minimum_detectable_effect
from control_plane.db.models import Metric, SequentialLook
from control_plane.db.types import utcnow
from control_plane.domain.results.cache import cached
from control_plane.domain.results.quantiles import arm_quantiles
from control_plane.domain.results.slices import CORRECTION, Split, slice_totals, sliced_aggregates
from control_plane.domain.results.slices import correct as correct_across_slices
from control_plane.domain.results.slices import describe as describe_slice
from control_plane.domain.results.slices import ordered as slices_in_order
from control_plane.domain.results.sql import ArmAggregate, MetricSpec
from control_plane.domain.results.sums import arm_moments
from control_plane.domain.results.units import Slicer

ALPHA = 0.05
CAPPED = ("sum", "mean", "ratio")
RATIOS = ("mean", "ratio")
READS_VALUE = (*CAPPED, "quantile")  # what may name a currency
DEFAULT_TARGET_EFFECT = 0.05  # relative: the effect whose sample size the results estimate
EMPTY = ArmAggregate(Moments(0, 0.0, 0.0), 0)
_MEANINGS = {
    "sum": "rate is the mean sum of value per exposed unit; conversions (= unitsWithEvents) "
    "counts exposed units with at least one '{event}' event",
    "count": "rate is the mean number of '{event}' events per exposed unit; conversions "
    "(= unitsWithEvents) counts exposed units with at least one",
    "mean": "rate is the mean value per '{event}' event (a ratio of sums); conversions "
    "(= unitsWithEvents) counts exposed units with at least one",
    "ratio": "rate is the {numerator} of '{event}' over the {denominator} of '{denominator_event}' "
    "(a ratio of sums over the exposed units); conversions (= unitsWithEvents) counts exposed "
    "units with at least one '{event}' event",
    "quantile": "rate is the p{percent:g} of the value of '{event}' events (nearest rank; "
    "stdError from the order statistics bracketing it, units' events taken together); "
    "conversions (= unitsWithEvents) counts exposed units with at least one such event",
}
_OF = {"sum": "sum of value", "count": "count"}


@dataclass(frozen=True, slots=True)
class MetricDef:
    key: str
    name: str
    event: str
    aggregation: str
    direction: str
    format: str = ""
    capping: str | None = None  # absolute | percentile
    capping_value: float | None = None
    currency: str | None = None  # sum, mean, ratio: only events in this currency (summed)
    numerator: str | None = None  # ratio: sum | count of ``event``
    denominator_event: str | None = None  # ratio
    denominator: str | None = None  # ratio: sum | count of ``denominator_event``
    quantile: float | None = None  # quantile: p, 0 < p < 1

    @classmethod
    def of(cls, row: Metric) -> MetricDef:
        return cls(
            row.key,
            row.name,
            row.event,
            row.aggregation,
            row.direction,
            row.format,
            row.capping,
            row.capping_value,
            row.currency,
            row.numerator,
            row.denominator_event,
            row.denominator,
            row.quantile,
        )

    @property
    def is_quantile(self) -> bool:
        return self.aggregation == "quantile" and self.quantile is not None

    @property
    def is_ratio(self) -> bool:
        """Analysed as a ratio of sums with the delta method (``mean`` and ``ratio``)."""
        return self.aggregation in RATIOS

    def meaning(self) -> str:
        return _MEANINGS[self.aggregation].format(
            event=self.event,
            numerator=_OF.get(self.numerator or "sum"),
            denominator=_OF.get(self.denominator or "count"),
            denominator_event=self.denominator_event,
            percent=100 * (self.quantile or 0),
        )

    def describe(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "event": self.event,
            "aggregation": self.aggregation,
            "direction": self.direction,
            "format": self.format,
            "capping": (
                {"type": self.capping, "value": self.capping_value}
                if self.capping is not None and self.capping_value is not None
                else None
            ),
            "currency": self.currency,
            "numerator": {"event": self.event, "aggregation": self.numerator or "sum"}
            if self.aggregation == "ratio"
            else None,
            "denominator": {
                "event": self.denominator_event,
                "aggregation": self.denominator or "count",
            }
            if self.aggregation == "ratio"
            else None,
            "quantile": self.quantile if self.aggregation == "quantile" else None,
        }


def metric_specs(metrics: Sequence[MetricDef]) -> list[MetricSpec]:
    """The SQL specs of ``metrics``: an absolute cap as its amount, a percentile for
    :func:`arm_moments` (or :func:`percentile_cap`) to resolve."""
    specs = []
    for m in metrics:
        capped = m.capping is not None and m.capping_value is not None and m.aggregation in CAPPED
        specs.append(
            MetricSpec(
                m.key,
                m.event,
                m.aggregation,
                cap=m.capping_value if capped and m.capping == "absolute" else None,
                percentile=m.capping_value if capped and m.capping == "percentile" else None,
                currency=m.currency if m.aggregation in READS_VALUE else None,
                numerator=m.numerator or "sum",
                denominator=(m.denominator_event, m.denominator or "count")
                if m.aggregation == "ratio" and m.denominator_event is not None
                else None,
                quantile=m.quantile if m.is_quantile else None,
            )
        )
    return specs


def capping_block(metric: MetricDef, cap: float | None) -> dict[str, Any] | None:
    """What capping did to ``metric`` (``cap``: the amount applied, ``None`` if nothing)."""
    if metric.capping is None or metric.capping_value is None or metric.aggregation not in CAPPED:
        return None
    return {
        "type": metric.capping,
        "value": metric.capping_value,
        "cap": _finite(cap),
        "note": None
        if cap is not None
        else "the percentile is not above 0 (or nothing is exposed): nothing capped",
    }


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _comparison_json(c: Comparison | None) -> dict[str, Any]:
    if c is None:
        return {}
    return {
        "uplift": _finite(c.uplift),
        "ciLow": _finite(c.ci_low),
        "ciHigh": _finite(c.ci_high),
        "interval": c.interval,
        "difference": _finite(c.difference),
        "differenceCiLow": _finite(c.difference_ci_low),
        "differenceCiHigh": _finite(c.difference_ci_high),
        "differenceStdError": _finite(c.std_error),
        "statistic": _finite(c.statistic),
        "df": _finite(c.df),
        "pValue": _finite(c.p_value),
        "pValueAdjusted": _finite(c.p_value_adjusted),
        "significant": c.significant,
        "test": c.test,
        "chanceToBeatControl": _finite(c.chance_to_beat_control),
        "expectedLoss": _finite(c.expected_loss),
        "expectedLossControl": _finite(c.expected_loss_control),
        "alwaysValidPValue": _finite(c.always_valid_p_value),
        "varianceReduction": _finite(c.variance_reduction),
        "note": c.reason,
    }


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
        row.ci_low, row.ci_high = _finite(bounds.ci_low), _finite(bounds.ci_high)
        row.difference_low = _finite(bounds.difference_low)
        row.difference_high = _finite(bounds.difference_high)
    await session.flush()


def analyse_metric(
    metric: MetricDef,
    by_arm: Mapping[str, ArmAggregate],
    arms: Sequence[str],
    control: str,
    *,
    engine: str,
    cuped: bool,
    prior_sd: float | None,
    previous: Mapping[str, float | None] | None = None,
    bounds: Mapping[str, SequentialBounds] | None = None,
) -> AnalysisResult:
    """The experiment's engine on one metric's arms."""
    return analyse(
        by_arm.get(control, EMPTY).moments,
        {arm: by_arm.get(arm, EMPTY).moments for arm in arms if arm != control},
        engine=engine,  # type: ignore[arg-type]
        ratio=metric.is_ratio or metric.is_quantile,  # the normal test and intervals
        alpha=ALPHA,
        cuped=cuped,
        direction=metric.direction,  # type: ignore[arg-type]
        previous_p_values=previous,
        previous_bounds=bounds,
        prior_sd=prior_sd,
    )


def metric_block(
    metric: MetricDef,
    result: AnalysisResult,
    by_arm: Mapping[str, ArmAggregate],
    arms: Sequence[str],
    control: str,
    exposed: Mapping[str, int],
    cap: float | None,
    *,
    tested: bool = True,
) -> dict[str, Any]:
    """One metric's block of the results: per variant its numbers and (``tested``) its
    comparison with the control, CUPED, capping and notes."""
    variants = []
    for arm in arms:
        summary = result.control if arm == control else result.treatments.get(arm)
        with_events = by_arm.get(arm, EMPTY).converted
        variants.append(
            {
                "key": arm,
                "exposed": exposed.get(arm, 0),
                "conversions": with_events,
                "unitsWithEvents": with_events,
                "rate": _finite(summary.mean) if summary else None,
                "stdError": _finite(summary.std_error) if summary else None,
                "adjustedRate": _finite(summary.adjusted_mean) if summary else None,
                **(_comparison_json(result.comparisons.get(arm)) if tested else {}),
            }
        )
    notes = list(result.notes)
    if metric.aggregation != "conversion":
        notes.append(metric.meaning())
    return {
        "metric": metric.describe(),
        "ratio": metric.is_ratio,
        "variants": variants,
        "cuped": (
            {
                "applied": result.cuped.applied,
                "theta": _finite(result.cuped.theta),
                "varianceReduction": _finite(result.cuped.variance_reduction),
                "note": result.cuped.reason,
            }
            if result.cuped is not None
            else None
        ),
        "capping": capping_block(metric, cap),
        "notes": notes,
    }


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
        split = await _split(session, project_id, kind, subject, specs, caps, cuped, dimension)
        aggregates = slice_totals(specs, split[2])
        if any(spec.quantile is not None for spec in specs):
            quantile_key = ("quantiles", project_id, kind, subject, tuple(specs))
            aggregates |= await cached(session, quantile_key, quantile_aggregates)
    else:
        aggregates, caps = await cached(
            session, ("arm_moments", project_id, kind, subject, tuple(specs), cuped), compute
        )
        if dimension is not None:
            split = await _split(session, project_id, kind, subject, specs, caps, cuped, dimension)
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
        _dimension_block(
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
            "pValue": _finite(srm.p_value),
            "statistic": _finite(srm.statistic),
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


async def _split(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    specs: Sequence[MetricSpec],
    caps: Mapping[str, float | None],
    cuped: bool,
    dimension: tuple[str, Slicer, int, int],
) -> Split:
    """The slicer with its top values, the exposed units per slice and arm, and per slice the
    metrics' aggregates (:func:`~control_plane.domain.results.slices.sliced_aggregates`)."""
    _, slicer, top, _ = dimension

    async def compute() -> Split:
        return await sliced_aggregates(
            session, project_id, kind, subject, specs, caps, cuped=cuped, slicer=slicer, top=top
        )

    key = ("slices", project_id, kind, subject, tuple(specs), cuped, slicer, top)
    return await cached(session, key, compute)


def _dimension_block(
    metrics: Sequence[MetricDef],
    caps: Mapping[str, float | None],
    arms: Sequence[str],
    control: str,
    *,
    engine: str,
    cuped: bool,
    prior_sd: float | None,
    dimension: tuple[str, Slicer, int, int],
    split: Split,
) -> dict[str, Any]:
    """The results per slice of ``dimension``: each slice's units per arm and, per metric, the
    block of the totals, tested when every arm has ``min_units``, corrected across slices."""
    name, _, top, min_units = dimension
    slicer, exposed, aggregates = split
    slices = []
    tested_blocks: dict[str, list[dict[str, Any]]] = {m.key: [] for m in metrics}
    for index in slices_in_order(list(exposed), slicer.values):
        units = exposed[index]
        tested = all(units.get(arm, 0) >= min_units for arm in arms)
        blocks = []
        for metric in metrics:
            if metric.is_quantile:
                continue
            by_arm = aggregates[index].get(metric.key, {})
            result = analyse_metric(
                metric, by_arm, arms, control, engine=engine, cuped=cuped, prior_sd=prior_sd
            )
            block = metric_block(
                metric, result, by_arm, arms, control, units, caps.get(metric.key), tested=tested
            )
            blocks.append(block)
            if tested:
                tested_blocks[metric.key].append(block)
        slices.append(
            {
                **describe_slice(index, slicer.values),
                "exposed": sum(units.values()),
                "tested": tested,
                "note": None
                if tested
                else f"fewer than {min_units} exposed units in an arm: shown, not tested",
                "metrics": blocks,
            }
        )
    if engine != "bayesian":
        for blocks in tested_blocks.values():
            correct_across_slices(blocks, control, ALPHA)
    notes = [
        f"the {len(slicer.values)} values with the most exposed units have a slice each; "
        "'other' holds the rest and 'none' the units without a value: slices add up to the totals"
    ]
    if engine == "bayesian":
        notes.append("the bayesian engine has no p-values: each slice's chances are its own")
    if any(m.is_quantile for m in metrics):
        notes.append("quantile metrics are not split by dimension")
    return {
        "name": name,
        "top": top,
        "minUnits": min_units,
        "correction": CORRECTION if engine != "bayesian" else None,
        "slices": slices,
        "notes": notes,
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


PACE_MIN_DAYS = 1.0
"""A pace (exposed units per day) needs a day of history: fewer hours see one part of the daily
cycle (a night, a morning's peak) and an hour's units multiplied by 24 are no forecast."""
PACE_MIN_UNITS = 100
"""... and this many exposed units: a handful of them divided by any time is noise."""


def running_days(status: str, started_at: datetime | None) -> float | None:
    """Days a subject has run, for its pace; none when it is not running."""
    if status != "running" or started_at is None:
        return None
    return (utcnow() - started_at).total_seconds() / 86_400


def pace(exposed_total: int, running_days: float | None) -> tuple[float | None, str | None]:
    """Exposed units per day since the start, or ``None`` with the reason there is none yet: not
    running (``running_days`` None), or less history than :data:`PACE_MIN_DAYS` and
    :data:`PACE_MIN_UNITS`."""
    if running_days is None:
        return None, "not running"
    if running_days < PACE_MIN_DAYS or exposed_total < PACE_MIN_UNITS:
        hours = max(0.0, running_days) * 24
        return None, (
            f"not enough history yet ({exposed_total:,} exposed units in {hours:.1f} hours; "
            f"a pace needs {PACE_MIN_DAYS * 24:.0f} hours and {PACE_MIN_UNITS} units)"
        )
    return _finite(exposed_total / running_days), None


def power_block(
    result: AnalysisResult,
    exposed_total: int,
    target_effect: float,
    running_days: float | None,
    variants: int,
) -> dict[str, Any]:
    """Per treatment: the minimum detectable effect at the current sample (relative, percent) and
    the units per variant (and days at the current :func:`pace`) to detect ``target_effect``
    (relative) with power 0.8 in a two-sided fixed-horizon test at alpha / (number of
    treatments)."""
    treatments = max(1, variants - 1)
    rate, pace_note = pace(exposed_total, running_days)
    control = result.control
    mean_c = control.adjusted_mean if control.adjusted_mean is not None else control.mean
    needed_by_arm = units_needed(result, target_effect, alpha=ALPHA, power=POWER)
    arms: dict[str, Any] = {}
    for arm, comparison in result.comparisons.items():
        out: dict[str, Any] = {
            "mde": None,
            "unitsPerVariantNeeded": None,
            "additionalUnits": None,
            "daysNeeded": None,
        }
        arms[arm] = out
        if not mean_c or comparison.std_error is None:
            continue
        scale = abs(mean_c)
        out["mde"] = _finite(
            100.0
            * minimum_detectable_effect(
                comparison.std_error, alpha=ALPHA, power=POWER, treatments=treatments
            )
            / scale
        )
        needed = needed_by_arm.get(arm)
        if needed is None:
            continue
        additional = max(0, needed * variants - exposed_total)
        out["unitsPerVariantNeeded"] = needed
        out["additionalUnits"] = additional
        out["daysNeeded"] = _finite(additional / rate) if rate else None
    return {
        "basis": "two-sided fixed-horizon z-test at alpha / treatments, power 0.8",
        "alpha": ALPHA,
        "power": POWER,
        "targetEffect": 100.0 * target_effect,
        "unitsPerDay": rate,
        "paceNote": pace_note,
        "variants": arms,
    }
