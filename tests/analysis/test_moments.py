"""Moments from raw arrays, per-arm summaries and the ratio metric's delta-method variance."""

from __future__ import annotations

import math
from dataclasses import astuple

import numpy as np
import pytest

from control_plane.analysis import Moments, combine, moments_from_values, summarise


def test_moments_from_values_are_the_sums() -> None:
    y = np.array([1.0, 2.0, 3.0])
    z = np.array([1.0, 1.0, 2.0])
    x = np.array([0.0, 4.0, 1.0])
    m = moments_from_values(y, z=z, x=x)
    # about the first unit's values (1, 1, 0), as the SQL takes them
    assert m == Moments(
        n=3,
        sum_y=3,
        sum_y2=5,
        sum_z=1,
        sum_z2=1,
        sum_yz=2,
        sum_x=5,
        sum_x2=17,
        sum_xy=6,
        shift_y=1,
        shift_z=1,
        sum_zx=1,
    )
    assert m.shifted(0.0, 0.0, 0.0) == Moments(
        n=3,
        sum_y=6,
        sum_y2=14,
        sum_z=4,
        sum_z2=6,
        sum_yz=9,
        sum_x=5,
        sum_x2=17,
        sum_xy=11,
        sum_zx=6,
    )


def test_values_near_two_to_the_53_keep_their_variance() -> None:
    """Σy² - (Σy)²/n of values near 2^53 cancels to noise of order 10^16; about a shift the
    spread is exact, and exposed units without events (zeros) join without losing it."""
    top = float(2**53 - 1)
    y = top - np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    s = summarise(moments_from_values(y), ratio=False)
    assert s.variance == 3.5
    flat = summarise(moments_from_values(np.full(50, top)), ratio=False)
    assert flat.variance == 0.0
    assert flat.mean == top
    mixed = moments_from_values(y) + Moments.zeros(6, shift_y=top)
    both = np.r_[y, np.zeros(6)]
    assert summarise(mixed, ratio=False).variance == pytest.approx(both.var(ddof=1), rel=1e-12)
    ratio = summarise(moments_from_values(y, z=np.ones(6)), ratio=True)
    assert ratio.mean == pytest.approx(y.mean(), rel=1e-15)
    assert ratio.variance == pytest.approx(3.5, rel=1e-12)


def test_shifted_holds_for_increments() -> None:
    """Moving the shift is exact algebra, for whole units and for increments (n = 0)."""
    rng = np.random.default_rng(3)
    y, z, x = rng.normal(size=(3, 20))
    m = moments_from_values(y, z=z, x=x)
    again = m.shifted(5.0, -2.0, 7.0).shifted(m.shift_y, m.shift_z, m.shift_x)
    for a, b in zip(astuple(again), astuple(m), strict=True):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9)
    k = float(y[0])

    def about_k(values: np.ndarray) -> Moments:
        d = values - k
        return Moments(values.size, float(d.sum()), float(d @ d), shift_y=k)

    before, after = about_k(y[:10]), about_k(y[:10] + 1.0)
    step = Moments(0, after.sum_y - before.sum_y, after.sum_y2 - before.sum_y2, shift_y=k)
    moved = before.shifted(2.0, 0.0, 0.0) + step.shifted(2.0, 0.0, 0.0)
    assert astuple(moved.shifted(0.0, 0.0, 0.0)) == pytest.approx(
        astuple(after.shifted(0.0, 0.0, 0.0)), rel=1e-12
    )


def test_moments_from_values_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="same length"):
        moments_from_values([1, 2], z=[1])


def test_moments_add_like_concatenated_units() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(2, 50))
    za, zb = rng.poisson(3, size=(2, 50))
    joined = moments_from_values(np.r_[a, b], z=np.r_[za, zb], x=np.r_[b, a])
    parts = combine([moments_from_values(a, z=za, x=b), moments_from_values(b, z=zb, x=a)])
    assert parts.n == joined.n
    for name in ("sum_y", "sum_y2", "sum_z", "sum_z2", "sum_yz", "sum_x", "sum_x2", "sum_xy"):
        assert getattr(parts, name) == pytest.approx(getattr(joined, name), rel=1e-12)


def test_summary_matches_numpy_sample_statistics() -> None:
    y = np.random.default_rng(2).lognormal(2.0, 1.0, size=1_000)
    s = summarise(moments_from_values(y), ratio=False)
    assert s.reason is None
    assert s.mean == pytest.approx(y.mean(), rel=1e-12)
    assert s.variance == pytest.approx(y.var(ddof=1), rel=1e-9)
    assert s.std_error == pytest.approx(y.std(ddof=1) / math.sqrt(y.size), rel=1e-9)


