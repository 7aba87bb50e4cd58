"""Experiments: validated creation, states, deterministic assignment, metrics settings."""

from __future__ import annotations

import math
from typing import Any

import msgspec
from sqlalchemy import delete, func, or_, select

from control_plane.access import Permission
from control_plane.db.ids import new_id
from control_plane.db.models import Experiment, Exposure, Metric, SequentialLook
from control_plane.db.types import utcnow
from control_plane.domain import allocation, exposures
from control_plane.domain import problems as base
from control_plane.domain.common import Scope, percent
from control_plane.domain.experiments import schemas as s
from control_plane.domain.experiments.canonical import (
    CONTROL,
    check_url,
    edited_variants,
    new_variants,
    patch_problems,
)
from control_plane.domain.paging import Page, paged
from control_plane.domain.results.cache import cached
from control_plane.domain.rows import (
    BY_ID_OR_KEY,
    find_by_key,
    find_metric,
    forget_exposures,
    private_attributes,
    take_given,
    written_once,
)
from control_plane.errors import conflict, invalid
from shared.clock import now_ms
from shared.engine.experiments import (
    dimension_values,
    dimensions_problem,
    place,
    url_matches,
)
from shared.wire.kinds import kind_problem, qualified_unit
from shared.wire.snapshot import WEIGHT_SCALE

DEFAULT_GOAL = "cta_click"
RESERVED_KEYS = frozenset({"power"})  # POST /experiments/power plans; no experiment shadows it

# (from, to) moves allowed besides staying put; running -> draft only while nothing is exposed
TRANSITIONS = {
    ("draft", "running"),
    ("running", "stopped"),
    ("stopped", "running"),
    ("running", "draft"),
}


def variant_out(stored: dict[str, Any]) -> s.Variant:
    return s.Variant(
        key=stored["key"],
        content=stored.get("content", ""),
        href=stored.get("href"),
        bg=stored.get("bg"),
        color=stored.get("color"),
        weight=None if stored.get("weight") is None else percent(stored["weight"]),
    )


async def _metric_keys(scope: Scope, row: Experiment) -> tuple[str | None, list[str]]:
    ids = [i for i in [row.primary_metric_id, *row.guardrail_metric_ids] if i]
    keys = (
        dict(
            (
                await scope.session.execute(select(Metric.id, Metric.key).where(Metric.id.in_(ids)))
            ).all()
        )
        if ids
        else {}
    )
    return (keys.get(row.primary_metric_id) if row.primary_metric_id else None), [
        keys[i] for i in row.guardrail_metric_ids if i in keys
    ]


async def exposed_count(scope: Scope, row: Experiment) -> int:
    async def count() -> int:
        return int(
            await scope.session.scalar(
                select(func.count())
                .select_from(Exposure)
                .where(
                    Exposure.project_id == scope.project_id,
                    Exposure.kind == "experiment",
                    Exposure.subject == row.id,
                )
            )
            or 0
        )

    return await cached(scope.session, ("exposed", scope.project_id, row.id), count)


def _fraction(buckets: int) -> float:
    return buckets / WEIGHT_SCALE


async def experiment_out(scope: Scope, row: Experiment) -> s.Experiment:
    primary, guardrails = await _metric_keys(scope, row)
    layer = await allocation.layer_key(scope.session, row)
    return s.Experiment(
        id=row.id,
        key=row.key,
        name=row.name,
        description=row.description,
        type=row.type,
        status=row.status,
        url=row.url,
        selector=row.selector,
        goal=row.goal,
        unit_kind=row.unit_kind,
        stats_engine=row.stats_engine,
        variants=[variant_out(x) for x in row.variants],
        primary=primary,
        guardrails=guardrails,
        cuped=row.cuped,
        version=row.version,
        started_at=row.started_at,
        stopped_at=row.stopped_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        exposed=await exposed_count(scope, row),
        layer=layer,
        traffic=_fraction(row.traffic),
        range=(
            s.LayerRange(start=_fraction(row.range_start), end=_fraction(row.range_end))
            if row.range_start is not None and row.range_end is not None
            else None
        ),
        dimensions=list(row.dimensions or ()),
    )


async def find(scope: Scope, id_or_key: str) -> Experiment:
    return await find_by_key(scope, Experiment, "experiment", id_or_key, by=BY_ID_OR_KEY)


