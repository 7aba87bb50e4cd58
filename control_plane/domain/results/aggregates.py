"""Per-arm sufficient statistics computed in SQL; Python receives one row per arm and metric.

For each exposed unit (its first exposure), over its events of the metrics' names at or after
that exposure:

- ``conversion``: y = 1 if any matching event, else 0
- ``count``: y = number of matching events
- ``sum``: y = sum of ``value`` (minor units)
- ``mean``: a ratio metric, y = sum of ``value`` and z = number of events

and, for CUPED, x = the same per-unit quantity over the 14 days before the exposure. The outer
query reduces units to ``Σc, Σy, Σy², Σz, Σz², Σyz, Σx, Σx², Σxy`` per arm (as doubles, so squares
of large sums cannot overflow); ``c`` marks units with at least one matching event. Python
receives rows per arm only.

The sums are taken about a shift, one unit's values (``Σ(y - k_y)²`` and so on; see
:mod:`control_plane.analysis.moments`), which a ``LIMIT 1`` of the per-unit query finds first:
values near 2^53 then keep their spread instead of cancelling to noise.

A unit without matching events has y = z = x = 0, so the sums come from an inner join of
exposures and events, with the joined units counted (``m``), and the other units are added as
``n - m`` zeros; the unit counts come from the exposures alone. Analysis reads committed data.

On PostgreSQL the costly step — one row per joined event, grouped per unit — is shaped for
streaming: one query per event name, a merge join of two index-only scans in unit order (the
exposures key and ``ix_events_analysis``, both covering and byte-ordered, see migration 0004)
feeding a group-by that never holds more than one unit; a ratio of two events full-joins two
such per-unit streams on the unit, again in unit order. The units are cut into as many ranges
as there are cores, at quantiles of a sample of the exposures, and the (event name, range)
queries run at once on separate connections, with the per-arm unit counts beside them; their
sums add up. A small experiment in a big project still gets the planner's nested loop of index
probes: only hash joins are turned off (hashing a million exposures thrashes the cache and was
three times slower), with parallel workers (we parallelise ourselves) and JIT (compiling cost
more than it saved). SQLite runs one query for all metrics.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sqlalchemy import (
    CompoundSelect,
    Float,
    Select,
    and_,
    case,
    cast,
    func,
    literal,
    select,
    tablesample,
    text,
    true,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import aliased
from sqlalchemy.sql import Executable
from sqlalchemy.sql.elements import ColumnElement

from control_plane.analysis.arms import Arm
from control_plane.analysis.moments import Moments
from control_plane.db.models import Event, Exposure, ExposureAttribute

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


@dataclass(frozen=True, slots=True)
class Slicer:
    """What splits the exposed units into slices: each unit's value of a ``dimension`` — a
    context attribute captured with its exposure (``exposure_attributes``), or the property
    ``prop`` of its first ``event`` at or after exposure — mapped to the index of its slice:
    the position of the value in ``values`` (the top N), ``NONE`` when the unit has no value,
    ``OTHER`` for any other value."""

    attribute: str | None = None
    event: str | None = None
    prop: str | None = None
    values: tuple[str, ...] = ()

    def source(
        self,
        project_id: str,
        kind: str,
        subject: str,
        units: tuple[str | None, str | None] = (None, None),
        *,
        ordered: bool = False,
    ) -> Any:
        """A subquery of (unit, value) for the subject's units in the half-open range ``units``
        (at most one row per unit).

        ``ordered`` (for a merge join on PostgreSQL): in unit order, which keeps the subquery
        from being pulled up into the outer join. Pulled up as the nullable side of an outer
        join, PostgreSQL 15 does not see that the key's leading columns are constants there, so
        it takes the covering key for no order at all and sorts the whole attribute (a million
        rows: 0.7 s); planned on its own, the key is read in unit order, from the range on."""
        if self.attribute is not None:
            query = select(
                ExposureAttribute.unit.label("unit"), ExposureAttribute.value.label("value")
            ).where(
                ExposureAttribute.project_id == project_id,
                ExposureAttribute.kind == kind,
                ExposureAttribute.subject == subject,
                ExposureAttribute.name == self.attribute,
            )
            query = query.where(*in_range(ExposureAttribute.unit, units))
            return (query.order_by(ExposureAttribute.unit) if ordered else query).subquery()
        assert self.event is not None
        assert self.prop is not None
        # per exposed unit, one probe of ix_events_analysis (project, event, unit, ts): a plan
        # that cannot go quadratic on tables the planner has no statistics of yet
        first = (
            select(Event.props[self.prop].as_string())
            .where(
                Event.project_id == Exposure.project_id,
                Event.event == self.event,
                Event.unit == Exposure.unit,
                Event.ts >= Exposure.exposed_at,
            )
            .order_by(Event.ts, Event.event_id)
            .limit(1)
            .correlate(Exposure)
            .scalar_subquery()
        )
        query = select(Exposure.unit.label("unit"), first.label("value")).where(
            Exposure.project_id == project_id,
            Exposure.kind == kind,
            Exposure.subject == subject,
        )
        query = query.where(*in_range(Exposure.unit, units))
        return (query.order_by(Exposure.unit) if ordered else query).subquery()

    def holds(self, project_id: str, kind: str, subject: str, index: int) -> ColumnElement[bool]:
        """The condition that keeps the exposed units of the slice ``index`` (a join's
        ``Exposure.unit``), as :meth:`index` places them."""
        values = self.source(project_id, kind, subject)
        valued = select(values.c.unit).where(values.c.value.is_not(None))
        if index == NONE:
            return Exposure.unit.not_in(valued)
        if index == OTHER:
            return Exposure.unit.in_(valued.where(values.c.value.not_in(self.values)))
        return Exposure.unit.in_(valued.where(values.c.value == self.values[index]))

    def index(self, value: ColumnElement[Any]) -> ColumnElement[int]:
        """The slice index of ``value`` (a joined row's)."""
        whens: list[tuple[ColumnElement[bool], int]] = [(value.is_(None), NONE)]
        whens += [(value == v, i) for i, v in enumerate(self.values)]
        return case(*whens, else_=OTHER)


NONE, OTHER = -1, -2  # slice indexes of the units without a value, and of the rest


def _unit_rows(
    project_id: str,
    kind: str,
    subject: str,
    metrics: Sequence[MetricSpec],
    cuped: bool,
    dialect: str,
    units: tuple[str | None, str | None] = (None, None),
    slicer: Slicer | None = None,
) -> tuple[Select[Any], list[_Shape]]:
    """One row per exposed unit (in ``units``, a half-open range) that has matching events: its
    arm and per-metric values (``c``, ``y``, ``z``, ``x``, ``w`` and the metric's position), and
    with a ``slicer`` its slice index (``slice``).

    Metrics reading several events (a ratio of two) are, on PostgreSQL, one per-unit query per
    event joined on the unit (:func:`_by_event`); otherwise one query over all their events.

    The slicer's values are joined to the per-unit rows, once per unit and in unit order (a
    merge join on PostgreSQL), not to every joined event before they are grouped: that read
    and compared each unit's value once per event (a page-view range of 1M units / 5M events
    took 1.6 times as long as unsliced; now 1.2 times)."""
    names = sorted({event for m in metrics for event in m.events})
    shapes = [_Shape(m.key, m.is_ratio, cuped, m.shift or Shift()) for m in metrics]
    unit: ColumnElement[Any]
    if len(names) > 1 and dialect == "postgresql":
        query, unit = _by_event(project_id, kind, subject, metrics, names, cuped, units)
    else:
        columns: list[ColumnElement[Any]] = []
        for index, metric in enumerate(metrics):
            for which in ("y", "z") if metric.is_ratio else ("y",):
                columns += _part_columns(
                    metric, index, which, cuped, len(names) == 1, dialect, metric.cap
                )
        query = _grouped(project_id, kind, subject, names, cuped, units, columns)
        unit = Exposure.unit.expression
    if slicer is None:
        return query, shapes
    per_unit = query.add_columns(unit.label("unit")).subquery("per_unit")
    values = slicer.source(project_id, kind, subject, units, ordered=dialect == "postgresql")
    sliced = select(
        *(column for column in per_unit.c if column.name != "unit"),
        slicer.index(values.c.value).label("slice"),
    ).select_from(per_unit.outerjoin(values, values.c.unit == per_unit.c.unit))
    return sliced, shapes


def _grouped(
    project_id: str,
    kind: str,
    subject: str,
    names: Sequence[str],
    cuped: bool,
    units: tuple[str | None, str | None],
    columns: Sequence[ColumnElement[Any]],
) -> Select[Any]:
    """``columns`` (and the arm) per exposed unit over its joined events of ``names``: after
    the exposure, or with CUPED from the start of the window before it."""
    window_start = Exposure.exposed_at - CUPED_WINDOW_MS if cuped else Exposure.exposed_at
    joined = and_(
        Event.project_id == Exposure.project_id,
        Event.unit == Exposure.unit,
        Event.event == names[0] if len(names) == 1 else Event.event.in_(names),
        Event.ts >= window_start,
    )
    return (
        select(func.min(Exposure.arm).label("arm"), *columns)
        .select_from(Exposure)
        .join(Event, joined)
        .where(exposed_units(project_id, kind, subject, units))
        .group_by(Exposure.unit)
    )


def _by_event(
    project_id: str,
    kind: str,
    subject: str,
    metrics: Sequence[MetricSpec],
    names: Sequence[str],
    cuped: bool,
    units: tuple[str | None, str | None],
) -> tuple[Select[Any], ColumnElement[Any]]:
    """The per-unit rows of metrics reading several events, and the unit column: per event, the
    parts that read it over that event alone (each a merge join of two index scans in unit
    order, as for one event), full-joined on the unit (a merge join of the ordered per-unit
    rows); a unit without an event of a part has 0 for it. One query over all the events read
    them from as many stretches of the index as there are names and sorted them all by unit
    (a ratio of purchases to page views at 1M units / 5M events: 3.9 s a range, now 1.9 s)."""
    per_event = []
    for position, event in enumerate(names):
        columns: list[ColumnElement[Any]] = []
        for index, metric in enumerate(metrics):
            y_part, z_part = metric.parts
            if y_part[0] == event:
                columns += _part_columns(metric, index, "y", cuped, True, "postgresql", None)
            if z_part is not None and z_part[0] == event:
                columns += _part_columns(metric, index, "z", cuped, True, "postgresql", None)
        grouped = _grouped(project_id, kind, subject, [event], cuped, units, columns)
        per_event.append(grouped.add_columns(Exposure.unit.label("unit")).subquery(f"e{position}"))
    joined: Any = per_event[0]
    unit: ColumnElement[Any] = per_event[0].c.unit
    for sub in per_event[1:]:
        joined = joined.outerjoin(sub, sub.c.unit == unit, full=True)
        unit = func.coalesce(unit, sub.c.unit)
    zero = literal(0.0, Float)
    columns = [func.coalesce(*(sub.c.arm for sub in per_event)).label("arm")]
    for index, metric in enumerate(metrics):
        for name in ("c", "y", "z", "x", "w"):
            found = [sub.c[f"{name}{index}"] for sub in per_event if f"{name}{index}" in sub.c]
            if found:
                value: ColumnElement[Any] = func.coalesce(found[0], zero)
                if name in ("y", "x"):
                    value = capped(value, metric.cap)
                columns.append(value.label(f"{name}{index}"))
    return select(*columns).select_from(joined), unit


def exposed_units(
    project_id: str, kind: str, subject: str, units: tuple[str | None, str | None]
) -> ColumnElement[bool]:
    """The condition on a join of exposures and events that keeps the subject's exposed units
    in the half-open range ``units`` (the one home of the range, for the sums and the series):
    bounded on both sides, so that both index scans start at the range."""
    where = and_(
        Exposure.project_id == project_id, Exposure.kind == kind, Exposure.subject == subject
    )
    return and_(where, *in_range(Exposure.unit, units), *in_range(Event.unit, units))


def in_range(unit: Any, units: tuple[str | None, str | None]) -> list[ColumnElement[bool]]:
    """The conditions that keep ``unit`` (a column) in the half-open range ``units`` (an open
    end: none)."""
    low, high = units
    return [
        *([unit >= low] if low is not None else []),
        *([unit < high] if high is not None else []),
    ]


def _arm_sums(unit_rows: Select[Any], shapes: Sequence[_Shape]) -> Select[Any]:
    per_unit = unit_rows.subquery()
    keys = [per_unit.c.arm, *([per_unit.c.slice] if "slice" in per_unit.c else [])]
    return select(*keys, *_sum_columns(per_unit, shapes)).group_by(*keys)


def _sums_and_largest(
    unit_rows: Select[Any], shapes: Sequence[_Shape], largest: Mapping[int, int]
) -> CompoundSelect[Any]:
    """The per-arm sums (``part`` 'sums') and, for each metric index in ``largest``, that many
    units with the largest values (``part`` 'top': the first three sum columns, ``sm``,
    ``sc`` and ``sy``, hold the index, then y and z), in one
    statement over one materialised pass of the per-unit rows."""
    per_unit = unit_rows.cte("per_unit").prefix_with("MATERIALIZED")
    sums = _sum_columns(per_unit, shapes)
    parts: list[Select[Any]] = [
        select(literal("sums").label("part"), per_unit.c.arm, *sums).group_by(per_unit.c.arm)
    ]
    for index, count in largest.items():
        y = per_unit.c[f"y{index}"]
        z = per_unit.c[f"z{index}"] if shapes[index].has_z else literal(None, Float)
        values: list[ColumnElement[Any]] = [literal(float(index), Float), y, z]
        values += [literal(None, Float)] * (len(sums) - len(values))
        parts.append(
            select(literal("top"), per_unit.c.arm, *values).order_by(y.desc()).limit(count)
        )
    return union_all(*parts)


def _about(value: ColumnElement[Any], shift: float) -> ColumnElement[Any]:
    return value - literal(shift, Float) if shift else value


def _sum_columns(per_unit: Any, shapes: Sequence[_Shape]) -> list[ColumnElement[Any]]:
    """Per metric: the joined units, their conversions, and the sum of each of its per-unit
    values and of each product of two of them, about the metric's shifts."""
    sums: list[ColumnElement[Any]] = []
    for index, shape in enumerate(shapes):
        variables = shape.variables
        about = {v: _about(per_unit.c[f"{v}{index}"], getattr(shape.shift, v)) for v in variables}
        sums += [
            cast(func.count(), Float).label(f"sm{index}"),
            func.sum(per_unit.c[f"c{index}"]).label(f"sc{index}"),
        ]
        sums += [func.sum(about[v]).label(f"s{v}{index}") for v in variables]
        sums += [
            func.sum(about[a] * about[b]).label(f"{name}{index}")
            for name, (a, b) in _PRODUCTS.items()
            if a in about and b in about
        ]
    return sums


def _partitions() -> int:
    """How many concurrent partitions analysis uses on PostgreSQL (default: the cores)."""
    return max(1, int(os.environ.get("VANE_ANALYSIS_PARTITIONS") or os.cpu_count() or 1))


# Below this many exposed units one query is as quick as several.
_MIN_UNITS_PER_RANGE = 20_000
_SAMPLE_ROWS = 20_000  # rows of ``exposures`` a sample reads to place the cuts


def _planner() -> dict[str, str]:
    """Settings local to an analysis query's transaction (read when a query runs)."""
    return {
        "work_mem": os.environ.get("VANE_ANALYSIS_WORK_MEM") or "256MB",
        "enable_hashjoin": "off",
        "max_parallel_workers_per_gather": "0",
        "jit": "off",
    }


@dataclass(frozen=True, slots=True)
class UnitSample:
    """Unit ranges of about equal size, and the sample's estimate of the subject's exposed units
    (``None`` when nothing was sampled)."""

    ranges: list[tuple[str | None, str | None]]
    estimated: float | None


async def unit_ranges(
    session: AsyncSession, project_id: str, kind: str, subject: str
) -> list[tuple[str | None, str | None]]:
    """Half-open unit ranges holding about equal numbers of the subject's exposed units (see
    :func:`sample_units`)."""
    return (await sample_units(session, project_id, kind, subject)).ranges


async def sample_units(
    session: AsyncSession, project_id: str, kind: str, subject: str
) -> UnitSample:
    """Half-open unit ranges holding about equal numbers of the subject's exposed units.

    The cuts are quantiles of a page sample of ``exposures`` (``TABLESAMPLE SYSTEM``, ~20k rows
    read whatever the table's size, never more than 80k kept), which also estimates how many
    units there are: a subject too small to be worth splitting gets one range. The cuts only
    balance the work; any cuts give the same sums.
    """
    if _partitions() == 1:
        return UnitSample([(None, None)], None)
    table_rows = await session.scalar(
        text("SELECT reltuples FROM pg_class WHERE oid = 'exposures'::regclass")
    )
    rows = float(table_rows or 0)
    percent = 100.0 if rows <= _SAMPLE_ROWS else 100.0 * _SAMPLE_ROWS / rows
    sampled = aliased(Exposure, tablesample(Exposure.__table__, func.system(percent)))
    sample = sorted(
        await session.scalars(
            select(sampled.unit)
            .where(
                sampled.project_id == project_id,
                sampled.kind == kind,
                sampled.subject == subject,
            )
            .limit(4 * _SAMPLE_ROWS)  # bounded even when the table's row estimate is stale
        )
    )
    estimated = len(sample) * 100.0 / percent
    parts = min(_partitions(), int(estimated // _MIN_UNITS_PER_RANGE), len(sample))
    cuts: list[str] = []
    for k in range(1, parts):
        cut = sample[len(sample) * k // parts]
        if not cuts or cut > cuts[-1]:
            cuts.append(cut)
    bounds: list[str | None] = [None, *cuts, None]
    return UnitSample(list(itertools.pairwise(bounds)), estimated if sample else None)


def postgres_engine(session: AsyncSession) -> AsyncEngine | None:
    """The session's engine when it is PostgreSQL's, whose analysis runs by unit range on
    connections of its own (:func:`postgres_all`); ``None`` for SQLite."""
    engine = session.bind
    if isinstance(engine, AsyncEngine) and engine.dialect.name == "postgresql":
        return engine
    return None


async def postgres_all(engine: AsyncEngine, statements: Sequence[Executable]) -> list[list[Any]]:
    """Each statement's rows, as many statements at once as there are cores, each on its own
    connection with the planner settings above."""
    gate = asyncio.Semaphore(_partitions())

    async def run(statement: Executable) -> list[Any]:
        async with gate, engine.connect() as connection, connection.begin():
            for name, value in _planner().items():
                await connection.execute(
                    text("SELECT set_config(:name, :value, true)"), {"name": name, "value": value}
                )
            return list((await connection.execute(statement)).mappings().all())  # one fetch

    return await asyncio.gather(*(run(statement) for statement in statements))


async def arm_moments(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    metrics: Sequence[MetricSpec],
    *,
    cuped: bool = False,
    caps: dict[str, float | None] | None = None,
) -> dict[str, dict[str, ArmAggregate]]:
    """``{metric key: {arm: ArmAggregate}}`` for the units exposed to ``subject``.

    Metrics with a ``percentile`` get their cap resolved here (written into ``caps``). On
    PostgreSQL without CUPED that costs no extra pass: the capped metric's query also returns the
    j largest per-unit values (see :func:`percentile_cap` for j), the cap is the j-th largest of
    all ranges', and the sums are corrected for the units above it
    (Σmin(y, c) = Σy - Σ_{y>c}(y - c), likewise y², yz). Otherwise :func:`percentile_cap` runs
    first and the sums use the cap directly."""
    if not metrics:
        return {}
    caps = {} if caps is None else caps
    engine = postgres_engine(session)
    if any(m.percentile is not None for m in metrics) and (cuped or engine is None):
        return await _resolve_caps_first(session, project_id, kind, subject, metrics, cuped, caps)
    metrics = await with_shifts(session, project_id, kind, subject, metrics, cuped=cuped)
    for m in metrics:
        if m.percentile is None and m.cap is not None:
            caps.setdefault(m.key, m.cap)
    per_arm = (
        select(Exposure.arm, func.count().label("n"))
        .where(
            Exposure.project_id == project_id,
            Exposure.kind == kind,
            Exposure.subject == subject,
        )
        .group_by(Exposure.arm)
    )
    if engine is not None:
        summed = await _postgres_sums(
            engine, session, project_id, kind, subject, metrics, cuped, caps, per_arm
        )
        if summed is None:  # the sample's estimate fell short of a percentile's need (rare)
            return await _resolve_caps_first(
                session, project_id, kind, subject, metrics, cuped, caps
            )
        counts, sums = summed
    else:
        counts = {arm: int(n) for arm, n in (await session.execute(per_arm)).all()}
        unit_rows, shapes = _unit_rows(project_id, kind, subject, metrics, cuped, "sqlite")
        result = await session.execute(_arm_sums(unit_rows, shapes))
        sums = {row["arm"]: dict(row) for row in result.mappings()}
    shapes = [_Shape(m.key, m.is_ratio, cuped, m.shift or Shift()) for m in metrics]
    return _aggregates(counts, sums, shapes)


async def with_shifts(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    metrics: Sequence[MetricSpec],
    *,
    cuped: bool,
) -> list[MetricSpec]:
    """Each metric with the values its sums are taken about: the first joined unit's y, z and
    x (a ``LIMIT 1`` of the per-unit query, which streams in unit order and stops at once).
    Conversions (0/1) need none; no unit with events, or a value that is not finite, leaves 0."""
    dialect = "postgresql" if postgres_engine(session) is not None else "sqlite"
    resolved = []
    for metric in metrics:
        if metric.shift is None and metric.aggregation != "conversion":
            rows, _ = _unit_rows(project_id, kind, subject, [metric], cuped, dialect)
            first = (await session.execute(rows.limit(1))).mappings().first()
            names = ("y0", "z0", "x0", "w0")
            values = [float(first.get(name) or 0.0) for name in names] if first else []
            shift = Shift(*values) if all(map(math.isfinite, values)) else Shift()
            metric = replace(metric, shift=shift)
        resolved.append(replace(metric, shift=metric.shift or Shift()))
    return resolved


def _by_events(metrics: Sequence[MetricSpec]) -> list[list[MetricSpec]]:
    """The metrics in groups that read no event in common, one query each: a ratio of two
    events joins the group of each (its events' rows are then read once, not once per query)."""
    groups: list[tuple[set[str], list[MetricSpec]]] = []
    for metric in metrics:
        events = set(metric.events)
        sharing = [g for g in groups if g[0] & events]
        merged = (events.union(*(g[0] for g in sharing)), [m for g in sharing for m in g[1]])
        merged[1].append(metric)
        groups = [g for g in groups if not g[0] & events] + [merged]
    return [group for _, group in groups]


async def _postgres_sums(
    engine: AsyncEngine,
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    metrics: Sequence[MetricSpec],
    cuped: bool,
    caps: dict[str, float | None],
    per_arm: Select[str, int],
) -> tuple[dict[str, int], dict[str, dict[str, Any]]] | None:
    """Units per arm and the sums per arm (keys named by the metric's position in ``metrics``),
    from (event name, unit range) queries run at once; ``None`` when a percentile cap must be
    resolved first.

    A percentile cap needs the j largest per-unit values, and j the unit count, which is counted
    at once with the sums: each range returns a few more than the sample's estimate asks for,
    and an estimate that fell short is caught here."""
    deferred = {m.key: m.percentile for m in metrics if m.percentile is not None}
    sampled = await sample_units(session, project_id, kind, subject)
    if deferred and sampled.estimated is None:
        return None
    estimated = math.ceil((sampled.estimated or 0.0) * _ESTIMATE_MARGIN)
    fetched = {key: _largest_count(p, estimated) + _ESTIMATE_SLACK for key, p in deferred.items()}
    by_event = _by_events(metrics)
    work = [(group, units) for group in by_event for units in sampled.ranges]

    def statement(group: list[MetricSpec], units: tuple[str | None, str | None]) -> Any:
        rows, shapes = _unit_rows(project_id, kind, subject, group, cuped, "postgresql", units)
        tops = {i: fetched[m.key] for i, m in enumerate(group) if m.key in fetched}
        return _sums_and_largest(rows, shapes, tops) if tops else _arm_sums(rows, shapes)

    counted, *parts = await postgres_all(
        engine, [per_arm, *(statement(group, units) for group, units in work)]
    )
    exposed_total = sum(int(row["n"]) for row in counted)
    largest = {
        key: _largest_count(p, exposed_total) for key, p in deferred.items() if exposed_total
    }
    if any(largest[key] > fetched[key] for key in largest):
        return None
    sums, top_values = _merge_parts(metrics, [group for group, _ in work], parts)
    for index, metric in enumerate(metrics):
        if metric.key in deferred:
            caps[metric.key] = _cap_from_largest(
                top_values.get(index, []),
                largest.get(metric.key),
                sums,
                index,
                metric.shift or Shift(),
            )
    return {row["arm"]: int(row["n"]) for row in counted}, sums


def _merge_parts(
    metrics: Sequence[MetricSpec], groups: Sequence[list[MetricSpec]], parts: Sequence[list[Any]]
) -> tuple[dict[Any, dict[str, Any]], dict[int, list[tuple[str, float, float]]]]:
    """The queries' rows added up into one row per arm, each sum named by its metric's position
    in ``metrics``; and the (arm, y, z) of the largest values that ``top`` rows carry."""
    position = {id(m): i for i, m in enumerate(metrics)}
    sums: dict[Any, dict[str, Any]] = {}
    top_values: dict[int, list[tuple[str, float, float]]] = {}
    for group, rows in zip(groups, parts, strict=True):
        for row in rows:
            if row.get("part") == "top":
                # the first three sum columns carry the metric's index, y and z
                metric = group[int(row["sm0"])]
                top_values.setdefault(position[id(metric)], []).append(
                    (row["arm"], float(row["sc0"]), float(row["sy0"] or 0.0))
                )
                continue
            into = sums.setdefault(_key_of(row), {})
            for local, metric in enumerate(group):
                for name in _SUMS:
                    value = row.get(f"{name}{local}")
                    if value is not None:
                        key = f"{name}{position[id(metric)]}"
                        into[key] = float(into.get(key, 0)) + float(value)
    return sums, top_values


def _key_of(row: Mapping[str, Any]) -> Any:
    """A sums row's key: its arm, or (arm, slice index) when the units are sliced."""
    return (row["arm"], int(row["slice"])) if "slice" in row else row["arm"]


K = TypeVar("K", bound=Hashable)


def _aggregates(
    counts: Mapping[K, int], sums: Mapping[K, Mapping[str, Any]], shapes: Sequence[_Shape]
) -> dict[str, dict[K, ArmAggregate]]:
    aggregates: dict[str, dict[K, ArmAggregate]] = {shape.key: {} for shape in shapes}
    for arm, exposed in counts.items():
        row = sums.get(arm, {})
        for index, shape in enumerate(shapes):
            joined = int(row.get(f"sm{index}") or 0)
            variables = shape.variables
            shifts = {f"shift_{v}": getattr(shape.shift, v) for v in variables}
            moments = {
                field: float(row.get(f"{column}{index}") or 0.0)
                for column, field in _MOMENT_OF.items()
                if all(v in variables for v in _PRODUCTS.get(column, (column[1],)))
            }
            aggregates[shape.key][arm] = ArmAggregate(
                converted=int(row.get(f"sc{index}") or 0),
                moments=Moments(n=joined, **moments, **shifts)
                + Moments.zeros(max(exposed - joined, 0), **shifts),  # a unit exposed meanwhile
            )
    return aggregates


async def value_counts(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    slicer: Slicer,
    ranges: Sequence[tuple[str | None, str | None]] | None = None,
) -> dict[tuple[str, str | None], int]:
    """Exposed units per (arm, the unit's value of the slicer's dimension; ``None``: none).

    On PostgreSQL one query per unit range (``ranges``, or :func:`unit_ranges`'), run at once
    like the sums, each a merge join of the exposures and the values in unit order."""
    engine = postgres_engine(session)

    def counted(units: tuple[str | None, str | None]) -> Select[Any]:
        values = slicer.source(project_id, kind, subject, units, ordered=engine is not None)
        where = and_(
            Exposure.project_id == project_id, Exposure.kind == kind, Exposure.subject == subject
        )
        where = and_(where, *in_range(Exposure.unit, units))
        return (
            select(
                Exposure.arm.label("arm"), values.c.value.label("value"), func.count().label("n")
            )
            .select_from(Exposure)
            .outerjoin(values, values.c.unit == Exposure.unit)
            .where(where)
            .group_by(Exposure.arm, values.c.value)
        )

    if engine is not None:
        if ranges is None:
            ranges = await unit_ranges(session, project_id, kind, subject)
        parts = await postgres_all(engine, [counted(units) for units in ranges])
        rows: list[Any] = [row for part in parts for row in part]
    else:
        rows = list((await session.execute(counted((None, None)))).mappings())
    counts: dict[tuple[str, str | None], int] = {}
    for row in rows:
        key = (row["arm"], row["value"])
        counts[key] = counts.get(key, 0) + int(row["n"])
    return counts


async def slice_moments(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    metrics: Sequence[MetricSpec],
    *,
    cuped: bool,
    slicer: Slicer,
    exposed: Mapping[tuple[str, int], int],
    ranges: Sequence[tuple[str | None, str | None]] | None = None,
) -> dict[str, dict[tuple[str, int], ArmAggregate]]:
    """``{metric key: {(arm, slice index): ArmAggregate}}``, the sums of :func:`arm_moments`
    per slice of the exposed units (``exposed``: their number per arm and slice index).

    ``metrics`` come with their caps resolved (a percentile cap is the whole experiment's, so
    that a slice's units are capped as they are in the totals) and their shifts (any shift gives
    the same statistics). The queries are the totals', with the slicer's values joined in unit
    order and one more key to group by; on PostgreSQL the same unit ranges (``ranges``, or
    :func:`unit_ranges`') run at once."""
    assert all(m.percentile is None and m.shift is not None for m in metrics)
    engine = postgres_engine(session)
    shapes = [_Shape(m.key, m.is_ratio, cuped, m.shift or Shift()) for m in metrics]
    if engine is not None:
        if ranges is None:
            ranges = await unit_ranges(session, project_id, kind, subject)
        groups = _by_events(metrics)
        work = [(group, units) for group in groups for units in ranges]
        parts = await postgres_all(
            engine,
            [
                _arm_sums(
                    _unit_rows(
                        project_id, kind, subject, group, cuped, "postgresql", units, slicer
                    )[0],
                    [_Shape(m.key, m.is_ratio, cuped, m.shift or Shift()) for m in group],
                )
                for group, units in work
            ],
        )
        sums, _ = _merge_parts(metrics, [group for group, _ in work], parts)
    else:
        rows, _ = _unit_rows(project_id, kind, subject, metrics, cuped, "sqlite", slicer=slicer)
        result = await session.execute(_arm_sums(rows, shapes))
        sums = {_key_of(row): dict(row) for row in result.mappings()}
    return _aggregates(exposed, sums, shapes)


# how far above the sample's estimate of the exposed units the top-j fetch reaches
_ESTIMATE_MARGIN = 1.25
_ESTIMATE_SLACK = 100


def _largest_count(percentile: float, total: int) -> int:
    """How many of ``total`` units lie at or above the nearest-rank ``percentile``:
    j = N - k + 1 with k = ceil(percentile · N) (see :func:`percentile_cap`)."""
    return total - max(1, math.ceil(round(percentile * total, 9))) + 1


async def _resolve_caps_first(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    metrics: Sequence[MetricSpec],
    cuped: bool,
    caps: dict[str, float | None],
) -> dict[str, dict[str, ArmAggregate]]:
    """:func:`arm_moments` with each percentile cap resolved by its own pass first."""
    resolved = []
    for m in metrics:
        if m.percentile is not None:
            cap = await percentile_cap(session, project_id, kind, subject, m, m.percentile)
            caps[m.key] = cap
            m = replace(m, cap=cap, percentile=None)
        resolved.append(m)
    return await arm_moments(session, project_id, kind, subject, resolved, cuped=cuped, caps=caps)


def _cap_from_largest(
    top: list[tuple[str, float, float]],
    count: int | None,
    sums: dict[str, dict[str, Any]],
    index: int,
    shift: Shift,
) -> float | None:
    """The cap from the ranges' ``count`` largest (arm, y, z) of metric ``index``, and the
    uncapped ``sums`` (about ``shift``) corrected in place for the units above it:
    (y-k)² - (c-k)² = (y-c)(y+c-2k) and (y-k)(z-k_z) - (c-k)(z-k_z) = (y-c)(z-k_z)."""
    if count is None or len(top) < count:
        return None
    top.sort(key=lambda item: item[1], reverse=True)
    cap = top[count - 1][1]
    if not (cap > 0 and math.isfinite(cap)):
        return None
    for arm, y, z in top[: count - 1]:
        if y <= cap:
            break
        into = sums.setdefault(arm, {})
        over = y - cap
        into[f"sy{index}"] = float(into.get(f"sy{index}", 0)) - over
        into[f"syy{index}"] = float(into.get(f"syy{index}", 0)) - over * (y + cap - 2 * shift.y)
        if f"syz{index}" in into:
            into[f"syz{index}"] = float(into[f"syz{index}"]) - over * (z - shift.z)
    return cap


async def percentile_cap(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    metric: MetricSpec,
    percentile: float,
) -> float | None:
    """The ``percentile`` of the per-unit values over all exposed units, pooled across arms
    (units without events count as 0): the nearest-rank value, the k-th smallest with
    k = ceil(percentile · N). ``None`` when it is not positive (a cap at or below 0 would erase
    the metric) or nothing is exposed.

    Exact and in SQL: the units above it are the j = N - k + 1 largest, so each unit range
    returns its own j largest per-unit values (a top-j sort over the same merge join as the
    sums) and the j-th largest of their union is the answer."""
    exposed = await session.scalar(
        select(func.count())
        .select_from(Exposure)
        .where(
            Exposure.project_id == project_id,
            Exposure.kind == kind,
            Exposure.subject == subject,
        )
    )
    total = int(exposed or 0)
    if total == 0:
        return None
    k = max(1, math.ceil(round(percentile * total, 9)))
    top = total - k + 1
    uncapped = replace(metric, cap=None)
    engine = postgres_engine(session)

    def largest(units: tuple[str | None, str | None]) -> Select[Any]:
        rows, _ = _unit_rows(
            project_id,
            kind,
            subject,
            [uncapped],
            False,
            "postgresql" if engine is not None else "sqlite",
            units,
        )
        per_unit = rows.subquery()
        return select(per_unit.c.y0.label("y")).order_by(per_unit.c.y0.desc()).limit(top)

    if engine is not None:
        ranges = await unit_ranges(session, project_id, kind, subject)
        parts = await postgres_all(engine, [largest(units) for units in ranges])
        values = [float(row["y"]) for rows in parts for row in rows]
    else:
        values = [float(v) for v in await session.scalars(largest((None, None)))]
    if len(values) < top:  # the value at rank k is one of the zeros (or below)
        return None
    values.sort(reverse=True)
    cap = values[top - 1]
    return cap if cap > 0 and math.isfinite(cap) else None
