"""SQL sufficient statistics equal the same sums computed from the raw rows in Python."""

from __future__ import annotations

import asyncio
import math
import random
from collections import defaultdict
from dataclasses import astuple

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import async_sessionmaker

from control_plane.analysis.arms import Arm
from control_plane.analysis.moments import Moments
from control_plane.db.engine import make_async_engine
from control_plane.db.migrate import upgrade
from control_plane.db.models import Event, Exposure, Project
from control_plane.domain.results import partitions, sums
from control_plane.domain.results.caps import percentile_cap
from control_plane.domain.results.sql import CUPED_WINDOW_MS, ArmAggregate, MetricSpec
from control_plane.domain.results.sums import arm_moments

DAY = 24 * 3600 * 1000


def raw(moments: Arm) -> Moments:
    """The sums about zero (the SQL takes them about one unit's values), to compare with sums
    computed here directly."""
    assert isinstance(moments, Moments)
    return moments.shifted(0.0, 0.0, 0.0, 0.0)


def expected(
    exposures: dict[str, tuple[str, int]],
    events: list[tuple[str, str, int | None, int]],
    metric: MetricSpec,
    cuped: bool,
) -> dict[str, Moments]:
    """The moments of ``metric`` computed here from the rows, one unit at a time."""
    y_part, z_part = metric.parts
    per_arm: dict[str, list[dict[str, float]]] = defaultdict(list)

    def part_of(unit: str, part: tuple[str, str], low: float, high: float) -> float:
        name, aggregation = part
        values = [v or 0 for u, n, v, ts in events if u == unit and n == name and low <= ts < high]
        if aggregation == "conversion":
            return 1.0 if values else 0.0
        if aggregation == "count":
            return float(len(values))
        return float(sum(values))

    for unit, (arm, at) in exposures.items():
        row = {"y": part_of(unit, y_part, at, math.inf)}
        if cuped:
            row["x"] = part_of(unit, y_part, at - CUPED_WINDOW_MS, at)
        if z_part is not None:
            row["z"] = part_of(unit, z_part, at, math.inf)
            if cuped:
                row["w"] = part_of(unit, z_part, at - CUPED_WINDOW_MS, at)
        per_arm[arm].append(row)
    out = {}
    for arm, rows in per_arm.items():
        sums: dict[str, float] = {}
        for name in ("y", "z", "x", "w"):
            sums[f"sum_{name}"] = sum(r.get(name, 0.0) for r in rows)
        for field, pair in {
            "sum_y2": "yy", "sum_z2": "zz", "sum_yz": "yz", "sum_x2": "xx", "sum_xy": "xy",
            "sum_w2": "ww", "sum_xw": "xw", "sum_yw": "yw", "sum_zx": "zx", "sum_zw": "zw",
        }.items():  # fmt: skip
            sums[field] = sum(r.get(pair[0], 0.0) * r.get(pair[1], 0.0) for r in rows)
        out[arm] = Moments(n=len(rows), **sums)
    return out


