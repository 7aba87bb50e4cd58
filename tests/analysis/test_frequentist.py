"""Frequentist engine: Welch's t against scipy, delta-method intervals, ratio metrics, Holm."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from control_plane.analysis import Moments, frequentist, moments_from_values


def _scipy_welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    ref = stats.ttest_ind_from_stats(
        b.mean(), b.std(ddof=1), b.size, a.mean(), a.std(ddof=1), a.size, equal_var=False
    )
    return float(ref.statistic), float(ref.pvalue)


@pytest.mark.parametrize(
    ("seed", "n_c", "n_t", "kind"),
    [
        (1, 5_000, 5_000, "bernoulli"),
        (2, 2_000, 3_000, "bernoulli"),
        (3, 300, 700, "normal"),
        (4, 40, 25, "normal"),
        (5, 10_000, 9_000, "lognormal"),
        (6, 12, 9, "poisson"),
    ],
)
def test_welch_p_value_agrees_with_scipy(seed: int, n_c: int, n_t: int, kind: str) -> None:
    rng = np.random.default_rng(seed)
    a: npt.NDArray[np.number[Any]]
    b: npt.NDArray[np.number[Any]]
    if kind == "bernoulli":
        a, b = rng.binomial(1, 0.10, n_c), rng.binomial(1, 0.11, n_t)
    elif kind == "normal":
        a, b = rng.normal(10, 3, n_c), rng.normal(10.4, 5, n_t)
    elif kind == "lognormal":
        a, b = rng.lognormal(1, 1, n_c), rng.lognormal(1.02, 1.1, n_t)
    else:
        a, b = rng.poisson(3, n_c), rng.poisson(4, n_t)
    a, b = a.astype(float), b.astype(float)
    c = frequentist(moments_from_values(a), {"b": moments_from_values(b)}).comparisons["b"]
    t_ref, p_ref = _scipy_welch(a, b)
    raw = stats.ttest_ind(b, a, equal_var=False)
    assert c.test == "welch_t"
    assert c.p_value is not None
    assert c.statistic is not None
    assert abs(c.p_value - p_ref) < 1e-6
    assert abs(c.p_value - raw.pvalue) < 1e-6
    assert c.statistic == pytest.approx(t_ref, rel=1e-8)
    assert c.p_value_adjusted == c.p_value  # one treatment: Holm changes nothing
    # significant: Welch p < alpha and the relative interval on the same side of 0
    assert c.ci_low is not None
    assert c.ci_high is not None
    assert c.significant == (p_ref < 0.05 and (c.ci_low > 0 or c.ci_high < 0))
    assert c.difference == pytest.approx(b.mean() - a.mean(), rel=1e-9)


def test_relative_uplift_delta_method_hand_computed() -> None:
    # control: 100/1000 conversions, treatment 120/1000 (0/1 values: Σy² = Σy)
    # s²_c = (100 - 100²/1000)/999 = 90/999, s²_t = (120 - 120²/1000)/999 = 105.6/999
    # Var(r) = s²_t/(n m_c²) + m_t² s²_c/(n m_c⁴) = 0.0105705706 + 0.0129729730 = 0.0235435435
    # Welch df = 1985.37, t_0.975 = 1.961160; CI = 20% ± 100·1.961160·0.1534391 %
    res = frequentist(Moments(1000, 100, 100), {"b": Moments(1000, 120, 120)})
    c = res.comparisons["b"]
    assert c.uplift == pytest.approx(20.0, rel=1e-12)
    assert c.df == pytest.approx(1985.3714563, rel=1e-8)
    se = math.sqrt(105.6 / 999 / 1000 / 0.01 + 0.0144 * 90 / 999 / 1000 / 1e-4)
    assert se == pytest.approx(0.1534390548, rel=1e-9)
    q = stats.t.ppf(0.975, 1985.3714563)
    assert c.ci_low == pytest.approx(20 - 100 * q * se, rel=1e-9)
    assert c.ci_high == pytest.approx(20 + 100 * q * se, rel=1e-9)
    assert c.ci_low == pytest.approx(-10.0918, abs=1e-3)
    assert c.ci_high == pytest.approx(50.0918, abs=1e-3)
    assert res.control.mean == pytest.approx(0.1)
    assert res.treatments["b"].variance == pytest.approx(105.6 / 999)


def test_delta_method_interval_covers_the_true_uplift() -> None:
    """Coverage of the 95% relative interval over 1,500 simulated experiments."""
    rng = np.random.default_rng(11)
    reps, n = 1_500, 4_000
    conv_c = rng.binomial(n, 0.05, reps)
    conv_t = rng.binomial(n, 0.06, reps)
    true_uplift = 20.0
    covered = 0
    for cc, ct in zip(conv_c.tolist(), conv_t.tolist(), strict=True):
        c = frequentist(Moments(n, cc, cc), {"b": Moments(n, ct, ct)}).comparisons["b"]
        assert c.ci_low is not None
        assert c.ci_high is not None
        covered += c.ci_low <= true_uplift <= c.ci_high
    assert 0.935 <= covered / reps <= 0.965


def test_ratio_metric_z_test_on_linearised_values() -> None:
    rng = np.random.default_rng(21)

    def arm(n: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
        z = rng.poisson(2.0, n) + 1
        return rng.gamma(2.0 * z, scale), z.astype(float)

    (yc, zc), (yt, zt) = arm(3_000, 10.0), arm(3_200, 10.6)
    res = frequentist(
        moments_from_values(yc, z=zc), {"b": moments_from_values(yt, z=zt)}, ratio=True
    )
    c = res.comparisons["b"]
    # independent computation on the raw arrays
    rc, rt = yc.sum() / zc.sum(), yt.sum() / zt.sum()
    var_c = ((yc - rc * zc) / zc.mean()).var(ddof=1) / yc.size
    var_t = ((yt - rt * zt) / zt.mean()).var(ddof=1) / yt.size
    z = (rt - rc) / math.sqrt(var_c + var_t)
    assert c.test == "z"
    assert c.df is None
    assert c.statistic == pytest.approx(z, rel=1e-8)
    assert c.p_value == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-8)
    assert res.control.mean == pytest.approx(rc)
    assert c.uplift == pytest.approx(100 * (rt / rc - 1), rel=1e-10)
    se_rel = math.sqrt(var_t / rc**2 + rt**2 * var_c / rc**4)
    q = stats.norm.ppf(0.975)
    assert c.ci_low == pytest.approx(100 * (rt / rc - 1 - q * se_rel), rel=1e-9)
    assert c.ci_high == pytest.approx(100 * (rt / rc - 1 + q * se_rel), rel=1e-9)


def test_holm_decides_significance_across_arms() -> None:
    # Two arms with raw p ≈ 0.030 and 0.034: each < 0.05 alone, but Holm doubles the smaller one.
    control = Moments(10_000, 1_000, 1_000)
    arms = {"b": Moments(10_000, 1_094, 1_094), "c": Moments(10_000, 1_092, 1_092)}
    res = frequentist(control, arms)
    b, c = res.comparisons["b"], res.comparisons["c"]
    assert b.p_value is not None
    assert c.p_value is not None
    assert b.p_value < 0.05
    assert c.p_value < 0.05
    lo, hi = sorted([b.p_value, c.p_value])
    adjusted = {b.p_value: b.p_value_adjusted, c.p_value: c.p_value_adjusted}
    assert adjusted[lo] == pytest.approx(max(2 * lo, hi))
    assert adjusted[hi] == pytest.approx(max(2 * lo, hi))
    assert not b.significant
    assert not c.significant
    # alone, each would be significant
    assert frequentist(control, {"b": arms["b"]}).comparisons["b"].significant


def test_lower_alpha_widens_the_interval() -> None:
    control, arms = Moments(2_000, 200, 200), {"b": Moments(2_000, 240, 240)}
    wide = frequentist(control, arms, alpha=0.01).comparisons["b"]
    narrow = frequentist(control, arms, alpha=0.10).comparisons["b"]
    assert wide.ci_low is not None
    assert narrow.ci_low is not None
    assert wide.ci_low < narrow.ci_low


@pytest.mark.parametrize(
    ("control", "treatment", "ratio", "reason"),
    [
        (Moments(1, 1, 1), Moments(100, 10, 10), False, "control: fewer than 2 exposed units"),
        (Moments(100, 10, 10), Moments(0, 0, 0), False, "b: no exposed units"),
        (Moments(100, 0, 0), Moments(100, 0, 0), False, "zero variance in both arms"),
        (Moments(100, 5, 5, sum_z=0), Moments(100, 5, 5, 9, 9, 5), True, "control: ratio"),
    ],
)
def test_degenerate_inputs_do_not_raise(
    control: Moments, treatment: Moments, ratio: bool, reason: str
) -> None:
    c = frequentist(control, {"b": treatment}, ratio=ratio).comparisons["b"]
    assert c.reason is not None
    assert c.reason.startswith(reason)
    assert c.p_value is None
    assert c.uplift is None
    assert not c.significant


def test_zero_control_mean_keeps_the_test_but_not_the_uplift() -> None:
    c = frequentist(Moments(500, 0, 0), {"b": Moments(500, 9, 9)}).comparisons["b"]
    assert c.p_value is not None
    assert c.p_value < 0.01
    assert c.uplift is None
    assert c.ci_low is None
    assert c.reason == "control mean is zero: relative uplift is undefined"


def test_invalid_alpha_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="alpha"):
        frequentist(Moments(10, 1, 1), {"b": Moments(10, 2, 2)}, alpha=1.5)
