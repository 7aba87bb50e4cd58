"""A subject's results by one dimension: the units and metrics per slice, read once per ingest
generation (``split_of``), and each slice's block, corrected across slices (``dimension_block``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.domain.results.cache import cached
from control_plane.domain.results.metric import ALPHA, MetricDef, analyse_metric, metric_block
from control_plane.domain.results.slices import CORRECTION, Split, sliced_aggregates
from control_plane.domain.results.slices import correct as correct_across_slices
from control_plane.domain.results.slices import describe as describe_slice
from control_plane.domain.results.slices import ordered as slices_in_order
from control_plane.domain.results.sql import MetricSpec
from control_plane.domain.results.units import Slicer


async def split_of(
    session: AsyncSession,
    project_id: str,
    kind: str,
    subject: str,
    specs: Sequence[MetricSpec],
    caps: Mapping[str, float | None],
    cuped: bool,
    dimension: tuple[str, Slicer, int, int],
) -> Split:
    """The slicer with its top values, the exposed units per slice and arm, and per slice the
    metrics' aggregates (:func:`~control_plane.domain.results.slices.sliced_aggregates`)."""
    _, slicer, top, _ = dimension

    async def compute() -> Split:
        return await sliced_aggregates(
            session, project_id, kind, subject, specs, caps, cuped=cuped, slicer=slicer, top=top
        )

    key = ("slices", project_id, kind, subject, tuple(specs), cuped, slicer, top)
    return await cached(session, key, compute)


def dimension_block(
    metrics: Sequence[MetricDef],
    caps: Mapping[str, float | None],
    arms: Sequence[str],
    control: str,
    *,
    engine: str,
    cuped: bool,
    prior_sd: float | None,
    dimension: tuple[str, Slicer, int, int],
    split: Split,
) -> dict[str, Any]:
    """The results per slice of ``dimension``: each slice's units per arm and, per metric, the
    block of the totals, tested when every arm has ``min_units``, corrected across slices."""
    name, _, top, min_units = dimension
    slicer, exposed, aggregates = split
    slices = []
    tested_blocks: dict[str, list[dict[str, Any]]] = {m.key: [] for m in metrics}
    for index in slices_in_order(list(exposed), slicer.values):
        units = exposed[index]
        tested = all(units.get(arm, 0) >= min_units for arm in arms)
        blocks = []
        for metric in metrics:
            if metric.is_quantile:
                continue
            by_arm = aggregates[index].get(metric.key, {})
            result = analyse_metric(
                metric, by_arm, arms, control, engine=engine, cuped=cuped, prior_sd=prior_sd
            )
            block = metric_block(
                metric, result, by_arm, arms, control, units, caps.get(metric.key), tested=tested
            )
            blocks.append(block)
            if tested:
                tested_blocks[metric.key].append(block)
        slices.append(
            {
                **describe_slice(index, slicer.values),
                "exposed": sum(units.values()),
                "tested": tested,
                "note": None
                if tested
                else f"fewer than {min_units} exposed units in an arm: shown, not tested",
                "metrics": blocks,
            }
        )
    if engine != "bayesian":
        for blocks in tested_blocks.values():
            correct_across_slices(blocks, control, ALPHA)
    notes = [
        f"the {len(slicer.values)} values with the most exposed units have a slice each; "
        "'other' holds the rest and 'none' the units without a value: slices add up to the totals"
    ]
    if engine == "bayesian":
        notes.append("the bayesian engine has no p-values: each slice's chances are its own")
    if any(m.is_quantile for m in metrics):
        notes.append("quantile metrics are not split by dimension")
    return {
        "name": name,
        "top": top,
        "minUnits": min_units,
        "correction": CORRECTION if engine != "bayesian" else None,
        "slices": slices,
        "notes": notes,
    }
