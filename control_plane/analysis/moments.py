"""Sufficient statistics per arm and the per-arm estimates every engine starts from.

SQL reduces each arm to a handful of sums (:class:`Moments`); everything here is arithmetic on
those sums. Sample variances and covariances use the ``n - 1`` denominator.

The sums are taken about a shift, a value from the data (one unit's), not about zero: the
variance Σ(y-k)²/(n-1) - (Σ(y-k))²/(n(n-1)) then loses nothing to cancellation however large the
values are, where Σy² - (Σy)²/n of values near 2^53 would cancel to noise of order 10^16.
Variances and covariances do not depend on the shift; means add it back.
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
    Every sum is of the values less their shift: ``sum_y`` is Σ(y - shift_y), ``sum_yz`` is
    Σ(y - shift_y)(z - shift_z), and so on.
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
    shift_y: float = 0.0
    shift_z: float = 0.0
    shift_x: float = 0.0

    @classmethod
    def zeros(
        cls, n: int, shift_y: float = 0.0, shift_z: float = 0.0, shift_x: float = 0.0
    ) -> Moments:
        """``n`` units whose y, z and x are all 0 (exposed units without events)."""
        return cls(
            n,
            -n * shift_y,
            n * shift_y * shift_y,
            -n * shift_z,
            n * shift_z * shift_z,
            n * shift_y * shift_z,
            -n * shift_x,
            n * shift_x * shift_x,
            n * shift_x * shift_y,
            shift_y,
            shift_z,
            shift_x,
        )

    @property
    def mean_y(self) -> float:
        return self.shift_y + self.sum_y / self.n

    @property
    def mean_z(self) -> float:
        return self.shift_z + self.sum_z / self.n

    @property
    def mean_x(self) -> float:
        return self.shift_x + self.sum_x / self.n

    @property
    def total_y(self) -> float:
        """Σy itself (the ratio metric's numerator)."""
        return self.sum_y + self.n * self.shift_y

    @property
    def total_z(self) -> float:
        """Σz itself (the ratio metric's denominator)."""
        return self.sum_z + self.n * self.shift_z

    def shifted(self, shift_y: float, shift_z: float, shift_x: float) -> Moments:
        """The same statistics about other shifts. Exact algebra on the sums, so it holds for
        increments too (sums with ``n == 0`` that change units already counted)."""
        dy, dz, dx = self.shift_y - shift_y, self.shift_z - shift_z, self.shift_x - shift_x
        if dy == dz == dx == 0:
            return self
        n = self.n
        return Moments(
            n,
            self.sum_y + n * dy,
            self.sum_y2 + 2.0 * dy * self.sum_y + n * dy * dy,
            self.sum_z + n * dz,
            self.sum_z2 + 2.0 * dz * self.sum_z + n * dz * dz,
            self.sum_yz + dz * self.sum_y + dy * self.sum_z + n * dy * dz,
            self.sum_x + n * dx,
            self.sum_x2 + 2.0 * dx * self.sum_x + n * dx * dx,
            self.sum_xy + dy * self.sum_x + dx * self.sum_y + n * dx * dy,
            shift_y,
            shift_z,
            shift_x,
        )

    def _sums(self) -> tuple[float, ...]:
        return (
            self.sum_y,
            self.sum_y2,
            self.sum_z,
            self.sum_z2,
            self.sum_yz,
            self.sum_x,
            self.sum_x2,
            self.sum_xy,
        )

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
            self.shift_y,
            self.shift_z,
            self.shift_x,
        )

    def __add__(self, other: Moments) -> Moments:
        """The union's moments, about this one's shifts (or the other's when this one is empty)."""
        base = other if self.n == 0 and not any(self._sums()) else self
        a = self.shifted(base.shift_y, base.shift_z, base.shift_x)
        b = other.shifted(base.shift_y, base.shift_z, base.shift_x)
        sy, sy2, sz, sz2, syz, sx, sx2, sxy = (
            p + q for p, q in zip(a._sums(), b._sums(), strict=True)
        )
        return Moments(
            a.n + b.n,
            sy,
            sy2,
            sz,
            sz2,
            syz,
            sx,
            sx2,
            sxy,
            *(base.shift_y, base.shift_z, base.shift_x),
        )

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
    """Reduce raw per-unit arrays to :class:`Moments` about their first values, as the SQL does
    (used by tests)."""
    ya = np.asarray(y, dtype=np.float64).ravel()
    za = None if z is None else np.asarray(z, dtype=np.float64).ravel()
    xa = None if x is None else np.asarray(x, dtype=np.float64).ravel()
    for name, arr in (("z", za), ("x", xa)):
        if arr is not None and arr.shape != ya.shape:
            raise ValueError(f"{name} must have the same length as y")

    def first(arr: npt.NDArray[np.float64] | None) -> float:
        return float(arr[0]) if arr is not None and arr.size else 0.0

    ky, kz, kx = first(ya), first(za), first(xa)
    yc = ya - ky
    out: dict[str, Any] = {
        "n": int(ya.size),
        "sum_y": float(yc.sum()),
        "sum_y2": float(yc @ yc),
        "shift_y": ky,
    }
    if za is not None:
        zc = za - kz
        out |= {"sum_z": float(zc.sum()), "sum_z2": float(zc @ zc), "sum_yz": float(yc @ zc)}
        out["shift_z"] = kz
    if xa is not None:
        xc = xa - kx
        out |= {"sum_x": float(xc.sum()), "sum_x2": float(xc @ xc), "sum_xy": float(yc @ xc)}
        out["shift_x"] = kx
    return Moments(**out)


