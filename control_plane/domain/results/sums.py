"""Per-arm sufficient statistics computed in SQL; Python receives one row per arm and metric.

The outer query reduces the per-unit rows (:mod:`control_plane.domain.results.units`) to
``Σc, Σy, Σy², Σz, Σz², Σyz, Σx, Σx², Σxy`` per arm (as doubles, so squares of large sums cannot
overflow). Python receives rows per arm only.

The sums are taken about a shift, one unit's values (``Σ(y - k_y)²`` and so on; see
:mod:`control_plane.analysis.moments`), which a ``LIMIT 1`` of the per-unit query finds first:
values near 2^53 then keep their spread instead of cancelling to noise.

A unit without matching events has y = z = x = 0, so the sums come from an inner join of
exposures and events, with the joined units counted (``m``), and the other units are added as
``n - m`` zeros; the unit counts come from the exposures alone. Analysis reads committed data.

On PostgreSQL the (event name, unit range) queries run at once and their sums add up
(:mod:`control_plane.domain.results.partitions`); SQLite runs one query for all metrics.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from sqlalchemy import CompoundSelect, Float, Select, and_, cast, func, literal, select, union_all
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from control_plane.analysis.moments import Moments
from control_plane.db.models import Exposure
from control_plane.domain.results.caps import _cap_from_largest, _largest_count, percentile_cap
from control_plane.domain.results.partitions import (
    postgres_all,
    postgres_engine,
    sample_units,
    unit_ranges,
)
from control_plane.domain.results.sql import (
    _MOMENT_OF,
    _PRODUCTS,
    _SUMS,
    ArmAggregate,
    MetricSpec,
    Shift,
    _Shape,
)
from control_plane.domain.results.units import Slicer, _unit_rows, in_range


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
