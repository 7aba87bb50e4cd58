"""Per-arm sufficient statistics computed in SQL, for several metrics in one pass.

For each exposed unit (its first exposure), over its events of the metrics' names at or after
that exposure:

- ``conversion``: y = 1 if any matching event, else 0
- ``count``: y = number of matching events
- ``sum``: y = sum of ``value`` (minor units)
- ``mean``: a ratio metric, y = sum of ``value`` and z = number of events

and, for CUPED, x = the same per-unit quantity over the 14 days before the exposure. The outer
query reduces units to ``Σc, Σy, Σy², Σz, Σz², Σyz, Σx, Σx², Σxy`` per arm (as doubles, so squares
of large sums cannot overflow); ``c`` marks units with at least one matching event. Python
receives one row per arm.

Every statistic is a sum over units and a unit without matching events adds zero to each, so the
sums come from an inner join of exposures and events, and the unit counts from the exposures
alone. On PostgreSQL the work is split by a hash of the unit into one partition per core, run at
once on separate connections: the per-unit aggregation (one row per joined event, the costly step)
then uses every core, and the partitions' sums add up. Analysis reads committed data.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, Select, and_, case, cast, func, select, text, true
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from control_plane.analysis.moments import Moments
from control_plane.db.models import Event, Exposure

CUPED_WINDOW_MS = 14 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class ArmAggregate:
    moments: Moments
    converted: int  # exposed units with at least one matching event after exposure


@dataclass(frozen=True, slots=True)
class MetricSpec:
    key: str
    event: str
    aggregation: str  # conversion | count | sum | mean


@dataclass(frozen=True, slots=True)
class _Shape:
    key: str
    has_z: bool
    has_x: bool


def _per_unit(
    metric: MetricSpec, during: ColumnElement[bool]
) -> tuple[ColumnElement[float], ColumnElement[float] | None]:
    """(y, z) per unit for ``metric`` over the joined events where ``during`` holds."""
    matches = and_(Event.event == metric.event, during)
    count = func.sum(case((matches, 1), else_=0))
    total = func.sum(case((matches, func.coalesce(Event.value, 0)), else_=0))
    if metric.aggregation == "conversion":
        return cast(func.max(case((matches, 1), else_=0)), Float), None
    if metric.aggregation == "count":
        return cast(count, Float), None
    if metric.aggregation == "sum":
        return cast(total, Float), None
    return cast(total, Float), cast(count, Float)  # mean: ratio of sums


def _unit_rows(
    project_id: str, kind: str, subject: str, metrics: Sequence[MetricSpec], cuped: bool
) -> tuple[Select[Any], list[_Shape]]:
    """One row per exposed unit that has matching events: its arm and per-metric values."""
    # Without CUPED the join keeps only events at or after the exposure already.
    after = Event.ts >= Exposure.exposed_at if cuped else true()
    before = and_(Event.ts < Exposure.exposed_at, Event.ts >= Exposure.exposed_at - CUPED_WINDOW_MS)
    window_start = Exposure.exposed_at - CUPED_WINDOW_MS if cuped else Exposure.exposed_at
    columns: list[ColumnElement[Any]] = []
    shapes: list[_Shape] = []
    for index, metric in enumerate(metrics):
        y, z = _per_unit(metric, after)
        converted, _ = _per_unit(MetricSpec(metric.key, metric.event, "conversion"), after)
        columns.append(converted.label(f"c{index}"))
        columns.append(y.label(f"y{index}"))
        if z is not None:
            columns.append(z.label(f"z{index}"))
        if cuped:
            x, _ = _per_unit(metric, before)
            columns.append(x.label(f"x{index}"))
        shapes.append(_Shape(metric.key, z is not None, cuped))
    query = (
        select(Exposure.arm.label("arm"), *columns)
        .select_from(Exposure)
        .join(
            Event,
            and_(
                Event.project_id == Exposure.project_id,
                Event.unit == Exposure.unit,
                Event.event.in_(sorted({m.event for m in metrics})),
                Event.ts >= window_start,
            ),
        )
        .where(
            Exposure.project_id == project_id, Exposure.kind == kind, Exposure.subject == subject
        )
        .group_by(Exposure.unit, Exposure.arm)
    )
    return query, shapes


def _arm_sums(unit_rows: Select[Any], shapes: Sequence[_Shape]) -> Select[Any]:
    per_unit = unit_rows.subquery()
    sums: list[ColumnElement[Any]] = []
    for index, shape in enumerate(shapes):
        y = per_unit.c[f"y{index}"]
        sums += [
            func.sum(per_unit.c[f"c{index}"]).label(f"sc{index}"),
            func.sum(y).label(f"sy{index}"),
            func.sum(y * y).label(f"syy{index}"),
        ]
        if shape.has_z:
            z = per_unit.c[f"z{index}"]
            sums += [
                func.sum(z).label(f"sz{index}"),
                func.sum(z * z).label(f"szz{index}"),
                func.sum(y * z).label(f"syz{index}"),
            ]
        if shape.has_x:
            x = per_unit.c[f"x{index}"]
            sums += [
                func.sum(x).label(f"sx{index}"),
                func.sum(x * x).label(f"sxx{index}"),
                func.sum(x * y).label(f"sxy{index}"),
            ]
    return select(per_unit.c.arm, *sums).group_by(per_unit.c.arm)


def _partitions() -> int:
    """How many concurrent partitions analysis uses on PostgreSQL (default: the cores)."""
    return max(1, int(os.environ.get("VANE_ANALYSIS_PARTITIONS") or os.cpu_count() or 1))


async def _postgres_partition(
    engine: AsyncEngine, unit_rows: Select[Any], shapes: Sequence[_Shape], part: int, parts: int
) -> list[dict[str, Any]]:
    if parts > 1:
        unit_rows = unit_rows.where(func.abs(func.hashtext(Exposure.unit)) % parts == part)
    async with engine.connect() as connection, connection.begin():
        # a hash join and a hash aggregate held in memory instead of spilled to disk
        work_mem = os.environ.get("VANE_ANALYSIS_WORK_MEM") or "256MB"
        await connection.execute(text("SELECT set_config('work_mem', :v, true)"), {"v": work_mem})
        result = await connection.execute(_arm_sums(unit_rows, shapes))
        return [dict(row) for row in result.mappings()]


def _add_up(parts: Sequence[list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    total: dict[str, dict[str, Any]] = {}
    for rows in parts:
        for row in rows:
            into = total.setdefault(row["arm"], {})
            for name, value in row.items():
                if name != "arm":
                    into[name] = (into.get(name) or 0) + (value or 0)
    return total


async def arm_moments(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    metrics: Sequence[MetricSpec],
    *,
    cuped: bool = False,
) -> dict[str, dict[str, ArmAggregate]]:
    """``{metric key: {arm: ArmAggregate}}`` for the units exposed to ``subject``."""
    if not metrics:
        return {}
    counts: dict[str, int] = {
        arm: int(n)
        for arm, n in (
            await session.execute(
                select(Exposure.arm, func.count())
                .where(
                    Exposure.project_id == project_id,
                    Exposure.kind == kind,
                    Exposure.subject == subject,
                )
                .group_by(Exposure.arm)
            )
        ).all()
    }
    unit_rows, shapes = _unit_rows(project_id, kind, subject, metrics, cuped)
    engine = session.bind
    if isinstance(engine, AsyncEngine) and engine.dialect.name == "postgresql":
        parts = _partitions()
        sums = _add_up(
            await asyncio.gather(
                *(_postgres_partition(engine, unit_rows, shapes, k, parts) for k in range(parts))
            )
        )
    else:
        result = await session.execute(_arm_sums(unit_rows, shapes))
        sums = {row["arm"]: dict(row) for row in result.mappings()}
    aggregates: dict[str, dict[str, ArmAggregate]] = {shape.key: {} for shape in shapes}
    for arm, exposed in counts.items():
        row = sums.get(arm, {})
        for index, shape in enumerate(shapes):

            def get(name: str, row: dict[str, Any] = row, index: int = index) -> float:
                return float(row.get(f"{name}{index}") or 0.0)

            aggregates[shape.key][arm] = ArmAggregate(
                converted=int(get("sc")),
                moments=Moments(
                    n=exposed,
                    sum_y=get("sy"),
                    sum_y2=get("syy"),
                    sum_z=get("sz") if shape.has_z else 0.0,
                    sum_z2=get("szz") if shape.has_z else 0.0,
                    sum_yz=get("syz") if shape.has_z else 0.0,
                    sum_x=get("sx") if shape.has_x else 0.0,
                    sum_x2=get("sxx") if shape.has_x else 0.0,
                    sum_xy=get("sxy") if shape.has_x else 0.0,
                ),
            )
    return aggregates
