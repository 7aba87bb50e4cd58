"""Layers and holdouts as experiments see them: the snapshot of a running experiment (the one
form ``shared.engine.experiments.place`` decides on), and the range of its layer an experiment
takes when it starts.

A base of the domains (beside ``exposures``): the experiments take ranges and assign, the event
ingest checks exposure claims, the layers domain manages layers and holdouts, and publishing
compiles snapshots, all from here.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.db.models import Experiment, Holdout, Layer
from control_plane.errors import ApiError, FieldError
from shared.wire import snapshot as w
from shared.wire.snapshot import WEIGHT_SCALE


def experiment_snapshot(
    row: Experiment, layer: str | None = None, holdouts: Sequence[Holdout] = ()
) -> w.ExperimentSnapshot:
    """``row`` as relays and the control plane assign it: ``layer`` is its layer's key,
    ``holdouts`` the running holdouts (any scope: those that hold it are kept)."""
    return w.ExperimentSnapshot(
        key=row.key,
        type=row.type,
        url=row.url,
        goal=row.goal,
        selector=row.selector,
        version=row.version,
        variants=tuple(msgspec.convert(x, w.ExperimentVariant) for x in row.variants),
        unit_kind=row.unit_kind,
        dimensions=tuple(row.dimensions or ()),
        layer=layer,
        layer_range=(
            (row.range_start, row.range_end)
            if row.range_start is not None and row.range_end is not None
            else None
        ),
        holdouts=tuple(
            w.HoldoutSnapshot(key=h.key, share=h.share)
            for h in sorted(holdouts, key=lambda h: h.key)
            if h.layer_id is None or h.layer_id == row.layer_id
        ),
    )


async def running_holdouts(session: AsyncSession, project_id: str) -> list[Holdout]:
    return list(
        await session.scalars(
            select(Holdout).where(Holdout.project_id == project_id, Holdout.status == "running")
        )
    )


async def layer_keys(session: AsyncSession, project_id: str) -> dict[str, str]:
    """The project's layers: key by id."""
    found = await session.execute(select(Layer.id, Layer.key).where(Layer.project_id == project_id))
    return {str(row[0]): str(row[1]) for row in found}


async def snapshots(
    session: AsyncSession, project_id: str, rows: Collection[Experiment]
) -> dict[str, w.ExperimentSnapshot]:
    """``rows`` as ``experiment_snapshot`` gives them, by key (their layers and holdouts read
    once)."""
    if not rows:
        return {}
    layers = await layer_keys(session, project_id) if any(r.layer_id for r in rows) else {}
    holdouts = await running_holdouts(session, project_id)
    return {
        row.key: experiment_snapshot(
            row, layers.get(row.layer_id) if row.layer_id else None, holdouts
        )
        for row in rows
    }


async def running_experiments(
    session: AsyncSession, project_id: str
) -> dict[str, w.ExperimentSnapshot]:
    """The project's running experiments, by key in key order: what snapshots carry."""
    rows = list(
        await session.scalars(
            select(Experiment)
            .where(Experiment.project_id == project_id, Experiment.status == "running")
            .order_by(Experiment.key)
        )
    )
    return await snapshots(session, project_id, rows)


async def find_layer(session: AsyncSession, project_id: str, key: str) -> Layer | None:
    return await session.scalar(
        select(Layer).where(Layer.project_id == project_id, Layer.key == key)
    )


async def layer_key(session: AsyncSession, row: Experiment) -> str | None:
    if row.layer_id is None:
        return None
    return await session.scalar(select(Layer.key).where(Layer.id == row.layer_id))


async def assignable(
    session: AsyncSession, project_id: str, row: Experiment
) -> tuple[w.ExperimentSnapshot, dict[str, str]]:
    """``row``'s snapshot, to ``place`` units in, and the ids of its holdouts by key."""
    holdouts = await running_holdouts(session, project_id)
    found = experiment_snapshot(row, await layer_key(session, row), holdouts)
    return found, {h.key: h.id for h in holdouts}


def lowest_gap(held: Sequence[tuple[int, int]], size: int) -> int | None:
    """The start of the lowest gap of at least ``size`` buckets in ``[0, WEIGHT_SCALE)`` that
    none of the ``held`` ranges covers, None if there is none."""
    at = 0
    for start, end in sorted(held):
        if start - at >= size:
            return at
        at = max(at, end)
    return at if WEIGHT_SCALE - at >= size else None


def free_buckets(held: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """(the largest gap, all free buckets) of a layer whose running experiments hold ``held``."""
    at, largest, total = 0, 0, 0
    for start, end in [*sorted(held), (WEIGHT_SCALE, WEIGHT_SCALE)]:
        if start > at:
            largest, total = max(largest, start - at), total + start - at
        at = max(at, end)
    return largest, total


async def take_range(session: AsyncSession, row: Experiment) -> None:
    """Give ``row`` (starting now) its range of its layer: the lowest gap of ``row.traffic``
    buckets no running experiment of the layer holds. A restart keeps the range it had, which
    must still be free. 409 naming ``traffic`` when there is no room. No-op without a layer.

    The layer's row is locked first (``FOR UPDATE`` on PostgreSQL; SQLite serialises writers),
    so two experiments starting at once cannot take the same gap."""
    if row.layer_id is None:
        return
    layer = await session.scalar(select(Layer).where(Layer.id == row.layer_id).with_for_update())
    layer_key = layer.key if layer is not None else row.layer_id
    others = await session.execute(
        select(Experiment.key, Experiment.range_start, Experiment.range_end).where(
            Experiment.layer_id == row.layer_id,
            Experiment.status == "running",
            Experiment.id != row.id,
            Experiment.range_start.is_not(None),
        )
    )
    held = {key: (int(start or 0), int(end or 0)) for key, start, end in others}
    if row.range_start is not None and row.range_end is not None:  # a restart
        mine = (row.range_start, row.range_end)
        taken = [k for k, (s, e) in held.items() if s < mine[1] and mine[0] < e]
        if taken:
            raise _no_room(
                f"its range of layer {layer_key!r} ({_span(mine)}) is now held by "
                f"{', '.join(sorted(taken))}; a running experiment keeps its units, so this one "
                "cannot restart: start a new experiment instead"
            )
        return
    start = lowest_gap(list(held.values()), row.traffic)
    if start is None:
        largest, total = free_buckets(list(held.values()))
        raise _no_room(
            f"layer {layer_key!r} has no free range of {_pct(row.traffic)}: the largest free "
            f"range is {_pct(largest)} ({_pct(total)} free in all)"
        )
    row.range_start, row.range_end = start, start + row.traffic


def _pct(buckets: int) -> str:
    return f"{buckets * 100 / WEIGHT_SCALE:g} %"


def _span(bounds: tuple[int, int]) -> str:
    return f"{bounds[0] / WEIGHT_SCALE:g} to {bounds[1] / WEIGHT_SCALE:g}"


def _no_room(message: str) -> ApiError:
    return ApiError(409, f"traffic: {message}", details=[FieldError("traffic", message)])
