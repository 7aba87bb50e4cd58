"""Sample size and minimum detectable effect: the closed forms against a direct computation of
the power they promise, and against simulated experiments."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from control_plane.analysis import Moments, frequentist
from control_plane.analysis.power import (
    minimum_detectable_effect,
    plan_conversion,
    plan_mean,
    units_per_arm,
)


def achieved_power(
    variance_control: float, variance_treatment: float, effect: float, n: int
) -> float:
    """The power of the two-sided test at level 0.05 with ``n`` units per arm, computed here
    from the normal distribution rather than taken from the code under test."""
    se = math.sqrt((variance_control + variance_treatment) / n)
    return float(stats.norm.cdf(abs(effect) / se - stats.norm.ppf(0.975)))


def test_conversion_plan_is_the_smallest_n_with_the_power_asked_for() -> None:
    plan = plan_conversion(0.10, 0.05)
    # (z_0.975 + z_0.8)^2 (0.1 * 0.9 + 0.105 * 0.895) / 0.005^2
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert plan.units_per_variant == math.ceil(z * z * (0.09 + 0.105 * 0.895) / 0.005**2)
    assert plan.units_per_variant == 57_760
    vc, vt, effect = plan.variance_control, plan.variance_treatment, 0.005
    assert achieved_power(vc, vt, effect, plan.units_per_variant) >= 0.8
    assert achieved_power(vc, vt, effect, plan.units_per_variant - 1) < 0.8


def test_more_variants_split_alpha() -> None:
    two = plan_conversion(0.2, 0.1).units_per_variant
    four = plan_conversion(0.2, 0.1, variants=4).units_per_variant
    z2 = stats.norm.ppf(1 - 0.05 / 2) + stats.norm.ppf(0.8)
    z4 = stats.norm.ppf(1 - 0.05 / 6) + stats.norm.ppf(0.8)
    assert four / two == pytest.approx((z4 / z2) ** 2, rel=1e-3)


def test_mean_plan_and_mde_are_inverse() -> None:
    plan = plan_mean(50.0, 20.0, 0.04, alpha=0.01, power=0.9)
    n = plan.units_per_variant
    se = math.sqrt(2 * 400.0 / n)
    mde = minimum_detectable_effect(se, alpha=0.01, power=0.9)
    assert mde / 50.0 == pytest.approx(0.04, rel=1e-3)
    assert mde / 50.0 <= 0.04


def test_planned_sample_detects_the_effect_as_often_as_promised() -> None:
    """1,000 simulated experiments at the planned n with the planned effect: the Welch test
    rejects in about 80 % of them."""
    rng = np.random.default_rng(8)
    plan = plan_conversion(0.3, 0.1)
    n = plan.units_per_variant
    rejections = significant = 0
    for _ in range(1_000):
        c, t = float(rng.binomial(n, 0.3)), float(rng.binomial(n, 0.33))
        result = frequentist(Moments(n, c, c), {"b": Moments(n, t, t)}).comparisons["b"]
        assert result.p_value is not None
        rejections += result.p_value < 0.05
        significant += result.significant
    assert 0.76 <= rejections / 1_000 <= 0.84
    assert significant / 1_000 >= 0.72


def test_degenerate_inputs() -> None:
    assert units_per_arm(0.0, 0.0, 1.0) is None
    assert units_per_arm(1.0, 1.0, 0.0) is None
    with pytest.raises(ValueError, match="rate"):
        plan_conversion(0.9, 0.2)
    with pytest.raises(ValueError, match="power"):
        plan_mean(1.0, 1.0, 0.1, power=1.0)
