"""CUPED: variance reduction with a pre-exposure covariate (Deng, Xu, Kohavi, Walker, WSDM 2013).

One θ for the whole experiment, from the moments of all arms combined (Σ over arms):

    θ = Cov(y, x) / Var(x)

Each arm k is then adjusted around the pooled covariate mean x̄ (so the adjusted means keep the
metric's scale and the treatment effect is unchanged in expectation):

    ȳ_k^adj   = ȳ_k - θ (x̄_k - x̄)
    Var_k^adj = Var_k(y) - 2 θ Cov_k(y, x) + θ² Var_k(x)

The uncertainty of θ and x̄ is ignored (its effect is O(1/n)).

A ratio metric r = Σy/Σz is adjusted with the pre-exposure ratio s = Σx/Σw (x and w: its
numerator and denominator over the 14 days before exposure) by the same algebra on the
delta method's linearised per-unit values (GrowthBook's regression adjustment for ratios):

    u = (y - r z) / z̄        v = (x - s w) / w̄
    r_k^adj   = r_k - θ (s_k - s)            θ = Cov(u, v) / Var(v), pooled
    Var_k^adj = Var_k(u) - 2 θ Cov_k(u, v) + θ² Var_k(v)

with Var(u) = (V_yy - 2r V_yz + r² V_zz)/z̄², Var(v) = (V_xx - 2s V_xw + s² V_ww)/w̄² and
Cov(u, v) = (V_xy - s V_yw - r V_zx + rs V_zw)/(z̄ w̄) from the sample (co)variances V; Var(u) is
the unadjusted ratio's own per-unit variance (:func:`.moments.summarise`).
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
NO_PRE_DENOMINATOR = (
    "CUPED skipped: an arm has no unit with the ratio's denominator before exposure"
)


@dataclass(frozen=True, slots=True)
class _Linear:
    """One group of units' (co)variances of y and x: the metric's values themselves, or a
    ratio's linearised u and v; ``mean_y`` and ``mean_x`` are the estimates adjusted."""

    n: int
    mean_y: float
    mean_x: float
    var_y: float
    var_x: float
    cov: float


def _linear(m: Moments) -> _Linear:
    return _Linear(
        m.n,
        m.mean_y,
        m.mean_x,
        sample_var(m.n, m.sum_y, m.sum_y2),
        sample_var(m.n, m.sum_x, m.sum_x2),
        sample_cov(m.n, m.sum_y, m.sum_x, m.sum_xy, m.sum_y2, m.sum_x2),
    )


def _linearised(m: Moments) -> _Linear:
    """A ratio's u and v (see above) from its moments."""
    n = m.n
    r, rho = m.total_y / m.total_z, m.total_x / m.total_w
    z_bar, w_bar = m.total_z / n, m.total_w / n

    def cov(a: str, b: str, sum_ab: float) -> float:
        squares = {"y": m.sum_y2, "z": m.sum_z2, "x": m.sum_x2, "w": m.sum_w2}
        sums = {"y": m.sum_y, "z": m.sum_z, "x": m.sum_x, "w": m.sum_w}
        return sample_cov(n, sums[a], sums[b], sum_ab, squares[a], squares[b])

    vyy, vzz, vyz = cov("y", "y", m.sum_y2), cov("z", "z", m.sum_z2), cov("y", "z", m.sum_yz)
    vxx, vww, vxw = cov("x", "x", m.sum_x2), cov("w", "w", m.sum_w2), cov("x", "w", m.sum_xw)
    vxy, vyw = cov("x", "y", m.sum_xy), cov("y", "w", m.sum_yw)
    vzx, vzw = cov("z", "x", m.sum_zx), cov("z", "w", m.sum_zw)
    return _Linear(
        n,
        r,
        rho,
        max(vyy - 2.0 * r * vyz + r * r * vzz, 0.0) / (z_bar * z_bar),
        max(vxx - 2.0 * rho * vxw + rho * rho * vww, 0.0) / (w_bar * w_bar),
        (vxy - rho * vyw - r * vzx + r * rho * vzw) / (z_bar * w_bar),
    )


def cuped_adjust(
    arms: Mapping[K, Moments], *, ratio: bool = False
) -> tuple[CupedInfo, dict[K, tuple[float, float]]]:
    """θ plus each arm's adjusted (mean, per-unit variance); arms with n < 2 (or, for a ratio,
    without its denominator) are left out."""
    try:
        info, adjusted = _adjust(arms, ratio)
    except (ArithmeticError, ValueError):
        return CupedInfo(False, reason=DEGENERATE), {}
    values = [info.theta or 0.0, info.variance_reduction or 0.0]
    values += [v for pair in adjusted.values() for v in pair]
    if not all(math.isfinite(v) for v in values):
        return CupedInfo(False, reason=DEGENERATE), {}
    return info, adjusted


def _adjust(
    arms: Mapping[K, Moments], ratio: bool
) -> tuple[CupedInfo, dict[K, tuple[float, float]]]:
    usable = {k: m for k, m in arms.items() if m.n >= 2 and m.is_finite()}
    if ratio:
        usable = {k: m for k, m in usable.items() if m.total_z != 0}
    pooled_moments = combine(usable.values())
    if pooled_moments.n < 2:
        return CupedInfo(False, reason="too few units for CUPED"), {}
    if ratio and any(m.total_w == 0 for m in usable.values()):  # an arm has no s_k
        return CupedInfo(False, reason=NO_PRE_DENOMINATOR), {}
    line = _linearised if ratio else _linear
    pooled = line(pooled_moments)
    if pooled.var_x <= 0:
        return CupedInfo(False, reason="the CUPED covariate has no variance"), {}
    theta = pooled.cov / pooled.var_x
    adjusted: dict[K, tuple[float, float]] = {}
    raw_ss = adj_ss = 0.0
    for key, m in usable.items():
        arm = line(m)
        v_adj = max(arm.var_y - 2.0 * theta * arm.cov + theta * theta * arm.var_x, 0.0)
        adjusted[key] = (arm.mean_y - theta * (arm.mean_x - pooled.mean_x), v_adj)
        raw_ss += (m.n - 1) * arm.var_y
        adj_ss += (m.n - 1) * v_adj
    reduction = 1.0 - adj_ss / raw_ss if raw_ss > 0 else None
    return CupedInfo(True, theta=theta, variance_reduction=reduction), adjusted
