"""CUPED: variance reduction with a pre-exposure covariate (Deng, Xu, Kohavi, Walker, WSDM 2013).

One θ for the whole experiment, from the moments of all arms combined (Σ over arms):

    θ = Cov(y, x) / Var(x)

Each arm k is then adjusted around the pooled covariate mean x̄ (so the adjusted means keep the
metric's scale and the treatment effect is unchanged in expectation):

    ȳ_k^adj   = ȳ_k - θ (x̄_k - x̄)
    Var_k^adj = Var_k(y) - 2 θ Cov_k(y, x) + θ² Var_k(x)

The uncertainty of θ and x̄ is ignored (its effect is O(1/n)). Ratio metrics are not adjusted:
their covariate would itself be a ratio and the moments carry no Σxz; see docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from .moments import Moments, combine, sample_cov, sample_var

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class CupedInfo:
    """What CUPED did: θ and the pooled within-arm variance reduction 1 - Var_adj / Var."""

    applied: bool
    theta: float | None = None
    variance_reduction: float | None = None
    reason: str | None = None


DEGENERATE = "CUPED skipped: numerically degenerate covariate moments"
RATIO_REFUSAL = (
    "CUPED is not applied to ratio metrics (the covariate would be a ratio too and its "
    "cross-moments with the denominator are not collected); the analysis is unadjusted"
)


def cuped_adjust(
    arms: Mapping[K, Moments],
) -> tuple[CupedInfo, dict[K, tuple[float, float]]]:
    """θ plus each arm's adjusted (mean, per-unit variance); arms with n < 2 are left out."""
    try:
        info, adjusted = _adjust(arms)
    except (ArithmeticError, ValueError):
        return CupedInfo(False, reason=DEGENERATE), {}
    values = [info.theta or 0.0, info.variance_reduction or 0.0]
    values += [v for pair in adjusted.values() for v in pair]
    if not all(math.isfinite(v) for v in values):
        return CupedInfo(False, reason=DEGENERATE), {}
    return info, adjusted


def _adjust(
    arms: Mapping[K, Moments],
) -> tuple[CupedInfo, dict[K, tuple[float, float]]]:
    usable = {k: m for k, m in arms.items() if m.n >= 2 and m.is_finite()}
    pooled = combine(usable.values())
    if pooled.n < 2:
        return CupedInfo(False, reason="too few units for CUPED"), {}
    var_x = sample_var(pooled.n, pooled.sum_x, pooled.sum_x2)
    if var_x <= 0:
        return CupedInfo(False, reason="the CUPED covariate has no variance"), {}
    theta = (
        sample_cov(
            pooled.n, pooled.sum_y, pooled.sum_x, pooled.sum_xy, pooled.sum_y2, pooled.sum_x2
        )
        / var_x
    )
    mean_x = pooled.mean_x
    adjusted: dict[K, tuple[float, float]] = {}
    raw_ss = adj_ss = 0.0
    for key, m in usable.items():
        vy = sample_var(m.n, m.sum_y, m.sum_y2)
        vx = sample_var(m.n, m.sum_x, m.sum_x2)
        cxy = sample_cov(m.n, m.sum_y, m.sum_x, m.sum_xy, m.sum_y2, m.sum_x2)
        v_adj = max(vy - 2.0 * theta * cxy + theta * theta * vx, 0.0)
        adjusted[key] = (m.mean_y - theta * (m.mean_x - mean_x), v_adj)
        raw_ss += (m.n - 1) * vy
        adj_ss += (m.n - 1) * v_adj
    reduction = 1.0 - adj_ss / raw_ss if raw_ss > 0 else None
    return CupedInfo(True, theta=theta, variance_reduction=reduction), adjusted
