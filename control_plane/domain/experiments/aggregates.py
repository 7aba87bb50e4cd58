"""Per-arm sufficient statistics computed in SQL, for several metrics in one pass.

For each exposed unit (its first exposure), over its events of the metrics' names at or after
that exposure:

- ``conversion``: y = 1 if any matching event, else 0
- ``count``: y = number of matching events
- ``sum``: y = sum of ``value`` (minor units)
- ``mean``: a ratio metric, y = sum of ``value`` and z = number of events

and, for CUPED, x = the same per-unit quantity over the 14 days before the exposure. The outer
query reduces units to ``n, Σy, Σy², Σz, Σz², Σyz, Σx, Σx², Σxy`` per arm (as doubles, so squares
of large sums cannot overflow). Python receives one row per arm and metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, and_, case, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession
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


def _per_unit(
    metric: MetricSpec, during: ColumnElement[bool]
) -> tuple[ColumnElement[float], ColumnElement[float] | None]:
    """(y, z) per unit for ``metric`` over the events where ``during`` holds."""
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
    after = Event.ts >= Exposure.exposed_at
    before = and_(Event.ts < Exposure.exposed_at, Event.ts >= Exposure.exposed_at - CUPED_WINDOW_MS)
    window_start = Exposure.exposed_at - CUPED_WINDOW_MS if cuped else Exposure.exposed_at
    columns: list[ColumnElement[float]] = []
    names: list[tuple[str, bool, bool]] = []  # (metric key, has z, has x)
    for index, metric in enumerate(metrics):
        y, z = _per_unit(metric, after)
        converted, _ = _per_unit(MetricSpec(metric.key, metric.event, "conversion"), after)
        columns.append(func.coalesce(converted, 0.0).label(f"c{index}"))
        columns.append(func.coalesce(y, 0.0).label(f"y{index}"))
        if z is not None:
            columns.append(func.coalesce(z, 0.0).label(f"z{index}"))
        if cuped:
            x, _ = _per_unit(metric, before)
            columns.append(func.coalesce(x, 0.0).label(f"x{index}"))
        names.append((metric.key, z is not None, cuped))
    events = sorted({m.event for m in metrics})
    per_unit = (
        select(Exposure.arm.label("arm"), *columns)
        .select_from(Exposure)
        .outerjoin(
            Event,
            and_(
                Event.project_id == Exposure.project_id,
                Event.unit == Exposure.unit,
                Event.event.in_(events),
                Event.ts >= window_start,
            ),
        )
        .where(
            Exposure.project_id == project_id, Exposure.kind == kind, Exposure.subject == subject
        )
        .group_by(Exposure.unit, Exposure.arm)
        .subquery()
    )
    sums: list[ColumnElement[Any]] = [func.count().label("n")]
    for index, (_key, has_z, has_x) in enumerate(names):
        y = per_unit.c[f"y{index}"]
        sums += [
            func.sum(per_unit.c[f"c{index}"]).label(f"sc{index}"),
            func.sum(y).label(f"sy{index}"),
            func.sum(y * y).label(f"syy{index}"),
        ]
        if has_z:
            z = per_unit.c[f"z{index}"]
            sums += [
                func.sum(z).label(f"sz{index}"),
                func.sum(z * z).label(f"szz{index}"),
                func.sum(y * z).label(f"syz{index}"),
            ]
        if has_x:
            x = per_unit.c[f"x{index}"]
            sums += [
                func.sum(x).label(f"sx{index}"),
                func.sum(x * x).label(f"sxx{index}"),
                func.sum(x * y).label(f"sxy{index}"),
            ]
    query = select(per_unit.c.arm, *sums).group_by(per_unit.c.arm)
    result: dict[str, dict[str, ArmAggregate]] = {key: {} for key, _, _ in names}
    for row in (await session.execute(query)).mappings():
        for index, (key, has_z, has_x) in enumerate(names):

            def get(name: str, row: object = row, index: int = index) -> float:
                value = row[f"{name}{index}"]  # type: ignore[index]
                return float(value or 0.0)

            result[key][row["arm"]] = ArmAggregate(
                converted=int(get("sc")),
                moments=Moments(
                    n=int(row["n"]),
                    sum_y=get("sy"),
                    sum_y2=get("syy"),
                    sum_z=get("sz") if has_z else 0.0,
                    sum_z2=get("szz") if has_z else 0.0,
                    sum_yz=get("syz") if has_z else 0.0,
                    sum_x=get("sx") if has_x else 0.0,
                    sum_x2=get("sxx") if has_x else 0.0,
                    sum_xy=get("sxy") if has_x else 0.0,
                ),
            )
    return result
