"""Layers (experiments that must not share units) and holdouts (units kept out of every
experiment of the project or of a layer, to measure what was launched against them).

Who is in which experiment is decided by ``shared.engine.experiments.place``; the ranges of a
layer are taken by experiments as they start (``control_plane.domain.allocation``).
"""

from __future__ import annotations

import math

import msgspec
from sqlalchemy import func, select

from control_plane.access import Permission
from control_plane.db.ids import new_id
from control_plane.db.models import Experiment, Exposure, Holdout, Layer, Metric
from control_plane.db.types import utcnow
from control_plane.domain import allocation
from control_plane.domain import problems as base
from control_plane.domain.common import Scope
from control_plane.domain.layers import schemas as s
from control_plane.domain.paging import Page, paged
from control_plane.domain.results.cache import cached
from control_plane.domain.results.forecast import running_days
from control_plane.domain.results.metric import MetricDef
from control_plane.domain.results.subject import analyse_subject
from control_plane.domain.rows import (
    BY_ID_OR_KEY,
    find_by_key,
    find_metric,
    forget_exposures,
    take_given,
    written_once,
)
from control_plane.errors import conflict
from shared.engine.experiments import GENERAL, HOLDOUT
from shared.wire.snapshot import WEIGHT_SCALE

# ------------------------------------------------------------------------------------- layers


async def find_layer(scope: Scope, id_or_key: str) -> Layer:
    return await find_by_key(scope, Layer, "layer", id_or_key, by=BY_ID_OR_KEY)