async def list_experiments(
    scope: Scope,
    *,
    status: s.Status | None,
    type: s.ExperimentType | None,
    q: str | None,
    limit: int,
    cursor: str | None,
) -> Page[s.Experiment]:
    """Experiments in creation order (ids sort by time)."""
    query = select(Experiment).where(Experiment.project_id == scope.project_id)
    if status is not None:
        query = query.where(Experiment.status == status)
    if type is not None:
        query = query.where(Experiment.type == type)
    if q:
        needle = q.lower()
        query = query.where(
            or_(
                func.lower(Experiment.key).contains(needle, autoescape=True),
                func.lower(Experiment.name).contains(needle, autoescape=True),
            )
        )

    async def convert(rows: list[Experiment]) -> list[s.Experiment]:
        return [await experiment_out(scope, r) for r in rows]

    return await paged(
        scope,
        query,
        Experiment.id,
        list_name="experiments",
        limit=limit,
        cursor=cursor,
        convert=convert,
    )


async def create_experiment(scope: Scope, body: s.ExperimentCreate) -> s.Experiment:
    scope.require(Permission.EDIT)
    problems = base.Problems()
    base.check_name(problems, "name", body.name)
    if body.key is not None:
        base.check_key(problems, "key", body.key)
        if body.key in RESERVED_KEYS:
            problems.add("key", f"{body.key!r} is reserved (POST /experiments/{body.key})")
    check_url(problems, body.url)
    if body.type in {"element", "cta"} and not (body.selector or "").strip():
        problems.add("selector", f"a CSS selector is required for {body.type} experiments")
    if body.type == "manual" and body.selector is not None:
        problems.add("selector", "manual experiments do not touch the page: no selector")
    if body.type == "manual" and not (body.goal or "").strip():
        problems.add("goal", "the goal event name is required for manual experiments")
    variants = new_variants(problems, body)
    if (problem := kind_problem(body.unit_kind)) is not None:
        problems.add("unitKind", problem)
    layer_id, traffic = await _layer_and_traffic(scope, problems, body.layer, body.traffic)
    if (found := dimensions_problem(body.dimensions)) is not None:
        problems.add(*found)
    problems.raise_if_any()
    wanted = base.slugify(body.name)
    key = body.key or await base.unique_key(
        scope, Experiment, f"{wanted}-experiment" if wanted in RESERVED_KEYS else wanted
    )
    now = utcnow()
    row = Experiment(
        id=new_id("exp"),
        project_id=scope.project_id,
        key=key,
        name=body.name,
        description=body.description,
        type=body.type,
        url=body.url,
        selector=body.selector,
        goal=body.goal or DEFAULT_GOAL,
        unit_kind=body.unit_kind,
        stats_engine=body.stats_engine,
        variants=variants,
        status="running" if body.activate else "draft",
        guardrail_metric_ids=[],
        cuped=body.cuped,
        version=1,
        started_at=now if body.activate else None,
        created_at=now,
        updated_at=now,
        layer_id=layer_id,
        traffic=traffic,
        dimensions=body.dimensions,
    )
    if row.status == "running":
        await allocation.take_range(scope.session, row)
    await written_once(scope, "an experiment", key, row)
    if row.status == "running":
        await scope.changed((e.id for e in await scope.environments()), reason="experiments")
    out = await experiment_out(scope, row)
    scope.audit("experiment.create", "experiment", key, after=out)
    return out


async def _layer_and_traffic(
    scope: Scope, problems: base.Problems, layer: str | None, traffic: float
) -> tuple[str | None, int]:
    """The layer's id (``layer`` is its key) and the traffic in buckets, each checked."""
    layer_id = None
    if layer is not None:
        found = await allocation.find_layer(scope.session, scope.project_id, layer)
        if found is None:
            problems.add("layer", f"no layer {layer!r} (POST /layers creates one)")
        else:
            layer_id = found.id
    buckets = round(traffic * WEIGHT_SCALE) if math.isfinite(traffic) else 0
    if not (math.isfinite(traffic) and 0 < traffic <= 1 and buckets >= 1):
        problems.add("traffic", "a share of the layer's units above 0 and at most 1, e.g. 0.5")
    elif layer is None and buckets != WEIGHT_SCALE:
        problems.add("traffic", "a share of a layer: give the experiment a layer")
    return layer_id, buckets


async def expect_current(scope: Scope, row: Experiment) -> None:
    await scope.expect_version(Experiment, Experiment.version, row.version, Experiment.id == row.id)


