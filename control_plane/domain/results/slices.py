"""Results by dimension: the experiment's results again in each slice of its units.

A dimension is a context attribute the experiment captures with each exposure (its
``dimensions``: ``country``, ``plan``, ``/device/os``), or a property of a unit's first event of
a name at or after its exposure (``event:<event>:<property>``, e.g. ``event:session:browser``).
Each exposed unit falls in one slice: one of the ``top`` values with the most exposed units,
``other`` (any other value), or ``none`` (no value), so the slices' units, conversions and sums
add up to the totals. Per slice, each metric gets the block the totals get, from the same SQL
sums grouped by one more key (:func:`~control_plane.domain.results.sums.slice_moments`),
with the totals' percentile caps and shifts.

A slice with fewer than ``minUnits`` exposed units in some arm is shown but not tested. Across
the tested slices, each metric's p-values (every slice and treatment) are adjusted by Holm's
step-down procedure, which holds the family-wise error rate at alpha whatever the dependence
between slices: a slice is ``significant`` only when its adjusted p-value is below alpha (and,
as always, its intervals lie on one side of 0). Holm rather than Benjamini-Hochberg: a slice
read as "it won in Germany" is a claim about that slice, and one false claim among twenty
slices is what a reader of a breakdown fears most. The Bayesian engine has no p-values; its
slices' chances are each their own, and the block says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.analysis.moments import Moments
from control_plane.analysis.multiplicity import holm_by_key
from control_plane.analysis.results import interval_sign
from control_plane.domain.results.partitions import postgres_engine, unit_ranges
from control_plane.domain.results.sql import ArmAggregate, MetricSpec
from control_plane.domain.results.sums import slice_moments, value_counts, with_shifts
from control_plane.domain.results.units import NONE, OTHER, Slicer
from control_plane.errors import FieldError

DEFAULT_TOP = 10
MAX_TOP = 50
DEFAULT_MIN_UNITS = 100
CORRECTION = "holm"
EVENT_PREFIX = "event:"


def parse_dimension(text: str, declared: Sequence[str]) -> Slicer | FieldError:
    """The slicer a ``dimension`` parameter names, or why it names none."""
    if len(text) > 500:  # no name of an event or attribute is as long (a NUL: text_params)
        return FieldError("dimension", "an attribute or event:<event>:<property>, at most 500")
    if text.startswith(EVENT_PREFIX):
        event, _, prop = text[len(EVENT_PREFIX) :].rpartition(":")
        if not event or not prop:
            return FieldError(
                "dimension",
                "an event's property is event:<event>:<property>, e.g. event:session:browser",
            )
        return Slicer(event=event, prop=prop)
    if text not in declared:
        named = ", ".join(declared) if declared else "none"
        return FieldError(
            "dimension",
            f"one of the experiment's dimensions (captured with its exposures: {named}) or "
            "event:<event>:<property>",
        )
    return Slicer(attribute=text)


def check_limits(top: int | None, min_units: int | None) -> tuple[int, int] | list[FieldError]:
    problems = []
    if top is not None and not 1 <= top <= MAX_TOP:
        problems.append(
            FieldError("top", f"how many values get a slice of their own: 1 to {MAX_TOP}")
        )
    if min_units is not None and not 2 <= min_units <= 10_000_000:
        problems.append(
            FieldError(
                "minUnits", "the fewest exposed units per arm a slice is tested with: 2 or more"
            )
        )
    if problems:
        return problems
    return (top or DEFAULT_TOP, min_units or DEFAULT_MIN_UNITS)


def parse_split(
    dimension: str, declared: Sequence[str], top: int | None, min_units: int | None
) -> tuple[Slicer, int, int] | list[FieldError]:
    """The slicer, top and minimum units a split asks for, or every problem with them."""
    limits = check_limits(top, min_units)
    slicer = parse_dimension(dimension, declared)
    problems = (limits if isinstance(limits, list) else []) + (
        [slicer] if isinstance(slicer, FieldError) else []
    )
    if problems:
        return problems
    assert isinstance(limits, tuple)
    assert isinstance(slicer, Slicer)
    return (slicer, *limits)


def top_values(counts: Mapping[tuple[str, str | None], int], top: int) -> tuple[str, ...]:
    """The ``top`` values with the most exposed units (ties by value)."""
    totals: dict[str, int] = {}
    for (_, value), n in counts.items():
        if value is not None:
            totals[value] = totals.get(value, 0) + n
    return tuple(sorted(totals, key=lambda v: (-totals[v], v))[:top])


def slice_index(value: str | None, values: Sequence[str]) -> int:
    if value is None:
        return NONE
    return values.index(value) if value in values else OTHER


# the slicer with its top values, the exposed units per slice index and arm, and per slice index
# the metrics' per-arm aggregates
Split = tuple[Slicer, dict[int, dict[str, int]], dict[int, dict[str, dict[str, ArmAggregate]]]]


async def sliced_aggregates(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    specs: Sequence[MetricSpec],
    caps: Mapping[str, float | None],
    *,
    cuped: bool,
    slicer: Slicer,
    top: int,
) -> Split:
    """The slicer with its top values, the exposed units per slice and arm, and per slice the
    metrics' per-arm aggregates (quantile metrics left out)."""
    # one sample of the unit ranges for the counts and the sums (PostgreSQL runs them by range)
    ranges = (
        await unit_ranges(session, project_id, kind, subject)
        if postgres_engine(session) is not None
        else None
    )
    counts = await value_counts(session, project_id, kind, subject, slicer, ranges)
    slicer = replace(slicer, values=top_values(counts, top))
    exposed: dict[tuple[str, int], int] = {}
    for (arm, value), n in counts.items():
        key = (arm, slice_index(value, slicer.values))
        exposed[key] = exposed.get(key, 0) + n
    resolved = [
        replace(s, cap=caps.get(s.key) if s.percentile is not None else s.cap, percentile=None)
        for s in specs
        if s.quantile is None
    ]
    resolved = await with_shifts(session, project_id, kind, subject, resolved, cuped=cuped)
    sums = await slice_moments(
        session,
        project_id,
        kind,
        subject,
        resolved,
        cuped=cuped,
        slicer=slicer,
        exposed=exposed,
        ranges=ranges,
    )
    by_slice: dict[int, dict[str, int]] = {}
    for (arm, index), n in exposed.items():
        by_slice.setdefault(index, {})[arm] = n
    aggregates: dict[int, dict[str, dict[str, ArmAggregate]]] = {i: {} for i in by_slice}
    for metric_key, per in sums.items():
        for (arm, index), aggregate in per.items():
            aggregates[index].setdefault(metric_key, {})[arm] = aggregate
    return slicer, by_slice, aggregates


