"""The variant a unit is assigned, as the tests predict it: the engine's own two steps
(``thresholds`` of the stored weights, then ``choose_variant``), which ``place`` takes for every
running experiment on the relays and the control plane; the tracker and the backends must agree."""

from __future__ import annotations

from collections.abc import Sequence

from shared.engine.experiments import choose_variant, thresholds


def variant_of(
    experiment_key: str, unit: str, variants: Sequence[str], weights: Sequence[int | None]
) -> str:
    """The key of ``unit``'s variant among ``variants`` (with their stored ``weights``)."""
    return variants[choose_variant(experiment_key, unit, thresholds(weights))]