async def layer_out(scope: Scope, row: Layer) -> s.Layer:
    found = (
        await scope.session.execute(
            select(Experiment.key, Experiment.range_start, Experiment.range_end)
            .where(
                Experiment.layer_id == row.id,
                Experiment.status == "running",
                Experiment.range_start.is_not(None),
            )
            .order_by(Experiment.range_start)
        )
    ).all()
    held = [(key, int(start or 0), int(end or 0)) for key, start, end in found]
    running = [
        s.LayerShare(experiment=key, start=start / WEIGHT_SCALE, end=end / WEIGHT_SCALE)
        for key, start, end in held
    ]
    _, free = allocation.free_buckets([(start, end) for _, start, end in held])
    return s.Layer(
        id=row.id,
        key=row.key,
        name=row.name,
        description=row.description,
        running=running,
        free=free / WEIGHT_SCALE,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def list_layers(scope: Scope, *, limit: int, cursor: str | None) -> Page[s.Layer]:
    async def convert(rows: list[Layer]) -> list[s.Layer]:
        return [await layer_out(scope, r) for r in rows]

    query = select(Layer).where(Layer.project_id == scope.project_id)
    return await paged(
        scope, query, Layer.id, list_name="layers", limit=limit, cursor=cursor, convert=convert
    )


def _check_description(problems: base.Problems, description: str) -> None:
    if len(description) > 10_000:
        problems.add("description", "at most 10000 characters")


async def create_layer(scope: Scope, body: s.LayerCreate) -> s.Layer:
    scope.require(Permission.EDIT)
    problems = base.Problems()
    base.check_name(problems, "name", body.name)
    if body.key is not None:
        base.check_key(problems, "key", body.key)
    _check_description(problems, body.description)
    problems.raise_if_any()
    key = body.key or await base.unique_key(scope, Layer, base.slugify(body.name))
    now = utcnow()
    row = Layer(
        id=new_id("lay"),
        project_id=scope.project_id,
        key=key,
        name=body.name,
        description=body.description,
        version=1,
        created_at=now,
        updated_at=now,
    )
    await written_once(scope, "a layer", key, row)
    out = await layer_out(scope, row)
    scope.audit("layer.create", "layer", key, after=out)
    return out


async def update_layer(scope: Scope, id_or_key: str, body: s.LayerPatch) -> s.Layer:
    scope.require(Permission.EDIT)
    row = await find_layer(scope, id_or_key)
    await scope.expect_version(Layer, Layer.version, row.version, Layer.id == row.id)
    problems = base.Problems()
    if body.name is not msgspec.UNSET:
        base.check_name(problems, "name", body.name)
    if body.description is not msgspec.UNSET:
        _check_description(problems, body.description)
    problems.raise_if_any()
    before = await layer_out(scope, row)
    take_given(row, body, "name", "description")
    if (row.name, row.description) == (before.name, before.description):
        return before
    row.version += 1
    row.updated_at = utcnow()
    await scope.session.flush()
    after = await layer_out(scope, row)
    scope.audit("layer.update", "layer", row.key, before=before, after=after)
    return after


async def delete_layer(scope: Scope, id_or_key: str) -> s.Deleted:
    """Delete a layer no experiment or holdout names (409 naming them otherwise)."""
    scope.require(Permission.EDIT)
    row = await find_layer(scope, id_or_key)
    await scope.expect_version(Layer, Layer.version, row.version, Layer.id == row.id)
    experiments = list(
        await scope.session.scalars(select(Experiment.key).where(Experiment.layer_id == row.id))
    )
    holdouts = list(
        await scope.session.scalars(select(Holdout.key).where(Holdout.layer_id == row.id))
    )
    if experiments or holdouts:
        users = [f"experiment {k!r}" for k in sorted(experiments)]
        users += [f"holdout {k!r}" for k in sorted(holdouts)]
        raise conflict(
            f"layer {row.key!r} is used by {', '.join(users)}: delete those or move the draft "
            "experiments out of it first"
        )
    before = await layer_out(scope, row)
    await scope.session.delete(row)
    await scope.session.flush()
    scope.audit("layer.delete", "layer", row.key, before=before)
    return s.Deleted(id=row.id, key=row.key, deleted=True)


# ----------------------------------------------------------------------------------- holdouts


async def find_holdout(scope: Scope, id_or_key: str) -> Holdout:
    return await find_by_key(scope, Holdout, "holdout", id_or_key, by=BY_ID_OR_KEY)


async def _exposed(scope: Scope, row: Holdout) -> dict[str, int]:
    async def count() -> dict[str, int]:
        found = await scope.session.execute(
            select(Exposure.arm, func.count())
            .where(
                Exposure.project_id == scope.project_id,
                Exposure.kind == "holdout",
                Exposure.subject == row.id,
            )
            .group_by(Exposure.arm)
        )
        counts: dict[str, int] = {HOLDOUT: 0, GENERAL: 0}
        counts.update({str(arm): int(n) for arm, n in found})
        return counts

    return await cached(scope.session, ("holdout_exposed", scope.project_id, row.id), count)


async def _metrics(scope: Scope, row: Holdout) -> list[Metric]:
    """The holdout's metrics in its order (a metric deleted since is left out)."""
    if not row.metric_ids:
        return []
    found = {
        m.id: m
        for m in await scope.session.scalars(select(Metric).where(Metric.id.in_(row.metric_ids)))
    }
    return [found[i] for i in row.metric_ids if i in found]


async def holdout_out(scope: Scope, row: Holdout) -> s.Holdout:
    layer = (
        await scope.session.scalar(select(Layer.key).where(Layer.id == row.layer_id))
        if row.layer_id
        else None
    )
    return s.Holdout(
        id=row.id,
        key=row.key,
        name=row.name,
        description=row.description,
        share=row.share / WEIGHT_SCALE,
        layer=layer,
        metrics=[m.key for m in await _metrics(scope, row)],
        status=row.status,
        exposed=await _exposed(scope, row),
        version=row.version,
        started_at=row.started_at,
        stopped_at=row.stopped_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def list_holdouts(scope: Scope, *, limit: int, cursor: str | None) -> Page[s.Holdout]:
    async def convert(rows: list[Holdout]) -> list[s.Holdout]:
        return [await holdout_out(scope, r) for r in rows]

    query = select(Holdout).where(Holdout.project_id == scope.project_id)
    return await paged(
        scope, query, Holdout.id, list_name="holdouts", limit=limit, cursor=cursor, convert=convert
    )


async def _metric_ids(scope: Scope, problems: base.Problems, refs: list[str]) -> list[str]:
    if not refs:
        problems.add("metrics", "at least one metric (key or id): the first is the primary")
    if len(refs) > 20:
        problems.add("metrics", "at most 20 metrics")
    ids: list[str] = []
    for i, ref in enumerate(refs[:20]):
        metric = await find_metric(scope, ref)
        if metric is None:
            problems.add(f"metrics[{i}]", f"unknown metric {ref!r}")
        elif metric.id in ids:
            problems.add(f"metrics[{i}]", f"{ref!r} is listed twice")
        else:
            ids.append(metric.id)
    return ids


async def _publish(scope: Scope) -> None:
    """A holdout that starts, stops or goes changes the running experiments' snapshots."""
    await scope.changed((e.id for e in await scope.environments()), reason="experiments")


async def create_holdout(scope: Scope, body: s.HoldoutCreate) -> s.Holdout:
    scope.require(Permission.EDIT)
    problems = base.Problems()
    base.check_name(problems, "name", body.name)
    if body.key is not None:
        base.check_key(problems, "key", body.key)
    _check_description(problems, body.description)
    share = round(body.share * WEIGHT_SCALE) if math.isfinite(body.share) else 0
    if not (math.isfinite(body.share) and 0 < body.share < 1 and 0 < share < WEIGHT_SCALE):
        problems.add("share", "the fraction of units held out, above 0 and below 1, e.g. 0.05")
    layer_id = None
    if body.layer is not None:
        layer = await allocation.find_layer(scope.session, scope.project_id, body.layer)
        if layer is None:
            problems.add("layer", f"no layer {body.layer!r} (POST /layers creates one)")
        else:
            layer_id = layer.id
    metric_ids = await _metric_ids(scope, problems, body.metrics)
    problems.raise_if_any()
    key = body.key or await base.unique_key(scope, Holdout, base.slugify(body.name))
    now = utcnow()
    row = Holdout(
        id=new_id("hld"),
        project_id=scope.project_id,
        key=key,
        name=body.name,
        description=body.description,
        share=share,
        layer_id=layer_id,
        metric_ids=metric_ids,
        status="running",
        version=1,
        started_at=now,
        created_at=now,
        updated_at=now,
    )
    await written_once(scope, "a holdout", key, row)
    await _publish(scope)
    out = await holdout_out(scope, row)
    scope.audit("holdout.create", "holdout", key, after=out)
    return out


async def update_holdout(scope: Scope, id_or_key: str, body: s.HoldoutPatch) -> s.Holdout:
    scope.require(Permission.EDIT)
    row = await find_holdout(scope, id_or_key)
    await scope.expect_version(Holdout, Holdout.version, row.version, Holdout.id == row.id)
    problems = base.Problems()
    if body.name is not msgspec.UNSET:
        base.check_name(problems, "name", body.name)
    if body.description is not msgspec.UNSET:
        _check_description(problems, body.description)
    metric_ids = (
        row.metric_ids
        if body.metrics is msgspec.UNSET
        else await _metric_ids(scope, problems, body.metrics)
    )
    problems.raise_if_any()
    before = await holdout_out(scope, row)
    take_given(row, body, "name", "description")
    row.metric_ids = metric_ids
    moved = body.status is not msgspec.UNSET and body.status != row.status
    if moved:
        now = utcnow()
        row.status = str(body.status)
        if row.status == "running":
            row.stopped_at = None
        else:
            row.stopped_at = now
    after = await holdout_out(scope, row)
    if after == before:
        return before
    row.version += 1
    row.updated_at = utcnow()
    await scope.session.flush()
    if moved:
        await _publish(scope)
    after = await holdout_out(scope, row)
    scope.audit("holdout.update", "holdout", row.key, before=before, after=after)
    return after


async def delete_holdout(scope: Scope, id_or_key: str) -> s.Deleted:
    """Delete a stopped holdout and its exposures; a running one is 409."""
    scope.require(Permission.EDIT)
    row = await find_holdout(scope, id_or_key)
    await scope.expect_version(Holdout, Holdout.version, row.version, Holdout.id == row.id)
    if row.status == "running":
        raise conflict(f"holdout {row.key!r} is running: stop it before deleting it")
    before = await holdout_out(scope, row)
    await forget_exposures(scope, "holdout", row.id)
    await scope.session.delete(row)
    await scope.session.flush()
    scope.audit("holdout.delete", "holdout", row.key, before=before)
    return s.Deleted(id=row.id, key=row.key, deleted=True)


async def holdout_results(scope: Scope, id_or_key: str) -> s.HoldoutResults:
    """The combined effect of what runs in the holdout's scope: its ``general`` group (exposed to
    whatever the experiments served) against its ``holdout`` group (the controls), per metric,
    through the experiments' analysis (frequentist; SRM against the holdout's share)."""
    row = await find_holdout(scope, id_or_key)
    out = await holdout_out(scope, row)
    metrics = [MetricDef.of(m) for m in await _metrics(scope, row)]
    if not metrics:
        raise conflict(f"holdout {row.key!r} has no metric left: PATCH its metrics first")
    results = await analyse_subject(
        scope.session,
        scope.project_id,
        kind="holdout",
        subject=row.id,
        arms=[HOLDOUT, GENERAL],
        control=HOLDOUT,
        weights={HOLDOUT: float(row.share), GENERAL: float(WEIGHT_SCALE - row.share)},
        primary=metrics[0],
        guardrails=metrics[1:],
        engine="frequentist",
        cuped=False,
        prior_sd=scope.bayesian_prior_sd,
        running_days=running_days(row.status, row.started_at),
    )
    return s.HoldoutResults(holdout=out, results=results)
