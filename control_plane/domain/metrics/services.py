"""Metrics: analysis-time definitions over events (events are never shaped at send time)."""

from __future__ import annotations

import msgspec
from sqlalchemy import exists, select

from control_plane.access import Permission
from control_plane.db.ids import new_id
from control_plane.db.models import Experiment, FlagMetric, Metric
from control_plane.db.types import utcnow
from control_plane.domain import problems as base
from control_plane.domain.common import Scope
from control_plane.domain.metrics import schemas as s
from control_plane.domain.paging import Page, paged
from control_plane.domain.results.metric import CAPPED, READS_VALUE
from control_plane.domain.rows import BY_ID_OR_KEY, find_by_key, written_once
from control_plane.errors import conflict
from shared.wire.currencies import ISO_4217


def metric_out(row: Metric) -> s.Metric:
    capping = (
        s.CappingOut(type=row.capping, value=row.capping_value)
        if row.capping is not None and row.capping_value is not None
        else None
    )
    ratio = row.aggregation == "ratio" and row.denominator_event is not None
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
        numerator=s.RatioPartOut(event=row.event, aggregation=row.numerator or "sum")
        if ratio
        else None,
        denominator=s.RatioPartOut(
            event=row.denominator_event or "", aggregation=row.denominator or "count"
        )
        if ratio
        else None,
        quantile=row.quantile if row.aggregation == "quantile" else None,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def check_currency(
    problems: base.Problems, aggregation: str, currency: str | None, *, reads_value: bool = True
) -> None:
    """``reads_value``: a ratio with a side summing value (only those sides' events are then
    in the currency)."""
    if currency is None:
        return
    if aggregation not in READS_VALUE or not reads_value:
        problems.add(
            "currency", "only sum, mean, quantile and ratio metrics summing value read a currency"
        )
    elif currency not in ISO_4217:
        problems.add("currency", "an ISO 4217 code in capitals, e.g. EUR or USD")


def check_capping(problems: base.Problems, aggregation: str, capping: s.Capping | None) -> None:
    if capping is None:
        return
    if aggregation not in CAPPED:
        problems.add(
            "capping",
            "only sum, mean and ratio metrics are capped (a unit's sum of value, or a ratio's "
            "numerator)",
        )
    elif capping.type == "absolute":
        base.check_between(
            problems,
            "capping.value",
            capping.value,
            base.ABSOLUTE_CAP,
            "an absolute cap in the metric's units (whole minor units: cents)",
        )
    else:
        base.check_between(
            problems, "capping.value", capping.value, base.PERCENTILE_CAP, "a percentile, e.g. 0.99"
        )


async def get(scope: Scope, id_or_key: str) -> Metric:
    return await find_by_key(scope, Metric, "metric", id_or_key, by=BY_ID_OR_KEY)


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


EVENT_NAME = "the event name the metric reads: 1 to 200 characters"


def _check_event(problems: base.Problems, field: str, event: str) -> None:
    if not event.strip() or len(event) > 200:
        problems.add(field, EVENT_NAME)


def _metric_event(problems: base.Problems, body: s.MetricCreate) -> str:
    """The event a metric reads (a ratio's numerator's), its parts checked."""
    if body.aggregation != "ratio":
        for side in ("numerator", "denominator"):
            if getattr(body, side) is not None:
                problems.add(side, "only ratio metrics have a numerator and a denominator")
        if body.event is None:
            problems.add("event", EVENT_NAME)
            return ""
        _check_event(problems, "event", body.event)
        return body.event
    for side in ("numerator", "denominator"):
        part = getattr(body, side)
        if part is None:
            problems.add(side, f"a ratio metric's {side}: {{event, aggregation: sum | count}}")
        else:
            _check_event(problems, f"{side}.event", part.event)
    if body.numerator is None:
        return body.event or ""
    if body.event is not None and body.event != body.numerator.event:
        problems.add("event", "a ratio metric's event is its numerator's: give one or the same")
    return body.numerator.event


def _reads_value(body: s.MetricCreate) -> bool:
    if body.aggregation != "ratio":
        return True
    return any(
        part is not None and part.aggregation == "sum"
        for part in (body.numerator, body.denominator)
    )


async def create_metric(scope: Scope, body: s.MetricCreate) -> s.Metric:
    scope.require(Permission.EDIT)
    problems = base.Problems()
    base.check_name(problems, "name", body.name)
    event = _metric_event(problems, body)
    if body.key is not None:
        base.check_key(problems, "key", body.key)
    if len(body.format) > 32:
        problems.add("format", "at most 32 characters, e.g. currency, percent, usd")
    check_capping(problems, body.aggregation, body.capping)
    check_currency(problems, body.aggregation, body.currency, reads_value=_reads_value(body))
    if body.aggregation == "quantile":
        if body.quantile is None:
            low, high = base.QUANTILE
            problems.add("quantile", f"the quantile, from {low:g} to {high:g}, e.g. 0.9 for p90")
        else:
            base.check_between(
                problems, "quantile", body.quantile, base.QUANTILE, "the quantile, e.g. 0.9 for p90"
            )
    elif body.quantile is not None:
        problems.add("quantile", "only quantile metrics have a quantile")
    problems.raise_if_any()
    key = body.key or await base.unique_key(scope, Metric, base.slugify(body.name))
    now = utcnow()
    row = Metric(
        id=new_id("met"),
        project_id=scope.project_id,
        key=key,
        name=body.name,
        event=event,
        aggregation=body.aggregation,
        numerator=body.numerator.aggregation if body.numerator else None,
        denominator_event=body.denominator.event if body.denominator else None,
        denominator=body.denominator.aggregation if body.denominator else None,
        quantile=body.quantile if body.aggregation == "quantile" else None,
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
    await written_once(scope, "a metric", key, row)
    out = metric_out(row)
    scope.audit("metric.create", "metric", key, after=out)
    return out


async def expect_current(scope: Scope, row: Metric) -> None:
    await scope.expect_version(Metric, Metric.version, row.version, Metric.id == row.id)


async def update_metric(scope: Scope, id_or_key: str, body: s.MetricPatch) -> s.Metric:
    scope.require(Permission.EDIT)
    row = await get(scope, id_or_key)
    await expect_current(scope, row)
    problems = base.Problems()
    if not isinstance(body.name, msgspec.UnsetType):
        base.check_name(problems, "name", body.name)
    if not isinstance(body.format, msgspec.UnsetType) and len(body.format) > 32:
        problems.add("format", "at most 32 characters, e.g. currency, percent, usd")
    if not isinstance(body.capping, msgspec.UnsetType):
        check_capping(problems, row.aggregation, body.capping)
    if not isinstance(body.currency, msgspec.UnsetType):
        reads = row.aggregation != "ratio" or "sum" in (row.numerator, row.denominator)
        check_currency(problems, row.aggregation, body.currency, reads_value=reads)
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
    scope.require(Permission.EDIT)
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
