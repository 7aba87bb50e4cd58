"""CUPED on simulated correlated data: y = a + b·x + noise, x the pre-exposure value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from control_plane.analysis import (
    Moments,
    analyse,
    bayesian,
    cuped_adjust,
    frequentist,
    moments_from_values,
    sequential,
)

RHO2 = 0.8  # y = 5 + 2x + e, x ~ N(0, 1), e ~ N(0, 1): ρ² = 4 / (4 + 1)


def _arm(rng: np.random.Generator, n: int, effect: float) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(0.0, 1.0, n)
    return 5.0 + effect + 2.0 * x + rng.normal(0.0, 1.0, n), x


def test_variance_reduction_is_rho_squared_and_intervals_narrow() -> None:
    rng = np.random.default_rng(31)
    (yc, xc), (yt, xt) = _arm(rng, 20_000, 0.0), _arm(rng, 20_000, 0.05)
    control, arms = moments_from_values(yc, x=xc), {"b": moments_from_values(yt, x=xt)}
    plain = frequentist(control, arms).comparisons["b"]
    res = frequentist(control, arms, cuped=True)
    adjusted = res.comparisons["b"]
    assert res.cuped is not None
    assert res.cuped.applied
    assert res.cuped.variance_reduction == pytest.approx(RHO2, abs=0.01)
    assert adjusted.variance_reduction == pytest.approx(RHO2, abs=0.01)
    # θ is the pooled regression slope over all units of all arms
    y, x = np.r_[yc, yt], np.r_[xc, xt]
    theta = np.cov(y, x)[0, 1] / x.var(ddof=1)
    assert res.cuped.theta == pytest.approx(theta, rel=1e-9)
    assert res.control.adjusted_mean == pytest.approx(yc.mean() - theta * (xc.mean() - x.mean()))
    assert res.control.adjusted_variance == pytest.approx((yc - theta * xc).var(ddof=1), rel=1e-9)
    # narrower by about sqrt(1 - ρ²), and a smaller p-value for the same effect
    for low, high, width in (
        (adjusted.ci_low, adjusted.ci_high, (plain.ci_high or 0) - (plain.ci_low or 0)),
        (
            adjusted.difference_ci_low,
            adjusted.difference_ci_high,
            (plain.difference_ci_high or 0) - (plain.difference_ci_low or 0),
        ),
    ):
        assert low is not None
        assert high is not None
        assert (high - low) / width == pytest.approx(math.sqrt(1 - RHO2), rel=0.05)
    assert plain.p_value is not None
    assert adjusted.p_value is not None
    assert adjusted.p_value < plain.p_value
    assert adjusted.significant  # z ≈ 5 after CUPED, ≈ 2.2 before


def test_cuped_estimate_is_unbiased_and_its_interval_keeps_coverage() -> None:
    rng = np.random.default_rng(32)
    reps, n, effect = 1_000, 2_000, 0.05
    x = rng.normal(0.0, 1.0, (2, reps, n))
    y = 5.0 + 2.0 * x + rng.normal(0.0, 1.0, (2, reps, n))
    y[1] += effect
    sums = {
        "sum_y": y.sum(axis=2),
        "sum_y2": (y * y).sum(axis=2),
        "sum_x": x.sum(axis=2),
        "sum_x2": (x * x).sum(axis=2),
        "sum_xy": (x * y).sum(axis=2),
    }

    def moments(arm: int, rep: int) -> Moments:
        return Moments(n, **{k: float(v[arm, rep]) for k, v in sums.items()})

    estimates, covered = [], 0
    for rep in range(reps):
        c = frequentist(moments(0, rep), {"b": moments(1, rep)}, cuped=True).comparisons["b"]
        assert c.difference is not None
        assert c.difference_ci_low is not None
        assert c.difference_ci_high is not None
        estimates.append(c.difference)
        covered += c.difference_ci_low <= effect <= c.difference_ci_high
    est = np.asarray(estimates)
    expected_sd = math.sqrt(2 * (1 - RHO2) * 5.0 / n)  # Var(y) = 5, both arms
    assert est.mean() == pytest.approx(effect, abs=3 * expected_sd / math.sqrt(reps))
    assert est.std(ddof=1) == pytest.approx(expected_sd, rel=0.08)
    assert 0.935 <= covered / reps <= 0.965


def test_bayesian_and_sequential_use_the_adjusted_numbers() -> None:
    rng = np.random.default_rng(33)
    (yc, xc), (yt, xt) = _arm(rng, 10_000, 0.0), _arm(rng, 10_000, 0.05)
    control, arms = moments_from_values(yc, x=xc), {"b": moments_from_values(yt, x=xt)}
    for run in (bayesian, sequential):
        plain = run(control, arms).comparisons["b"]
        adjusted = run(control, arms, cuped=True).comparisons["b"]
        assert adjusted.variance_reduction == pytest.approx(RHO2, abs=0.02)
        assert plain.ci_low is not None
        assert plain.ci_high is not None
        assert adjusted.ci_low is not None
        assert adjusted.ci_high is not None
        assert adjusted.ci_high - adjusted.ci_low < 0.6 * (plain.ci_high - plain.ci_low)


def test_a_ratio_without_its_denominator_before_exposure_is_left_unadjusted() -> None:
    rng = np.random.default_rng(34)
    z = rng.poisson(2, (2, 500)) + 1.0
    y = z * 3 + rng.normal(0, 1, (2, 500))
    control = moments_from_values(y[0], z=z[0], x=y[0], w=np.zeros(500))
    arms = {"b": moments_from_values(y[1], z=z[1], x=y[1], w=z[1])}
    res = analyse(control, arms, ratio=True, cuped=True)
    assert res.cuped is not None
    assert not res.cuped.applied
    assert res.cuped.reason is not None
    assert "denominator before exposure" in res.cuped.reason
    assert res.notes == (res.cuped.reason,)
    assert res.comparisons == analyse(control, arms, ratio=True).comparisons
    assert res.control.adjusted_mean is None


def test_no_covariate_variance_leaves_the_analysis_unadjusted() -> None:
    control, arms = Moments(1_000, 100, 100), {"b": Moments(1_000, 120, 120)}
    res = frequentist(control, arms, cuped=True)
    assert res.cuped is not None
    assert not res.cuped.applied
    assert res.cuped.reason == "the CUPED covariate has no variance"
    assert res.comparisons == frequentist(control, arms).comparisons


def test_cuped_adjust_skips_tiny_arms() -> None:
    info, adjusted = cuped_adjust(
        {
            "a": moments_from_values([1.0, 2.0, 4.0], x=[0.0, 1.0, 3.0]),
            "b": Moments(1, 1, 1, 0, 0, 0, 1, 1, 1),
        }
    )
    assert info.applied
    assert set(adjusted) == {"a"}
