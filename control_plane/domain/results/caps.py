"""Percentile caps: the nearest-rank percentile of the per-unit values over all exposed units
(:func:`percentile_cap`), or, when the sums' queries fetched the largest values beside the sums,
the cap from those and the sums corrected for the units above it (:func:`_cap_from_largest`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.db.models import Exposure
from control_plane.domain.results.partitions import postgres_all, postgres_engine, unit_ranges
from control_plane.domain.results.sql import MetricSpec, Shift
from control_plane.domain.results.units import _unit_rows


def _largest_count(percentile: float, total: int) -> int:
    """How many of ``total`` units lie at or above the nearest-rank ``percentile``:
    j = N - k + 1 with k = ceil(percentile · N) (see :func:`percentile_cap`)."""
    return total - max(1, math.ceil(round(percentile * total, 9))) + 1


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
