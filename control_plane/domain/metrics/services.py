"""Metrics: analysis-time definitions over events (events are never shaped at send time)."""

from __future__ import annotations

import math

import msgspec
from sqlalchemy import exists, select
from sqlalchemy.exc import IntegrityError

from control_plane.db.ids import new_id
from control_plane.db.models import Experiment, FlagMetric, Metric
from control_plane.db.types import utcnow
from control_plane.domain import validation as v
from control_plane.domain.common import Scope
from control_plane.domain.metrics import schemas as s
from control_plane.domain.paging import Page, paged
from control_plane.domain.rows import find_metric
from control_plane.errors import conflict, not_found
from shared.wire.currencies import ISO_4217


def metric_out(row: Metric) -> s.Metric:
    capping = (
        s.CappingOut(type=row.capping, value=row.capping_value)
        if row.capping is not None and row.capping_value is not None
        else None
    )
    return s.Metric(
        id=row.id,
        key=row.key,
        name=row.name,
        event=row.event,
        aggregation=row.aggregation,
        direction=row.direction,
        format=row.format,
        description=row.description,
        capping=capping,
        currency=row.currency,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


CAPPED_AGGREGATIONS = ("sum", "mean")


def check_currency(problems: v.Problems, aggregation: str, currency: str | None) -> None:
    if currency is None:
        return
    if aggregation not in CAPPED_AGGREGATIONS:
        problems.add("currency", "only sum and mean metrics read value, and so a currency")
    elif currency not in ISO_4217:
        problems.add("currency", "an ISO 4217 code in capitals, e.g. EUR or USD")


def check_capping(problems: v.Problems, aggregation: str, capping: s.Capping | None) -> None:
    if capping is None:
        return
    if aggregation not in CAPPED_AGGREGATIONS:
        problems.add("capping", "only sum and mean metrics are capped (a unit's sum of value)")
    elif capping.type == "absolute" and not (0 < capping.value < math.inf):
        problems.add("capping.value", "an absolute cap is a positive amount in the metric's units")
    elif capping.type == "percentile" and not (0 < capping.value < 1):
        problems.add("capping.value", "a percentile between 0 and 1 exclusive, e.g. 0.99")


async def get(scope: Scope, id_or_key: str) -> Metric:
    row = await find_metric(scope, id_or_key)
    if row is None:
        raise not_found("metric", id_or_key)
    return row


async def list_metrics(
    scope: Scope, *, event: str | None, limit: int, cursor: str | None
) -> Page[s.Metric]:
    """Metrics in creation order (ids sort by time)."""
    query = select(Metric).where(Metric.project_id == scope.project_id)
    if event is not None:
        query = query.where(Metric.event == event)

    async def convert(rows: list[Metric]) -> list[s.Metric]:
        return [metric_out(r) for r in rows]

    return await paged(
        scope, query, Metric.id, list_name="metrics", limit=limit, cursor=cursor, convert=convert
    )


async def create_metric(scope: Scope, body: s.MetricCreate) -> s.Metric:
    problems = v.Problems()
    v.check_name(problems, "name", body.name)
    if not body.event.strip() or len(body.event) > 200:
        problems.add("event", "the event name the metric reads: 1 to 200 characters")
    if body.key is not None:
        v.check_key(problems, "key", body.key)
    if len(body.format) > 32:
        problems.add("format", "at most 32 characters, e.g. currency, percent, usd")
    check_capping(problems, body.aggregation, body.capping)
    check_currency(problems, body.aggregation, body.currency)
    problems.raise_if_any()
    key = body.key or await v.unique_key(scope, Metric, v.slugify(body.name))
    now = utcnow()
    row = Metric(
        id=new_id("met"),
        project_id=scope.project_id,
        key=key,
        name=body.name,
        event=body.event,
        aggregation=body.aggregation,
        direction=body.direction,
        format=body.format,
        description=body.description,
        capping=body.capping.type if body.capping else None,
        capping_value=body.capping.value if body.capping else None,
        currency=body.currency,
        version=1,
        created_at=now,
        updated_at=now,
    )
    scope.session.add(row)
    try:
        await scope.session.flush()
    except IntegrityError as exc:
        raise conflict(f"a metric with key {key!r} already exists") from exc
    out = metric_out(row)
    scope.audit("metric.create", "metric", key, after=out)
    return out


async def expect_current(scope: Scope, row: Metric) -> None:
    await scope.expect_version(Metric, Metric.version, row.version, Metric.id == row.id)


async def update_metric(scope: Scope, id_or_key: str, body: s.MetricPatch) -> s.Metric:
    row = await get(scope, id_or_key)
    await expect_current(scope, row)
    problems = v.Problems()
    if not isinstance(body.name, msgspec.UnsetType):
        v.check_name(problems, "name", body.name)
    if not isinstance(body.format, msgspec.UnsetType) and len(body.format) > 32:
        problems.add("format", "at most 32 characters, e.g. currency, percent, usd")
    if not isinstance(body.capping, msgspec.UnsetType):
        check_capping(problems, row.aggregation, body.capping)
    if not isinstance(body.currency, msgspec.UnsetType):
        check_currency(problems, row.aggregation, body.currency)
    problems.raise_if_any()
    before = metric_out(row)
    for name in ("name", "direction", "format", "description"):
        value = getattr(body, name)
        if not isinstance(value, msgspec.UnsetType):
            setattr(row, name, value)
    if not isinstance(body.capping, msgspec.UnsetType):
        row.capping = body.capping.type if body.capping else None
        row.capping_value = body.capping.value if body.capping else None
    if not isinstance(body.currency, msgspec.UnsetType):
        row.currency = body.currency
    out = metric_out(row)
    if out == before:
        return before  # nothing changed: no new version, no audit entry
    row.version += 1
    row.updated_at = utcnow()
    await scope.session.flush()
    out = metric_out(row)
    scope.audit("metric.update", "metric", row.key, before=before, after=out)
    return out


async def delete_metric(scope: Scope, id_or_key: str) -> s.Deleted:
    row = await get(scope, id_or_key)
    await expect_current(scope, row)
    experiments = await scope.session.scalars(
        select(Experiment).where(Experiment.project_id == scope.project_id)
    )
    users = [
        e.key
        for e in experiments
        if e.primary_metric_id == row.id or row.id in (e.guardrail_metric_ids or [])
    ]
    if users:
        raise conflict(f"metric {row.key!r} is used by experiment(s) {', '.join(sorted(users))}")
    if await scope.session.scalar(select(exists().where(FlagMetric.metric_id == row.id))):
        raise conflict(f"metric {row.key!r} is attached to a flag: detach it first")
    before = metric_out(row)
    await scope.session.delete(row)
    await scope.session.flush()
    scope.audit("metric.delete", "metric", row.key, before=before)
    return s.Deleted(id=row.id, key=row.key, deleted=True)