_PAGE_FIELDS = ("url", "selector", "goal", "variants")
"""What decides what a unit sees or what counts: fixed once a unit is exposed."""


async def patch_experiment(scope: Scope, id_or_key: str, body: s.ExperimentPatch) -> s.Experiment:
    scope.require(Permission.EDIT)
    row = await find(scope, id_or_key)
    await expect_current(scope, row)
    problems = patch_problems(row, body)
    selector = row.selector if body.selector is msgspec.UNSET else body.selector
    variants = (
        edited_variants(problems, row, body.variants)
        if body.variants is not msgspec.UNSET
        else row.variants
    )
    before = await experiment_out(scope, row)
    layer = before.layer if body.layer is msgspec.UNSET else body.layer
    traffic = before.traffic if body.traffic is msgspec.UNSET else body.traffic
    layer_id, buckets = await _layer_and_traffic(scope, problems, layer, traffic)
    problems.raise_if_any()
    if (layer_id, buckets) != (row.layer_id, row.traffic):
        if row.status != "draft":
            raise conflict(
                f"layer and traffic change only while the experiment is a draft; it is "
                f"{row.status}: create a new experiment instead"
            )
        row.layer_id, row.traffic = layer_id, buckets
        row.range_start = row.range_end = None
    touches_page = [
        name
        for name in _PAGE_FIELDS
        if getattr(body, name) is not msgspec.UNSET
        and (variants if name == "variants" else getattr(body, name)) != getattr(row, name)
    ]
    if touches_page and before.exposed:
        raise conflict(
            f"{', '.join(touches_page)} cannot change once units are exposed "
            f"({before.exposed}): start a new experiment instead"
        )
    take_given(row, body, "name", "description", "stats_engine", "cuped", "url", "goal")
    row.selector = selector
    row.variants = variants
    captures = body.dimensions is not msgspec.UNSET and body.dimensions != row.dimensions
    if body.dimensions is not msgspec.UNSET:
        row.dimensions = body.dimensions
    after = await experiment_out(scope, row)
    if after == before:
        return before  # nothing to change: no new version, no audit entry
    row.version += 1
    row.updated_at = utcnow()
    await scope.session.flush()
    if row.status == "running" and (touches_page or captures):
        await scope.changed(  # relays render it, and capture its dimensions
            (e.id for e in await scope.environments()), reason="experiments"
        )
    after = await experiment_out(scope, row)
    scope.audit("experiment.update", "experiment", row.key, before=before, after=after)
    return after


async def delete_experiment(scope: Scope, id_or_key: str) -> s.ExperimentDeleted:
    """Delete a draft or stopped experiment with its exposures; a running one is 409."""
    scope.require(Permission.EDIT)
    row = await find(scope, id_or_key)
    await expect_current(scope, row)
    if row.status == "running":
        raise conflict(f"experiment {row.key!r} is running: stop it before deleting it")
    before = await experiment_out(scope, row)
    await forget_exposures(scope, "experiment", row.id)
    await scope.session.execute(delete(SequentialLook).where(SequentialLook.subject == row.id))
    await scope.session.delete(row)
    await scope.session.flush()
    scope.audit("experiment.delete", "experiment", row.key, before=before)
    return s.ExperimentDeleted(id=row.id, key=row.key, deleted=True)


async def set_status(scope: Scope, id_or_key: str, body: s.StatusIn) -> s.Experiment:
    scope.require(Permission.EDIT)
    row = await find(scope, id_or_key)
    await expect_current(scope, row)
    if body.status is msgspec.UNSET:
        raise invalid("status", "required: draft, running or stopped")
    target = body.status
    if target == row.status:
        return await experiment_out(scope, row)
    if (row.status, target) not in TRANSITIONS:
        raise conflict(f"an experiment cannot go from {row.status} to {target}")
    if (row.status, target) == ("running", "draft") and await exposed_count(scope, row):
        raise conflict(
            "units are already exposed: stop the experiment instead of moving it back to draft"
        )
    before = await experiment_out(scope, row)
    now = utcnow()
    if target == "running":  # its range of its layer: taken at the first start, then kept
        await allocation.take_range(scope.session, row)
    row.status = target
    if target == "running":
        row.started_at = row.started_at or now
        row.stopped_at = None
    elif target == "stopped":
        row.stopped_at = now
    elif target == "draft":  # nothing was exposed: it takes a range afresh when it starts
        row.range_start = row.range_end = None
    row.version += 1
    row.updated_at = now
    await scope.session.flush()
    await scope.changed((e.id for e in await scope.environments()), reason="experiments")
    after = await experiment_out(scope, row)
    scope.audit("experiment.status", "experiment", row.key, before=before, after=after)
    return after