NOISE = 1e-10
"""Below this share of Σ(a-k)², a spread Σ(a-k)² - (Σ(a-k))²/n is rounding, not data: n values
that are all equal but not equal to the shift leave ~n·2^-52 of it. Data whose spread is that far
below their distance from the shift (a unit's value, so within a few standard deviations of the
mean in anything real) would have no digits left anyway; both read as no spread at all."""


def sample_cov(
    n: int, sum_a: float, sum_b: float, sum_ab: float, sum_a2: float, sum_b2: float
) -> float:
    """Sample covariance (``n - 1`` denominator) from sums about shifts; needs ``n >= 2``.
    ``sum_a2`` and ``sum_b2`` set the rounding floor (see :data:`NOISE`)."""
    co = sum_ab - sum_a * sum_b / n
    if abs(co) <= NOISE * math.sqrt(sum_a2 * sum_b2):
        return 0.0
    return co / (n - 1)


def sample_var(n: int, sum_a: float, sum_a2: float) -> float:
    """Sample variance from sums about a shift, zero below the rounding floor; needs ``n >= 2``."""
    return max(sample_cov(n, sum_a, sum_a, sum_a2, sum_a2, sum_a2), 0.0)


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
    mean = m.mean_y
    if m.n < 2:
        return ArmSummary(m.n, mean, None, None, reason="fewer than 2 exposed units")
    variance = sample_var(m.n, m.sum_y, m.sum_y2)
    return ArmSummary(m.n, mean, variance, math.sqrt(variance / m.n))


def _ratio_summary(m: Moments) -> ArmSummary:
    total_z = m.total_z
    if total_z == 0:
        return ArmSummary(m.n, None, None, None, reason="ratio denominator is zero")
    r = m.total_y / total_z
    if m.n < 2:
        return ArmSummary(m.n, r, None, None, reason="fewer than 2 exposed units")
    mean_z = total_z / m.n
    var_y = sample_var(m.n, m.sum_y, m.sum_y2)
    var_z = sample_var(m.n, m.sum_z, m.sum_z2)
    cov_yz = sample_cov(m.n, m.sum_y, m.sum_z, m.sum_yz, m.sum_y2, m.sum_z2)
    spread = var_y - 2.0 * r * cov_yz + r * r * var_z  # of the linearised y - r z
    if spread <= NOISE * (var_y + r * r * var_z):  # y = r z in every unit, but for rounding
        spread = 0.0
    variance = spread / (mean_z * mean_z)
    return ArmSummary(m.n, r, variance, math.sqrt(variance / m.n))
