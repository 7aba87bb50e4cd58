"""Holm's step-down correction (Holm, Scand. J. Statist. 1979): controls the family-wise error
rate at alpha across the treatment arms, uniformly more powerful than Bonferroni.

Sort the m p-values ascending, p(1) ≤ … ≤ p(m); the adjusted values are
    p̃(i) = max_{j ≤ i} min(1, (m - j + 1) · p(j))
and arm i is significant when p̃(i) < alpha.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def holm_by_key(p_values: Mapping[K, float | None]) -> dict[K, float | None]:
    """Holm over the keys that have a p-value; keys without one stay ``None`` (and are not
    counted in the family)."""
    keys = [k for k, p in p_values.items() if p is not None]
    adjusted = holm([p for k in keys if (p := p_values[k]) is not None])
    out: dict[K, float | None] = dict.fromkeys(p_values)
    out.update(zip(keys, adjusted, strict=True))
    return out
