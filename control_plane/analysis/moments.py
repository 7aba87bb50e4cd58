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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported by the one function using it (see ``distributions``)
    import numpy as np
    import numpy.typing as npt

_VARIABLES = ("y", "z", "x", "w")
# the sum of each product of two variables' values less their shifts, by field name
_PRODUCTS = {
    "sum_y2": ("y", "y"),
    "sum_z2": ("z", "z"),
    "sum_yz": ("y", "z"),
    "sum_x2": ("x", "x"),
    "sum_xy": ("x", "y"),
    "sum_w2": ("w", "w"),
    "sum_xw": ("x", "w"),
    "sum_yw": ("y", "w"),
    "sum_zx": ("z", "x"),
    "sum_zw": ("z", "w"),
}
_SUM_FIELDS: tuple[str, ...] = ("sum_y", "sum_y2", "sum_z", "sum_z2", "sum_yz", "sum_x", "sum_x2")
_SUM_FIELDS += ("sum_xy", "sum_w", "sum_w2", "sum_xw", "sum_yw", "sum_zx", "sum_zw")


@dataclass(frozen=True, slots=True)
class Moments:
    """Sufficient statistics of one arm over its exposed units.

    ``y`` is the per-unit metric value (0/1 for conversion, event count, sum of ``value``; the
    numerator for a ratio metric), ``z`` the ratio metric's per-unit denominator, ``x`` the CUPED
    covariate (the same metric in the 14 days before exposure; for a ratio metric its numerator)
    and ``w`` a ratio metric's CUPED covariate denominator. Every sum is of the values less their
    shift: ``sum_y`` is Σ(y - shift_y), ``sum_yz`` is Σ(y - shift_y)(z - shift_z), and so on.
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
    sum_w: float = 0.0
    sum_w2: float = 0.0
    sum_xw: float = 0.0
    sum_yw: float = 0.0
    sum_zx: float = 0.0
    sum_zw: float = 0.0
    shift_w: float = 0.0

    @classmethod
    def zeros(
        cls,
        n: int,
        shift_y: float = 0.0,
        shift_z: float = 0.0,
        shift_x: float = 0.0,
        shift_w: float = 0.0,
    ) -> Moments:
        """``n`` units whose y, z, x and w are all 0 (exposed units without events)."""
        return cls(n, 0.0, 0.0).shifted(shift_y, shift_z, shift_x, shift_w)

    def _shift(self, variable: str) -> float:
        return float(getattr(self, f"shift_{variable}"))

    def _sum(self, variable: str) -> float:
        return float(getattr(self, f"sum_{variable}"))

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

    @property
    def total_x(self) -> float:
        return self.sum_x + self.n * self.shift_x

    @property
    def total_w(self) -> float:
        return self.sum_w + self.n * self.shift_w

    def shifted(
        self, shift_y: float, shift_z: float, shift_x: float, shift_w: float = 0.0
    ) -> Moments:
        """The same statistics about other shifts. Exact algebra on the sums, so it holds for
        increments too (sums with ``n == 0`` that change units already counted):
        Σ(a-k'_a)(b-k'_b) = Σ(a-k_a)(b-k_b) + d_b Σ(a-k_a) + d_a Σ(b-k_b) + n d_a d_b with
        d = k - k'."""
        new = {"y": shift_y, "z": shift_z, "x": shift_x, "w": shift_w}
        d = {v: self._shift(v) - new[v] for v in _VARIABLES}
        if not any(d.values()):
            return self
        n = self.n
        out: dict[str, float] = {f"shift_{v}": new[v] for v in _VARIABLES}
        for v in _VARIABLES:
            out[f"sum_{v}"] = self._sum(v) + n * d[v]
        for name, (a, b) in _PRODUCTS.items():
            out[name] = (
                getattr(self, name) + d[b] * self._sum(a) + d[a] * self._sum(b) + n * d[a] * d[b]
            )
        return Moments(n, **out)

    def _sums(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in _SUM_FIELDS)

    def _values(self) -> tuple[float, ...]:
        return (self.n, *self._sums(), *(self._shift(v) for v in _VARIABLES))

    def __add__(self, other: Moments) -> Moments:
        """The union's moments, about this one's shifts (or the other's when this one is empty)."""
        base = other if self.n == 0 and not any(self._sums()) else self
        shifts = tuple(base._shift(v) for v in _VARIABLES)
        a, b = self.shifted(*shifts), other.shifted(*shifts)
        sums = {name: getattr(a, name) + getattr(b, name) for name in _SUM_FIELDS}
        return Moments(
            a.n + b.n, **sums, **{f"shift_{v}": s for v, s in zip(_VARIABLES, shifts, strict=True)}
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
    w: npt.ArrayLike | None = None,
) -> Moments:
    """Reduce raw per-unit arrays to :class:`Moments` about their first values, as the SQL does
    (used by tests)."""
    import numpy as np

    arrays: dict[str, npt.NDArray[np.float64]] = {"y": np.asarray(y, dtype=np.float64).ravel()}
    for name, given in (("z", z), ("x", x), ("w", w)):
        if given is not None:
            arrays[name] = np.asarray(given, dtype=np.float64).ravel()
            if arrays[name].shape != arrays["y"].shape:
                raise ValueError(f"{name} must have the same length as y")
    centred = {name: arr - (float(arr[0]) if arr.size else 0.0) for name, arr in arrays.items()}
    out: dict[str, Any] = {"n": int(arrays["y"].size)}
    for name, arr in arrays.items():
        out[f"shift_{name}"] = float(arr[0]) if arr.size else 0.0
        out[f"sum_{name}"] = float(centred[name].sum())
    for field_name, (a, b) in _PRODUCTS.items():
        if a in centred and b in centred:
            out[field_name] = float(centred[a] @ centred[b])
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
