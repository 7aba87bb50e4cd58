"""PostgreSQL's analysis by unit range: the units are cut into as many ranges as there are
cores, at quantiles of a sample of the exposures (:func:`sample_units`), and the (event name,
range) queries run at once on separate connections (:func:`postgres_all`), with the per-arm unit
counts beside them; their sums add up. A small experiment in a big project still gets the
planner's nested loop of index probes: only hash joins are turned off (hashing a million
exposures thrashes the cache and was three times slower), with parallel workers (we parallelise
ourselves) and JIT (compiling cost more than it saved).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, tablesample, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import aliased
from sqlalchemy.sql import Executable

from control_plane.db.models import Exposure


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
