"""The building blocks of the results' SQL: what a metric reads (``MetricSpec``), what its
sums are taken about (``Shift``), what they come back as (``ArmAggregate``), and the per-unit
value of one part of a metric (:func:`_part_columns`), where the two dialects differ in how event
values are summed (:func:`value_sum`).

For each exposed unit (its first exposure), over its events of the metrics' names at or after
that exposure:

- ``conversion``: y = 1 if any matching event, else 0
- ``count``: y = number of matching events
- ``sum``: y = sum of ``value`` (minor units)
- ``mean``: a ratio metric, y = sum of ``value`` and z = number of events

and, for CUPED, x = the same per-unit quantity over the 14 days before the exposure (w: a
ratio's denominator's); ``c`` marks units with at least one matching event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, and_, case, cast, func, literal, true
from sqlalchemy.sql.elements import ColumnElement

from control_plane.analysis.arms import Arm
from control_plane.db.models import Event, Exposure

CUPED_WINDOW_MS = 14 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class ArmAggregate:
    moments: Arm  # as the engines take it: sufficient statistics, or a quantile's estimate
    converted: int  # exposed units with at least one matching event after exposure


@dataclass(frozen=True, slots=True)
class Shift:
    """The values a metric's sums are taken about (one unit's y, z, x and w)."""

    y: float = 0.0
    z: float = 0.0
    x: float = 0.0
    w: float = 0.0


@dataclass(frozen=True, slots=True)
class MetricSpec:
    key: str
    event: str
    aggregation: str  # conversion | count | sum | mean | ratio
    cap: float | None = None  # sum, mean, ratio: each unit's y (and CUPED x) is at most this
    # sum, mean, ratio: cap at this percentile of the pooled units, resolved by ``arm_moments``
    percentile: float | None = None
    currency: str | None = None  # only events in this currency count in the parts summing value
    shift: Shift | None = None  # resolved by ``with_shifts`` (``arm_moments`` calls it)
    numerator: str = "sum"  # ratio: sum | count of ``event`` per unit
    denominator: tuple[str, str] | None = None  # ratio: (event, sum | count) per unit
    quantile: float | None = None  # quantile: p (``control_plane.domain.results.quantiles``)

    @property
    def parts(self) -> tuple[tuple[str, str], tuple[str, str] | None]:
        """(event, aggregation) of the per-unit y and of the ratio's z (``None``: no ratio).
        A ``mean`` is the ratio of its event's sum of value to its count."""
        if self.aggregation == "mean":
            return (self.event, "sum"), (self.event, "count")
        if self.aggregation == "ratio" and self.denominator is not None:
            return (self.event, self.numerator), self.denominator
        return (self.event, self.aggregation), None

    @property
    def is_ratio(self) -> bool:
        return self.parts[1] is not None

    @property
    def events(self) -> tuple[str, ...]:
        y, z = self.parts
        return tuple(sorted({y[0]} | ({z[0]} if z is not None else set())))


def capped(value: ColumnElement[Any], cap: float | None) -> ColumnElement[Any]:
    """``min(value, cap)`` in SQL (a CASE: the same on both databases)."""
    if cap is None:
        return value
    bound = literal(cap, Float)
    return case((value > bound, bound), else_=value)


_SUMS: tuple[str, ...] = ("sm", "sc", "sy", "syy", "sz", "szz", "syz", "sx", "sxx", "sxy")
_SUMS += ("sw", "sww", "sxw", "syw", "szx", "szw")
# the sums of the products of the per-unit values, about their shifts, by column prefix
_PRODUCTS = {
    "syy": ("y", "y"),
    "szz": ("z", "z"),
    "syz": ("y", "z"),
    "sxx": ("x", "x"),
    "sxy": ("x", "y"),
    "sww": ("w", "w"),
    "sxw": ("x", "w"),
    "syw": ("y", "w"),
    "szx": ("z", "x"),
    "szw": ("z", "w"),
}
_MOMENT_OF = {"sy": "sum_y", "sz": "sum_z", "sx": "sum_x", "sw": "sum_w"}
_MOMENT_OF |= {
    "syy": "sum_y2",
    "szz": "sum_z2",
    "syz": "sum_yz",
    "sxx": "sum_x2",
    "sxy": "sum_xy",
    "sww": "sum_w2",
    "sxw": "sum_xw",
    "syw": "sum_yw",
    "szx": "sum_zx",
    "szw": "sum_zw",
}


