"""Cumulative results per day: what the results would have shown at the end of each UTC day.

One pass in SQL. Per unit and day (of its events at or after its exposure) the query takes the
increments of its value; a window over each unit's days turns them into the running per-unit
value y_d and its previous value y_{d-1} = y_d - Δy, and every sufficient statistic telescopes:

    Σ_units (y(D) - k)² = Σ_{days d ≤ D} Σ_units (y_d - y_{d-1})(y_d + y_{d-1} - 2k)

(likewise y, z, z², yz, with capping applied to the running value: min(y_d, cap)), about the
same shift k as the results (see :func:`~control_plane.domain.results.sums.with_shifts`;
written as a product so that large values do not cancel). So the query
returns per arm and day the increments of n (units joining the sums that day), Σy, Σy², Σz, Σz²,
Σyz and the units converting that day (their first event of y's part: a ratio of two events
joins a unit on its first event of either); Python adds them up day by day and runs the experiment's engine on
each day's cumulative moments (a sequential engine carrying its running p-value and intersected
sequences from day to day). No point re-scans the data. CUPED is not applied here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Float, Select, and_, case, cast, func, literal, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from control_plane.analysis import Moments, SequentialBounds, analyse
from control_plane.db.models import Event, Exposure
from control_plane.domain.results.partitions import postgres_all, postgres_engine, unit_ranges
from control_plane.domain.results.sql import MetricSpec, Shift, capped, value_sum
from control_plane.domain.results.sums import with_shifts
from control_plane.domain.results.units import exposed_units

DAY_MS = 24 * 3600 * 1000
_SUMS = ("joined", "conv", "sy", "syy", "sz", "szz", "syz")


@dataclass(frozen=True, slots=True)
class DayIncrement:
    exposed: int
    conversions: int
    # the change to the moments of the units with events: n is the units joining that day
    # (their first events); the exposed units without events yet are zeros, counted apart
    moments: Moments


def _increments_query(
    project_id: str,
    kind: str,
    subject: str,
    metric: MetricSpec,
    dialect: str,
    units: tuple[str | None, str | None] = (None, None),
    only: ColumnElement[bool] | None = None,
) -> Select[Any]:
    shift = metric.shift or Shift()
    day = (Event.ts // DAY_MS).label("day")
    where = exposed_units(project_id, kind, subject, units)
    if only is not None:
        where = and_(where, only)
    y_part, z_part = metric.parts
    if z_part is None or metric.aggregation == "mean":
        # one event, every joined one counting: no test per row (a mean's currency, or a sum's,
        # holds for all its events and joins with them)
        joined = [Event.event == metric.event]
        if metric.currency is not None:
            joined.append(Event.currency == metric.currency)
        count: ColumnElement[Any] = func.count()
        dy = value_sum(dialect, func.coalesce(Event.value, 0)) if y_part[1] == "sum" else count
        dz = dn = count
    else:  # a ratio of two parts, of one event or two: a test per row and part

        def part(event: str, aggregation: str) -> ColumnElement[Any]:
            test = Event.event == event
            if metric.currency is not None and aggregation == "sum":
                test = and_(test, Event.currency == metric.currency)
            value = func.coalesce(Event.value, 0) if aggregation == "sum" else literal(1)
            return value_sum(dialect, case((test, value), else_=0))

        joined = [Event.event.in_(metric.events)]
        dy, dz = part(*y_part), part(*z_part)
        dn = part(y_part[0], "count")
    unit_days = (
        select(
            Exposure.unit.label("unit"),
            func.min(Exposure.arm).label("arm"),
            day,
            cast(dy, Float).label("dy"),
            cast(dz, Float).label("dz"),
            cast(dn, Float).label("dn"),  # y's events: a unit converts on its first day of them
        )
        .select_from(Exposure)
        .join(
            Event,
            and_(
                Event.project_id == Exposure.project_id,
                Event.unit == Exposure.unit,
                *joined,
                Event.ts >= Exposure.exposed_at,
            ),
        )
        .where(where)
        .group_by(Exposure.unit, day)
        .subquery()
    )
    unit, by_day = unit_days.c.unit, unit_days.c.day
    running = select(
        unit_days.c.arm,
        unit_days.c.day,
        unit_days.c.dy,
        unit_days.c.dz,
        unit_days.c.dn,
        func.sum(unit_days.c.dy).over(partition_by=unit, order_by=by_day).label("y"),
        func.sum(unit_days.c.dz).over(partition_by=unit, order_by=by_day).label("z"),
        func.sum(unit_days.c.dn).over(partition_by=unit, order_by=by_day).label("yn"),
        func.row_number().over(partition_by=unit, order_by=by_day).label("k"),
    ).subquery()
    joins = running.c.k == 1  # the unit's first day with events: it joins the sums
    first = case((joins, 1.0), else_=0.0)
    z_now = cast(running.c.z, Float)
    z_before = z_now - running.c.dz
    # a unit converts on the day its first event of y's part comes (for one event: it joins)
    converts = case((and_(running.c.yn > 0, running.c.yn == running.c.dn), 1.0), else_=0.0)
    if metric.aggregation == "conversion":
        y_now: ColumnElement[Any] = first
        y_before: ColumnElement[Any] | None = None
    else:
        y_sum = cast(running.c.y, Float)
        y_now = capped(y_sum, metric.cap)
        y_before = capped(y_sum - running.c.dy, metric.cap)
    columns = [func.sum(first).label("joined"), func.sum(converts).label("conv")]
    if y_before is None:  # 0/1 about 0: y² = y and y_{d-1} = 0 on the day it turns 1
        columns += [func.sum(y_now).label("sy"), func.sum(y_now).label("syy")]
    else:
        ky = literal(shift.y, Float)
        columns += [
            func.sum(case((joins, y_now - ky), else_=y_now - y_before)).label("sy"),
            func.sum(
                case(
                    (joins, (y_now - ky) * (y_now - ky)),
                    else_=(y_now - y_before) * (y_now + y_before - 2 * ky),
                )
            ).label("syy"),
        ]
    if metric.is_ratio:
        assert y_before is not None
        kz = literal(shift.z, Float)
        dz_day = running.c.dz
        columns += [
            func.sum(case((joins, z_now - kz), else_=dz_day)).label("sz"),
            func.sum(
                case(
                    (joins, (z_now - kz) * (z_now - kz)),
                    else_=dz_day * (z_now + z_before - 2 * kz),
                )
            ).label("szz"),
            # (y-k)(z-k_z) - (y'-k)(z'-k_z) = Δy (z-k_z) + (y'-k) Δz
            func.sum(
                case(
                    (joins, (y_now - ky) * (z_now - kz)),
                    else_=(y_now - y_before) * (z_now - kz) + (y_before - ky) * dz_day,
                )
            ).label("syz"),
        ]
    return select(running.c.arm, running.c.day, *columns).group_by(running.c.arm, running.c.day)


async def day_increments(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    metric: MetricSpec,
    only: ColumnElement[bool] | None = None,
) -> dict[int, dict[str, DayIncrement]]:
    """``{day number (UTC days since the epoch): {arm: increments}}``, of the exposed units
    ``only`` keeps (a slice's, ``Slicer.holds``; None: all)."""
    (metric,) = await with_shifts(session, project_id, kind, subject, [metric], cuped=False)
    shift = metric.shift or Shift()
    if not metric.is_ratio:
        shift = Shift(shift.y)
    engine = postgres_engine(session)
    dialect = "postgresql" if engine is not None else "sqlite"
    exposures = await session.execute(
        select(Exposure.arm, (Exposure.exposed_at // DAY_MS).label("day"), func.count())
        .where(
            Exposure.project_id == project_id,
            Exposure.kind == kind,
            Exposure.subject == subject,
            *([only] if only is not None else []),
        )
        .group_by(Exposure.arm, "day")
    )
    exposed: dict[tuple[int, str], int] = {
        (int(day), arm): int(n) for arm, day, n in exposures.all()
    }
    if engine is not None:
        # unit ranges at once, as for the results (the sums of the ranges add up)
        ranges = await unit_ranges(session, project_id, kind, subject)
        parts = await postgres_all(
            engine,
            [
                _increments_query(project_id, kind, subject, metric, dialect, r, only)
                for r in ranges
            ],
        )
        rows: list[Mapping[str, Any]] = [row for part in parts for row in part]
    else:
        query = _increments_query(project_id, kind, subject, metric, dialect, only=only)
        rows = list((await session.execute(query)).mappings())
    sums: dict[tuple[int, str], dict[str, float]] = {}
    for row in rows:
        into = sums.setdefault((int(row["day"]), row["arm"]), {})
        for name in _SUMS:
            into[name] = into.get(name, 0.0) + float(row.get(name) or 0.0)
    out: dict[int, dict[str, DayIncrement]] = {}
    for day, arm in sorted(set(exposed) | set(sums)):
        row = sums.get((day, arm), {})

        def get(name: str, row: Mapping[str, float] = row) -> float:
            return row.get(name, 0.0)

        out.setdefault(day, {})[arm] = DayIncrement(
            exposed=exposed.get((day, arm), 0),
            conversions=int(get("conv")),
            moments=Moments(
                int(get("joined")),
                get("sy"),
                get("syy"),
                get("sz"),
                get("szz"),
                get("syz"),
                shift_y=shift.y,
                shift_z=shift.z,
            ),
        )
    return out


def _with_zeros(joined: Moments, exposed: int) -> Moments:
    """The moments of all ``exposed`` units: those with events, and the rest as zeros (kept
    apart until here, so that the zeros' large shifted sums never mix into small ones)."""
    zeros = Moments.zeros(max(exposed - joined.n, 0), joined.shift_y, joined.shift_z)
    return joined + zeros if joined.n else zeros


def _json(value: float | None) -> float | None:
    return value if value is not None and value == value and abs(value) != float("inf") else None


def cumulative_days(
    increments: Mapping[int, Mapping[str, DayIncrement]],
    *,
    arms: Sequence[str],
    control: str,
    engine: str,
    ratio: bool,
    alpha: float,
    prior_sd: float | None,
) -> list[dict[str, Any]]:
    """Every day from the first to the last with data: per arm the cumulative exposed,
    conversions and rate, and per treatment the engine's uplift and interval that day."""
    if not increments:
        return []
    joined = {arm: Moments(0, 0.0, 0.0) for arm in arms}
    exposed = dict.fromkeys(arms, 0)
    conversions = dict.fromkeys(arms, 0)
    p_values: dict[str, float | None] = {}
    bounds: dict[str, SequentialBounds] = {}
    days: list[dict[str, Any]] = []
    for day in range(min(increments), max(increments) + 1):
        for arm, inc in increments.get(day, {}).items():
            if arm not in joined:
                continue
            joined[arm] = joined[arm] + inc.moments
            exposed[arm] += inc.exposed
            conversions[arm] += inc.conversions
        totals = {arm: _with_zeros(joined[arm], exposed[arm]) for arm in arms}
        result = analyse(
            totals[control],
            {arm: totals[arm] for arm in arms if arm != control},
            engine=engine,  # type: ignore[arg-type]
            ratio=ratio,
            alpha=alpha,
            prior_sd=prior_sd,
            previous_p_values=p_values,
            previous_bounds=bounds,
        )
        if engine == "sequential":
            p_values = {k: c.always_valid_p_value for k, c in result.comparisons.items()}
            bounds = dict(result.sequential_bounds)
        variants = []
        for arm in arms:
            summary = result.control if arm == control else result.treatments.get(arm)
            c = result.comparisons.get(arm)
            variants.append(
                {
                    "key": arm,
                    "exposed": totals[arm].n,
                    "conversions": conversions[arm],
                    "rate": _json(summary.mean) if summary else None,
                    "uplift": _json(c.uplift) if c else None,
                    "ciLow": _json(c.ci_low) if c else None,
                    "ciHigh": _json(c.ci_high) if c else None,
                    "pValue": _json(c.p_value) if c else None,
                    "significant": c.significant if c else None,
                }
            )
        date = datetime.fromtimestamp(day * 86_400, UTC).date().isoformat()
        days.append({"date": date, "variants": variants})
    return days
