"""A quantile metric's per-arm numbers in SQL: the order statistics and the per-unit counts that
:mod:`control_plane.analysis.quantiles` turns into an estimate and its standard error.

Over the events of the metric (with a ``value``, in its currency if it names one) at or after
each exposed unit's first exposure, per arm:

1. how many events (N) and units with events (m);
2. the value at the nearest rank ⌈p·N⌉, the estimate ξ̂;
3. per unit S_i (its events at or below the arm's ξ̂) and N_i (its events), summed as ΣS, ΣS²,
   ΣN, ΣN², ΣSN;
4. the values at the two ranks bracketing ξ̂ (:func:`~control_plane.analysis.quantiles.bracket_ranks`).

Order statistics come from ``row_number() OVER (PARTITION BY arm ORDER BY value)``, the same on
SQLite and PostgreSQL (SQLite has no ``percentile_disc``); every step is exact, so the numbers
equal numpy's on the same rows. Four statements, each one pass over the arm's events.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, Select, and_, case, cast, func, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.analysis.moments import ArmSummary
from control_plane.analysis.quantiles import (
    ClusterSums,
    bracket_ranks,
    nearest_rank,
    quantile_summary,
)
from control_plane.db.models import Event, Exposure
from control_plane.domain.results.sql import MetricSpec
from control_plane.domain.results.units import exposed_units


@dataclass(frozen=True, slots=True)
class QuantileArm:
    exposed: int
    units_with_events: int
    events: int
    estimate: float | None
    lower: float | None  # the bracketing order statistics
    upper: float | None

    def summary(self) -> ArmSummary:
        return quantile_summary(self.exposed, self.estimate, self.lower, self.upper)


def _events(project_id: str, kind: str, subject: str, metric: MetricSpec) -> Any:
    """(arm, unit, value) of each of the metric's events of an exposed unit after exposure."""
    on = and_(
        Event.project_id == Exposure.project_id,
        Event.unit == Exposure.unit,
        Event.event == metric.event,
        Event.ts >= Exposure.exposed_at,
        Event.value.is_not(None),
    )
    if metric.currency is not None:
        on = and_(on, Event.currency == metric.currency)
    return (
        select(Exposure.arm.label("arm"), Exposure.unit.label("unit"), Event.value.label("value"))
        .select_from(Exposure)
        .join(Event, on)
        .where(exposed_units(project_id, kind, subject, (None, None)))
        .subquery()
    )


def _at_ranks(events: Any, ranks: Mapping[str, set[int]]) -> Select[Any]:
    ranked = select(
        events.c.arm,
        events.c.value,
        func.row_number().over(partition_by=events.c.arm, order_by=events.c.value).label("rn"),
    ).subquery()
    wanted = [and_(ranked.c.arm == arm, ranked.c.rn.in_(sorted(ks))) for arm, ks in ranks.items()]
    return select(ranked.c.arm, ranked.c.rn, ranked.c.value).where(or_(*wanted))


async def _values_at(
    session: AsyncSession, events: Any, ranks: Mapping[str, set[int]]
) -> dict[tuple[str, int], float]:
    if not ranks:
        return {}
    rows = await session.execute(_at_ranks(events, ranks))
    return {(arm, int(rn)): float(value) for arm, rn, value in rows.all()}


async def arm_quantiles(
    session: AsyncSession, project_id: str, kind: str, subject: str, metric: MetricSpec
) -> dict[str, QuantileArm]:
    """Per arm of the units exposed to ``subject``, the numbers of quantile ``metric.quantile``."""
    p = metric.quantile
    assert p is not None
    exposed = {
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
    events = _events(project_id, kind, subject, metric)
    counted = await session.execute(
        select(events.c.arm, func.count(), func.count(func.distinct(events.c.unit))).group_by(
            events.c.arm
        )
    )
    sizes = {arm: (int(n), int(m)) for arm, n, m in counted.all()}
    ranks = {arm: nearest_rank(p, n) for arm, (n, _) in sizes.items()}
    found = await _values_at(session, events, {arm: {k} for arm, k in ranks.items()})
    estimates = {arm: found[(arm, k)] for arm, k in ranks.items()}
    sums = await _cluster_sums(session, events, estimates) if estimates else {}
    brackets = {arm: bracket_ranks(p, sizes[arm][0], sums[arm]) for arm in estimates if arm in sums}
    bounds = await _values_at(
        session, events, {arm: set(b) for arm, b in brackets.items() if b is not None}
    )
    out = {}
    for arm in exposed.keys() | sizes.keys():
        n, m = sizes.get(arm, (0, 0))
        bracket = brackets.get(arm)
        out[arm] = QuantileArm(
            exposed=exposed.get(arm, 0),
            units_with_events=m,
            events=n,
            estimate=estimates.get(arm),
            lower=bounds.get((arm, bracket[0])) if bracket else None,
            upper=bounds.get((arm, bracket[1])) if bracket else None,
        )
    return out


async def _cluster_sums(
    session: AsyncSession, events: Any, estimates: Mapping[str, float]
) -> dict[str, ClusterSums]:
    """Per arm, over its units with events: ΣS, ΣS², ΣN, ΣN², ΣSN with S a unit's events at or
    below the arm's estimate and N its events."""
    estimate = case(
        *((events.c.arm == arm, literal(value, Float)) for arm, value in estimates.items()),
        else_=None,
    )
    per_unit = (
        select(
            func.min(events.c.arm).label("arm"),
            cast(func.sum(case((events.c.value <= estimate, 1), else_=0)), Float).label("s"),
            cast(func.count(), Float).label("n"),
        )
        .group_by(events.c.unit)
        .subquery()
    )
    s, n = per_unit.c.s, per_unit.c.n
    rows = await session.execute(
        select(
            per_unit.c.arm,
            func.count(),
            func.sum(s),
            func.sum(s * s),
            func.sum(n),
            func.sum(n * n),
            func.sum(s * n),
        ).group_by(per_unit.c.arm)
    )
    return {
        arm: ClusterSums(int(m), float(ss), float(ss2), float(sn), float(sn2), float(ssn))
        for arm, m, ss, ss2, sn, sn2, ssn in rows.all()
    }