@dataclass(frozen=True, slots=True)
class _Shape:
    key: str
    has_z: bool
    has_x: bool
    shift: Shift = Shift()

    @property
    def variables(self) -> tuple[str, ...]:
        """The per-unit values the metric's query returns: y; z for a ratio; x for CUPED; and
        w, the ratio's CUPED denominator."""
        out = ("y", "z") if self.has_z else ("y",)
        return out + tuple("x" + v[1:] if v == "y" else "w" for v in out) if self.has_x else out


_ALWAYS = true()  # passed by identity: "no condition"


def value_sum(dialect: str, values: ColumnElement[Any]) -> ColumnElement[Any]:
    """A sum of event values that cannot overflow: PostgreSQL's ``sum(bigint)`` is ``numeric``
    (exact, unbounded); SQLite's ``sum`` of integers raises past 2^63, its ``total`` is a double."""
    return func.total(values) if dialect == "sqlite" else func.sum(values)


def _part(
    metric: MetricSpec,
    part: tuple[str, str],
    during: ColumnElement[bool],
    only_event: bool,
    dialect: str,
) -> tuple[ColumnElement[float], ColumnElement[float]]:
    """(value, converted) per unit of one part of ``metric`` (its ``(event, aggregation)``) over
    the joined events where ``during`` holds; ``only_event``: every joined event has the part's
    name (no per-row name test)."""
    event, aggregation = part
    matches = during if only_event else and_(Event.event == event, during)
    # a currency leaves out events in another one (or none) where value is read: in parts
    # summing value, and in both parts of a mean (a mean of EUR orders counts EUR orders)
    if metric.currency is not None and (aggregation == "sum" or metric.aggregation == "mean"):
        matches = and_(matches, Event.currency == metric.currency)
    if matches is _ALWAYS:  # every joined event counts: no CASE per row
        count: ColumnElement[Any] = func.count()
        total: ColumnElement[Any] = value_sum(dialect, func.coalesce(Event.value, 0))
        converted: ColumnElement[Any] = func.max(1)
    else:
        count = func.sum(case((matches, 1), else_=0))
        total = value_sum(dialect, case((matches, func.coalesce(Event.value, 0)), else_=0))
        converted = func.max(case((matches, 1), else_=0))
    value = {"conversion": converted, "count": count}.get(aggregation, total)
    return cast(value, Float), cast(converted, Float)


def _part_columns(
    metric: MetricSpec,
    index: int,
    which: str,
    cuped: bool,
    only_event: bool,
    dialect: str,
    cap: float | None,
) -> list[ColumnElement[Any]]:
    """The per-unit columns of one part of ``metric`` (at position ``index``): ``which`` 'y',
    its y (capped at ``cap``) and c, whether the unit converted (an event of y's part); or 'z',
    a ratio's denominator. With CUPED also the same before the exposure: x (capped) or w."""
    y_part, z_part = metric.parts
    part = y_part if which == "y" else z_part
    assert part is not None
    after = Event.ts >= Exposure.exposed_at if cuped else _ALWAYS
    value, converted = _part(metric, part, after, only_event, dialect)
    columns: list[ColumnElement[Any]] = (
        [converted.label(f"c{index}"), capped(value, cap).label(f"y{index}")]
        if which == "y"
        else [value.label(f"z{index}")]
    )
    if cuped:
        before = and_(
            Event.ts < Exposure.exposed_at, Event.ts >= Exposure.exposed_at - CUPED_WINDOW_MS
        )
        prior, _ = _part(metric, part, before, only_event, dialect)
        columns.append(
            capped(prior, cap).label(f"x{index}") if which == "y" else prior.label(f"w{index}")
        )
    return columns
