"""One metric of a subject's results: its definition as the results read it (``MetricDef``, the SQL's
``MetricSpec``), its analysis with the subject's engine (``analyse_metric``) and its block in
the results (``metric_block``, with its capping and each arm's comparison)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from control_plane.analysis import (
    AnalysisResult,
    Comparison,
    Moments,
    SequentialBounds,
    analyse,
)
from control_plane.db.models import Metric
from control_plane.domain.results.sql import ArmAggregate, MetricSpec

ALPHA = 0.05


CAPPED = ("sum", "mean", "ratio")


RATIOS = ("mean", "ratio")


READS_VALUE = (*CAPPED, "quantile")  # what may name a currency


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
        "cap": finite(cap),
        "note": None
        if cap is not None
        else "the percentile is not above 0 (or nothing is exposed): nothing capped",
    }


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _comparison_json(c: Comparison | None) -> dict[str, Any]:
    if c is None:
        return {}
    return {
        "uplift": finite(c.uplift),
        "ciLow": finite(c.ci_low),
        "ciHigh": finite(c.ci_high),
        "interval": c.interval,
        "difference": finite(c.difference),
        "differenceCiLow": finite(c.difference_ci_low),
        "differenceCiHigh": finite(c.difference_ci_high),
        "differenceStdError": finite(c.std_error),
        "statistic": finite(c.statistic),
        "df": finite(c.df),
        "pValue": finite(c.p_value),
        "pValueAdjusted": finite(c.p_value_adjusted),
        "significant": c.significant,
        "test": c.test,
        "chanceToBeatControl": finite(c.chance_to_beat_control),
        "expectedLoss": finite(c.expected_loss),
        "expectedLossControl": finite(c.expected_loss_control),
        "alwaysValidPValue": finite(c.always_valid_p_value),
        "varianceReduction": finite(c.variance_reduction),
        "note": c.reason,
    }


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
                "rate": finite(summary.mean) if summary else None,
                "stdError": finite(summary.std_error) if summary else None,
                "adjustedRate": finite(summary.adjusted_mean) if summary else None,
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
                "theta": finite(result.cuped.theta),
                "varianceReduction": finite(result.cuped.variance_reduction),
                "note": result.cuped.reason,
            }
            if result.cuped is not None
            else None
        ),
        "capping": capping_block(metric, cap),
        "notes": notes,
    }
