"""Metrics attached to a flag: its exposures tracked by relays, its results per variation.

Metrics' own: a flag does not know of metrics; this module reads the flag (through the flags'
services) and analyses it as a subject (``control_plane.domain.results``) as experiments do.
"""

from __future__ import annotations

from sqlalchemy import delete, select

from control_plane.access import Permission
from control_plane.db.models import FlagMetric, Metric
from control_plane.domain.common import Scope
from control_plane.domain.metrics.schemas import FlagMetrics, FlagMetricsIn
from control_plane.domain.problems import Problems
from control_plane.domain.results.metric import MetricDef
from control_plane.domain.results.subject import analyse_subject
from control_plane.domain.rows import find_flag, find_metric, touch_all_settings, variation_indexes
from control_plane.errors import invalid


async def flag_metric_keys(scope: Scope, key: str) -> list[str]:
    """The keys of the metrics attached to flag ``key``, in key order."""
    flag = await find_flag(scope, key)
    return sorted(
        await scope.session.scalars(
            select(Metric.key)
            .join(FlagMetric, FlagMetric.metric_id == Metric.id)
            .where(FlagMetric.flag_id == flag.id)
        )
    )


async def set_flag_metrics(scope: Scope, key: str, body: FlagMetricsIn) -> FlagMetrics:
    """Attach metrics to a flag (replacing the set); relays then report its exposures."""
    scope.require(Permission.EDIT)
    flag = await find_flag(scope, key)
    problems = Problems()
    metrics: list[Metric] = []
    for i, ref in enumerate(body.metrics):
        metric = await find_metric(scope, ref)
        if metric is None:
            problems.add(f"metrics[{i}]", f"unknown metric {ref!r}")
        elif metric.id in {m.id for m in metrics}:
            problems.add(f"metrics[{i}]", f"{ref!r} is listed twice")
        else:
            metrics.append(metric)
    problems.raise_if_any()
    before = [
        r.metric_id
        for r in await scope.session.scalars(
            select(FlagMetric).where(FlagMetric.flag_id == flag.id)
        )
    ]
    await scope.session.execute(delete(FlagMetric).where(FlagMetric.flag_id == flag.id))
    scope.session.add_all(
        FlagMetric(flag_id=flag.id, metric_id=m.id, position=i) for i, m in enumerate(metrics)
    )
    await scope.session.flush()
    if bool(before) != bool(metrics):
        await touch_all_settings(scope, flag)  # exposure tracking switched on or off
    scope.audit(
        "flag.metrics",
        "flag",
        key,
        before={"metrics": before},
        after={"metrics": [m.key for m in metrics]},
    )
    return FlagMetrics(flag=key, metrics=[m.key for m in metrics])


async def flag_metric_results(scope: Scope, key: str, baseline: int | None) -> FlagMetrics:
    """Each attached metric analysed per variation, against the baseline variation."""
    flag = await find_flag(scope, key)
    rows = await scope.session.execute(
        select(Metric)
        .join(FlagMetric, FlagMetric.metric_id == Metric.id)
        .where(FlagMetric.flag_id == flag.id)
        .order_by(FlagMetric.position)
    )
    metrics = [MetricDef.of(m) for m in rows.scalars()]
    idxs = sorted(variation_indexes(flag))
    if baseline is None:
        off = [int(x["idx"]) for x in flag.variations if x["value"] is False]
        baseline = off[0] if flag.type == "boolean" and off else idxs[0]
    elif baseline not in idxs:
        raise invalid("baseline", f"no variation has idx {baseline}")
    results = [
        await analyse_subject(
            scope.session,
            scope.project_id,
            kind="flag",
            subject=flag.key,
            arms=[str(baseline), *(str(i) for i in idxs if i != baseline)],
            control=str(baseline),
            weights=None,
            primary=metric,
            guardrails=[],
            engine="frequentist",
            cuped=False,
        )
        for metric in metrics
    ]
    for result in results:
        result.pop("srm", None)  # flag rollouts need not be even: no sample-ratio check
    return FlagMetrics(
        flag=key, metrics=[m.key for m in metrics], baseline=baseline, results=results
    )