@pytest.mark.parametrize("ranges", [1, 3])
@pytest.mark.parametrize("cuped", [False, True])
def test_arm_moments_match_raw_computation(
    database_url: str, cuped: bool, ranges: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL, ``ranges`` 3 cuts the 300 units into three ranges queried at once."""
    monkeypatch.setattr(partitions, "_MIN_UNITS_PER_RANGE", 1)
    monkeypatch.setenv("VANE_ANALYSIS_PARTITIONS", str(ranges))
    upgrade(database_url)
    rng = random.Random(7)
    base = 1_760_000_000_000
    exposures = {
        f"u{i}": (rng.choice(["control", "b", "c"]), base + rng.randrange(10 * DAY))
        for i in range(300)
    }
    events: list[tuple[str, str, int | None, int]] = []
    for unit, (_, at) in exposures.items():
        events.append((unit, "view", None, at + rng.randrange(DAY)))  # no unit may go missing
        for _ in range(rng.randrange(0, 6)):
            name = rng.choice(["purchase", "view", "other"])
            value = rng.choice([None, rng.randrange(100, 100_000)])
            events.append((unit, name, value, at + rng.randrange(-20 * DAY, 10 * DAY)))
    events.append(("stranger", "purchase", 500, base))  # never exposed: not counted
    metrics = [
        MetricSpec("conv", "purchase", "conversion"),
        MetricSpec("views", "view", "count"),
        MetricSpec("revenue", "purchase", "sum"),
        MetricSpec("aov", "purchase", "mean"),
        # revenue per view, and purchases per view: two events in one ratio
        MetricSpec("rpv", "purchase", "ratio", denominator=("view", "count")),
        MetricSpec("ppv", "purchase", "ratio", numerator="count", denominator=("view", "sum")),
    ]

    async def run() -> dict[str, dict[str, ArmAggregate]]:
        engine = make_async_engine(database_url)
        try:
            async with async_sessionmaker(engine)() as session:
                project = await session.scalar(select(Project.id))
                if project is None:
                    project = "prj_test"
                    session.add(Project(id=project, key="t", name="t"))
                    await session.flush()
                session.add_all(
                    Exposure(
                        project_id=project,
                        kind="experiment",
                        subject="exp_1",
                        unit=u,
                        arm=a,
                        exposed_at=at,
                    )
                    for u, (a, at) in exposures.items()
                )
                session.add_all(
                    Event(
                        project_id=project,
                        event_id=f"e{i}",
                        unit=u,
                        event=n,
                        value=v,
                        ts=ts,
                        received_at=ts,
                        source="server",
                    )
                    for i, (u, n, v, ts) in enumerate(events)
                )
                await session.commit()  # analysis reads committed data
                return await arm_moments(
                    session, project, "experiment", "exp_1", metrics, cuped=cuped
                )
        finally:
            await engine.dispose()

    got = asyncio.run(run())
    for metric in metrics:
        want = expected(exposures, events, metric, cuped)
        assert set(got[metric.key]) == set(want)
        for arm, moments in want.items():
            converted = sum(
                1
                for unit, (a, at) in exposures.items()
                if a == arm
                and any(u == unit and n == metric.event and ts >= at for u, n, _, ts in events)
            )
            assert got[metric.key][arm].converted == converted
            assert astuple(raw(got[metric.key][arm].moments)) == pytest.approx(astuple(moments)), (
                metric.key,
                arm,
            )


@pytest.mark.parametrize("estimate", ["sampled", "short"])
@pytest.mark.parametrize("ranges", [1, 3])
@pytest.mark.parametrize("percentile", [0.5, 0.8, 0.97])
def test_percentile_cap_and_capped_moments_match_raw_computation(
    database_url: str,
    ranges: int,
    percentile: float,
    estimate: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The percentile over all exposed units (zeros for units without events), exact across unit
    ranges queried at once; the capped sums equal those of min(y, cap) per unit. ``short``: the
    sample's estimate of the units asks each range for too few of its largest values, and the
    answer is still exact (redone with the cap resolved first)."""
    monkeypatch.setattr(partitions, "_MIN_UNITS_PER_RANGE", 1)
    if estimate == "short":
        monkeypatch.setattr(sums, "_ESTIMATE_MARGIN", 0.0)
        monkeypatch.setattr(sums, "_ESTIMATE_SLACK", 0)
    monkeypatch.setenv("VANE_ANALYSIS_PARTITIONS", str(ranges))
    upgrade(database_url)
    rng = random.Random(percentile)
    exposures = {f"u{i}": (rng.choice(["control", "b"]), 1_000 + i) for i in range(300)}
    events = [
        (unit, "purchase", rng.randrange(-50, 5_000), at + 1 + k)
        for unit, (_, at) in exposures.items()
        if rng.random() < 0.7
        for k in range(rng.randrange(1, 4))
    ]
    revenue = MetricSpec("revenue", "purchase", "sum")

    async def run() -> tuple[
        float | None,
        dict[str, ArmAggregate],
        dict[str, dict[str, ArmAggregate]],
        dict[str, float | None],
    ]:
        engine = make_async_engine(database_url)
        try:
            async with async_sessionmaker(engine)() as session:
                session.add(Project(id="prj_cap", key="cap", name="cap"))
                await session.flush()
                session.add_all(
                    Exposure(
                        project_id="prj_cap",
                        kind="experiment",
                        subject="exp_cap",
                        unit=u,
                        arm=a,
                        exposed_at=at,
                    )
                    for u, (a, at) in exposures.items()
                )
                session.add_all(
                    Event(
                        project_id="prj_cap",
                        event_id=f"e{i}",
                        unit=u,
                        event=n,
                        value=v,
                        ts=ts,
                        received_at=ts,
                        source="server",
                    )
                    for i, (u, n, v, ts) in enumerate(events)
                )
                await session.commit()
                cap = await percentile_cap(
                    session, "prj_cap", "experiment", "exp_cap", revenue, percentile
                )
                capped = MetricSpec("revenue", "purchase", "sum", cap)
                got = await arm_moments(session, "prj_cap", "experiment", "exp_cap", [capped])
                # the cap resolved inside arm_moments (one pass on PostgreSQL), a ratio too
                caps: dict[str, float | None] = {}
                deferred = await arm_moments(
                    session,
                    "prj_cap",
                    "experiment",
                    "exp_cap",
                    [
                        MetricSpec("revenue", "purchase", "sum", percentile=percentile),
                        MetricSpec("aov", "purchase", "mean", percentile=percentile),
                        MetricSpec("buyers", "purchase", "conversion"),
                    ],
                    caps=caps,
                )
                return cap, got["revenue"], deferred, caps
        finally:
            await engine.dispose()

    cap, got, deferred, caps = asyncio.run(run())
    per_unit: dict[str, float] = defaultdict(float)
    for unit, _, value, _ in events:
        per_unit[unit] += value
    values = sorted(per_unit.get(u, 0.0) for u in exposures)
    k = max(1, math.ceil(round(percentile * len(values), 9)))
    want = values[k - 1]
    assert cap == (want if want > 0 else None)
    for arm in ("control", "b"):
        ys = [
            min(per_unit.get(u, 0.0), cap or float("inf"))
            for u, (a, _) in exposures.items()
            if a == arm
        ]
        assert raw(got[arm].moments).sum_y == pytest.approx(sum(ys))
        assert raw(got[arm].moments).sum_y2 == pytest.approx(sum(y * y for y in ys))
        assert astuple(raw(deferred["revenue"][arm].moments)) == pytest.approx(
            astuple(raw(got[arm].moments))
        )
        zs = [
            float(sum(1 for e in events if e[0] == u))
            for u, (a, _) in exposures.items()
            if a == arm
        ]
        ratio = raw(deferred["aov"][arm].moments)
        assert ratio.sum_y == pytest.approx(sum(ys))
        assert ratio.sum_y2 == pytest.approx(sum(y * y for y in ys))
        assert ratio.sum_z == pytest.approx(sum(zs))
        assert ratio.sum_yz == pytest.approx(sum(y * z for y, z in zip(ys, zs, strict=True)))
        assert deferred["buyers"][arm].converted == sum(1 for z in zs if z)
    assert caps == {"revenue": cap, "aov": cap}
