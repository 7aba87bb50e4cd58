"""Sufficient statistics per arm and the per-arm estimates every engine starts from.

SQL reduces each arm to a handful of sums (:class:`Moments`); everything here is arithmetic on
those sums. Sample variances and covariances use the ``n - 1`` denominator.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class Moments:
    """Sufficient statistics of one arm over its exposed units.

    ``y`` is the per-unit metric value (0/1 for conversion, event count, sum of ``value``; the
    numerator for a ratio metric), ``z`` the ratio metric's per-unit denominator (number of
    events) and ``x`` the CUPED covariate (the same metric in the 14 days before exposure).
    """

    n: int
    sum_y: float
    sum_y2: float
    sum_z: float = 0.0
    sum_z2: float = 0.0
    sum_yz: float = 0.0
    sum_x: float = 0.0
    sum_x2: float = 0.0
    sum_xy: float = 0.0

    def _values(self) -> tuple[float, ...]:
        return (
            self.n,
            self.sum_y,
            self.sum_y2,
            self.sum_z,
            self.sum_z2,
            self.sum_yz,
            self.sum_x,
            self.sum_x2,
            self.sum_xy,
        )

    def __add__(self, other: Moments) -> Moments:
        n, *sums = (a + b for a, b in zip(self._values(), other._values(), strict=True))
        return Moments(int(n), *sums)

    def is_finite(self) -> bool:
        return all(math.isfinite(v) for v in self._values())


def combine(moments: Iterable[Moments]) -> Moments:
    """The moments of the union of disjoint groups of units (sums add up)."""
    total = Moments(0, 0.0, 0.0)
    for m in moments:
        total = total + m
    return total


def moments_from_values(
    y: npt.ArrayLike,
    z: npt.ArrayLike | None = None,
    x: npt.ArrayLike | None = None,
) -> Moments:
    """Reduce raw per-unit arrays to :class:`Moments` (what the SQL does; used by tests)."""
    ya = np.asarray(y, dtype=np.float64).ravel()
    za = None if z is None else np.asarray(z, dtype=np.float64).ravel()
    xa = None if x is None else np.asarray(x, dtype=np.float64).ravel()
    for name, arr in (("z", za), ("x", xa)):
        if arr is not None and arr.shape != ya.shape:
            raise ValueError(f"{name} must have the same length as y")
    out: dict[str, Any] = {
        "n": int(ya.size),
        "sum_y": float(ya.sum()),
        "sum_y2": float(ya @ ya),
    }
    if za is not None:
        out |= {"sum_z": float(za.sum()), "sum_z2": float(za @ za), "sum_yz": float(ya @ za)}
    if xa is not None:
        out |= {"sum_x": float(xa.sum()), "sum_x2": float(xa @ xa), "sum_xy": float(ya @ xa)}
    return Moments(**out)


def sample_cov(n: int, sum_a: float, sum_b: float, sum_ab: float) -> float:
    """Sample covariance (``n - 1`` denominator) from sums; needs ``n >= 2``."""
    return (sum_ab - sum_a * sum_b / n) / (n - 1)


def sample_var(n: int, sum_a: float, sum_a2: float) -> float:
    """Sample variance from sums, clamped at zero against rounding; needs ``n >= 2``."""
    return max(sample_cov(n, sum_a, sum_a, sum_a2), 0.0)


@dataclass(frozen=True, slots=True)
class ArmSummary:
    """Descriptive numbers of one arm.

    ``mean`` is the metric's value for the arm (Σy/n, or Σy/Σz for a ratio metric).
    ``variance`` is the per-unit sample variance of y; for a ratio metric it is the variance of
    the linearised per-unit value (y - r z)/z̄, so that in both cases
    ``std_error = sqrt(variance / n)`` is the standard error of ``mean``. With CUPED applied,
    ``adjusted_mean``/``adjusted_variance`` are what the engines used.
    """

    n: int
    mean: float | None
    variance: float | None
    std_error: float | None
    adjusted_mean: float | None = None
    adjusted_variance: float | None = None
    reason: str | None = None


def summarise(m: Moments, *, ratio: bool) -> ArmSummary:
    """Mean, variance and standard error of one arm; a reason instead of numbers if degenerate."""
    if not m.is_finite():
        return ArmSummary(m.n, None, None, None, reason="non-finite sufficient statistics")
    if m.n < 1:
        return ArmSummary(max(m.n, 0), None, None, None, reason="no exposed units")
    try:
        summary = _ratio_summary(m) if ratio else _mean_summary(m)
    except (ArithmeticError, ValueError):
        summary = None
    if summary is None or not all(
        v is None or math.isfinite(v) for v in (summary.mean, summary.variance, summary.std_error)
    ):
        return ArmSummary(m.n, None, None, None, reason="numerically degenerate input")
    return summary


def _mean_summary(m: Moments) -> ArmSummary:
    mean = m.sum_y / m.n
    if m.n < 2:
        return ArmSummary(m.n, mean, None, None, reason="fewer than 2 exposed units")
    variance = sample_var(m.n, m.sum_y, m.sum_y2)
    return ArmSummary(m.n, mean, variance, math.sqrt(variance / m.n))


def _ratio_summary(m: Moments) -> ArmSummary:
    if m.sum_z == 0:
        return ArmSummary(m.n, None, None, None, reason="ratio denominator is zero")
    r = m.sum_y / m.sum_z
    if m.n < 2:
        return ArmSummary(m.n, r, None, None, reason="fewer than 2 exposed units")
    mean_z = m.sum_z / m.n
    var_y = sample_var(m.n, m.sum_y, m.sum_y2)
    var_z = sample_var(m.n, m.sum_z, m.sum_z2)
    cov_yz = sample_cov(m.n, m.sum_y, m.sum_z, m.sum_yz)
    variance = max((var_y - 2.0 * r * cov_yz + r * r * var_z) / (mean_z * mean_z), 0.0)
    return ArmSummary(m.n, r, variance, math.sqrt(variance / m.n))