def slice_totals(
    specs: Sequence[MetricSpec], aggregates: Mapping[int, Mapping[str, Mapping[str, ArmAggregate]]]
) -> dict[str, dict[str, ArmAggregate]]:
    """The whole experiment's per-arm aggregates (quantile metrics left out) as the sums of its
    slices' (``aggregates``, per slice index): the slices partition the exposed units."""
    totals: dict[str, dict[str, ArmAggregate]] = {
        spec.key: {} for spec in specs if spec.quantile is None
    }
    for by_metric in aggregates.values():
        for key, by_arm in by_metric.items():
            into = totals[key]
            for arm, aggregate in by_arm.items():
                have = into.get(arm)
                if have is None:
                    into[arm] = aggregate
                    continue
                assert isinstance(have.moments, Moments)
                assert isinstance(aggregate.moments, Moments)
                into[arm] = ArmAggregate(
                    have.moments + aggregate.moments, have.converted + aggregate.converted
                )
    return totals


def ordered(indexes: Sequence[int], values: Sequence[str]) -> list[int]:
    """The slices in reading order: the top values by units, then other, then none."""
    present = set(indexes)
    return [i for i in range(len(values)) if i in present] + [
        i for i in (OTHER, NONE) if i in present
    ]


def describe(index: int, values: Sequence[str]) -> dict[str, Any]:
    if index == OTHER:
        return {"value": None, "slice": "other"}
    if index == NONE:
        return {"value": None, "slice": "none"}
    return {"value": values[index], "slice": "value"}


_INTERVALS = {
    "ci_low": "ciLow",
    "ci_high": "ciHigh",
    "difference_ci_low": "differenceCiLow",
    "difference_ci_high": "differenceCiHigh",
}


def correct(blocks: Sequence[dict[str, Any]], control: str, alpha: float) -> None:
    """Holm across the tested slices' comparisons of one metric (``blocks``: its block in each
    tested slice), in place: ``pValueAdjusted`` and ``significant``."""
    p_values: dict[tuple[int, str], float | None] = {}
    for position, block in enumerate(blocks):
        for variant in block["variants"]:
            if variant["key"] != control and "pValue" in variant:
                p_values[(position, variant["key"])] = variant["pValue"]
    adjusted = holm_by_key(p_values)
    for (position, arm), value in adjusted.items():
        variant = next(v for v in blocks[position]["variants"] if v["key"] == arm)
        variant["pValueAdjusted"] = value
        intervals = {name: variant.get(field) for name, field in _INTERVALS.items()}
        variant["significant"] = (
            value is not None and value < alpha and interval_sign(intervals) != 0
        )


async def one_slice(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    slicer: Slicer,
    top: int,
    value: str | None,
    which: str | None,
) -> tuple[Slicer, int] | FieldError:
    """The slicer with its top values and the index of the slice a time series asks for: a
    ``value`` among the top ones, or ``which`` (``other`` or ``none``); or why there is none."""
    if (value is None) == (which is None):
        return FieldError("value", "with a dimension, give a value, or slice=other or slice=none")
    if which is not None and which not in ("other", "none"):
        return FieldError("slice", "other (the values past the top ones) or none (no value)")
    counts = await value_counts(session, project_id, kind, subject, slicer)
    slicer = replace(slicer, values=top_values(counts, top))
    if which is not None:
        return slicer, OTHER if which == "other" else NONE
    if value not in slicer.values:
        return FieldError(
            "value", f"one of the {len(slicer.values)} values with the most exposed units"
        )
    return slicer, slicer.values.index(value)