async def assign(scope: Scope, key: str, body: s.AssignIn) -> s.Assignment:
    scope.require(Permission.EDIT)  # records the unit's exposure
    row = await find(scope, key)
    if body.unit_kind is not None and body.unit_kind != row.unit_kind:
        raise invalid("unitKind", f"experiment {row.key!r} randomizes on {row.unit_kind!r}")
    unit = qualified_unit(row.unit_kind, body.unit)  # as exposures and events store it
    if not body.unit.strip() or len(unit) > 200:
        raise invalid("unit", "1 to 200 characters")  # with its kind, if not a user
    control = next(x for x in row.variants if x["key"] == CONTROL)
    if row.status != "running":
        return s.Assignment(
            experiment=row.key,
            variant=CONTROL,
            assigned=False,
            reason=f"experiment is {row.status}",
            content=control.get("content"),
        )
    if not url_matches(row.url, body.url):
        return s.Assignment(
            experiment=row.key,
            variant=CONTROL,
            assigned=False,
            reason="the experiment does not run on this url",
            content=control.get("content"),
        )
    snapshot, holdout_ids = await allocation.assignable(scope.session, scope.project_id, row)
    placement = place(snapshot, unit)
    chosen = row.variants[placement.variant]
    now = now_ms()
    found = [
        exposures.FirstExposure("holdout", holdout_ids[key], unit, group, now)
        for key, group in placement.holdouts
    ]
    if placement.assigned:
        captured = (
            dimension_values(body.context, row.unit_kind, row.dimensions, private_attributes(scope))
            if row.dimensions and body.context
            else {}
        )
        found.append(
            exposures.FirstExposure(
                "experiment", row.id, unit, chosen["key"], now, tuple(captured.items())
            )
        )
    recorded = await exposures.record(scope.session, scope.project_id, found)
    scope.events_written = recorded > 0
    return s.Assignment(
        experiment=row.key,
        variant=chosen["key"],
        assigned=placement.assigned,
        reason=placement.reason,
        content=chosen.get("content"),
    )


async def set_metrics(scope: Scope, id_or_key: str, body: s.MetricsIn) -> s.MetricsSetting:
    scope.require(Permission.EDIT)
    row = await find(scope, id_or_key)
    await expect_current(scope, row)
    if body.primary is msgspec.UNSET and body.guardrails is msgspec.UNSET:
        raise invalid("primary", "send primary and/or guardrails (null clears the primary)")
    problems = base.Problems()
    primary = None
    if body.primary is msgspec.UNSET:
        if row.primary_metric_id is not None:
            primary = await scope.session.get(Metric, row.primary_metric_id)
    elif body.primary is not None:
        primary = await find_metric(scope, body.primary)
        if primary is None:
            problems.add("primary", f"unknown metric {body.primary!r}")
    refs = row.guardrail_metric_ids if body.guardrails is msgspec.UNSET else body.guardrails
    guardrails: list[Metric] = []
    for i, ref in enumerate(refs):
        metric = await find_metric(scope, ref)
        if metric is None:
            problems.add(f"guardrails[{i}]", f"unknown metric {ref!r}")
        elif primary is not None and metric.id == primary.id:
            problems.add(f"guardrails[{i}]", "the primary metric is not also a guardrail")
        elif metric.id in [g.id for g in guardrails]:
            problems.add(f"guardrails[{i}]", f"{ref!r} is listed twice")
        else:
            guardrails.append(metric)
    problems.raise_if_any()
    before = await experiment_out(scope, row)
    row.primary_metric_id = primary.id if primary else None
    row.guardrail_metric_ids = [g.id for g in guardrails]
    row.version += 1
    row.updated_at = utcnow()
    await scope.session.flush()
    scope.audit(
        "experiment.metrics",
        "experiment",
        row.key,
        before=before,
        after=await experiment_out(scope, row),
    )
    return s.MetricsSetting(
        experiment=row.key,
        primary=primary.key if primary else None,
        guardrails=[g.key for g in guardrails],
    )