def test_ratio_variance_hand_computed() -> None:
    # r = 10/6; z̄ = 1.5; Var y = 5/3, Var z = 1/3, Cov = 2/3 (n - 1 = 3)
    # (5/3 - 2 r 2/3 + r² 1/3) / 1.5² = (10/27) / (9/4) = 40/243
    s = summarise(moments_from_values([1, 2, 3, 4], z=[1, 1, 2, 2]), ratio=True)
    assert s.mean == pytest.approx(10 / 6)
    assert s.variance == pytest.approx(40 / 243, rel=1e-12)
    assert s.std_error == pytest.approx(math.sqrt(40 / 243 / 4), rel=1e-12)


def test_ratio_variance_equals_the_linearised_unit_values() -> None:
    rng = np.random.default_rng(3)
    z = rng.poisson(2.0, size=2_000) + 1
    y = z * rng.gamma(2.0, 10.0, size=z.size) + rng.normal(0, 5, size=z.size)
    r = y.sum() / z.sum()
    u = (y - r * z) / z.mean()
    s = summarise(moments_from_values(y, z=z), ratio=True)
    assert s.variance == pytest.approx(u.var(ddof=1), rel=1e-9)


def test_ratio_delta_method_matches_the_spread_of_replications() -> None:
    """The delta-method standard error of Σy/Σz ≈ the standard deviation over 4,000 repeats."""
    rng = np.random.default_rng(4)
    reps, n = 4_000, 400
    z = rng.poisson(1.5, size=(reps, n)) + 1
    y = rng.gamma(2.0 * z, 5.0)  # sum of z gamma(2, 5) values: mean grows with z
    ratios = y.sum(axis=1) / z.sum(axis=1)
    se: list[float] = []
    for i in range(50):
        std_error = summarise(moments_from_values(y[i], z=z[i]), ratio=True).std_error
        assert std_error is not None
        se.append(std_error)
    assert float(np.mean(se)) == pytest.approx(ratios.std(ddof=1), rel=0.06)


@pytest.mark.parametrize(
    ("moments", "ratio", "reason"),
    [
        (Moments(0, 0.0, 0.0), False, "no exposed units"),
        (Moments(1, 1.0, 1.0), False, "fewer than 2 exposed units"),
        (Moments(5, 1.0, 1.0, sum_z=0.0), True, "ratio denominator is zero"),
        (Moments(5, float("nan"), 1.0), False, "non-finite sufficient statistics"),
    ],
)
def test_degenerate_arms_give_a_reason(moments: Moments, ratio: bool, reason: str) -> None:
    s = summarise(moments, ratio=ratio)
    assert s.reason == reason
    assert s.variance is None
    assert s.std_error is None


def test_a_spread_below_the_rounding_floor_is_no_spread() -> None:
    """Found by the time series' comparison with a direct computation (one seed in ~40): equal
    values about another unit's value left a variance of ~1e-13, and a ratio metric whose units
    all have y = r z a delta-method variance of rounding; both are exactly no spread, as the
    same values about their own first value give. Otherwise the engines test a difference on a
    standard error of noise."""
    d = 1236.0 - -7.3  # 14 equal values about a shift that is not one of them
    s1 = s2 = 0.0
    for _ in range(14):
        s1, s2 = s1 + d, s2 + d * d
    assert s2 - s1 * s1 / 14 > 0  # rounding: ~1.5e-8, where the spread is 0
    assert summarise(Moments(14, s1, s2, shift_y=-7.3), ratio=False).variance == 0.0
    y, z = np.array([995.0, 0, 0, 0]), np.array([1.0, 0, 0, 0])
    direct = summarise(moments_from_values(y, z=z), ratio=True)
    # the one unit with events (y 995, z 1) about another unit's values (1236, 2), and 3 zeros
    shifted = Moments(1, -241.0, 241.0**2, -1.0, 1.0, 241.0, shift_y=1236.0, shift_z=2.0)
    shifted = shifted + Moments.zeros(3, 1236.0, 2.0)
    assert direct.variance == 0.0
    assert summarise(shifted, ratio=True).variance == 0.0
    assert summarise(shifted, ratio=True).mean == pytest.approx(995.0)
