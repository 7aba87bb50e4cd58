"""Sequential engine: mSPRT always-valid p-values and confidence sequences under peeking."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import special

from control_plane.analysis import (
    Moments,
    confidence_sequence,
    frequentist,
    msprt_p_value,
    sequential,
)

ALPHA = 0.05
EXPERIMENTS, LOOKS, BATCH = 2_000, 20, 100


def _normal_looks(
    rng: np.random.Generator, mean: float, sd: float, experiments: int
) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative (Σy, Σy²) at each look, drawn exactly from their normal-theory distributions:
    a batch of m units has Σy ~ N(mμ, msigma²) and Σ(y - ȳ)² ~ sigma² χ²(m - 1), independently."""
    s = rng.normal(BATCH * mean, np.sqrt(BATCH) * sd, (experiments, LOOKS))
    q = sd**2 * rng.chisquare(BATCH - 1, (experiments, LOOKS))
    return s.cumsum(axis=1), (q + s**2 / BATCH).cumsum(axis=1)


def _welch_p(n: int, sc: np.ndarray, qc: np.ndarray, st: np.ndarray, qt: np.ndarray) -> np.ndarray:
    vc = (qc - sc**2 / n) / (n - 1)
    vt = (qt - st**2 / n) / (n - 1)
    se2 = (vc + vt) / n
    t = (st - sc) / n / np.sqrt(se2)
    df = se2**2 / ((vc / n) ** 2 / (n - 1) + (vt / n) ** 2 / (n - 1))
    return np.asarray(2 * special.stdtr(df, -np.abs(t)))


def test_aa_peeking_keeps_the_false_positive_rate_below_alpha() -> None:
    """2,000 A/A experiments, each looked at 20 times: the running minimum of the always-valid
    p-value drops below alpha in at most alpha (+ Monte Carlo margin) of them. The naive fixed-horizon
    p-value, peeked at the same looks, does not: that shows the simulation can tell."""
    rng = np.random.default_rng(2024)
    sc, qc = _normal_looks(rng, 10.0, 2.0, EXPERIMENTS)
    st, qt = _normal_looks(rng, 10.0, 2.0, EXPERIMENTS)
    ever = np.zeros(EXPERIMENTS, dtype=bool)
    naive = np.zeros(EXPERIMENTS, dtype=bool)
    for look in range(LOOKS):
        n = BATCH * (look + 1)
        naive |= _welch_p(n, sc[:, look], qc[:, look], st[:, look], qt[:, look]) < ALPHA
        for e in np.flatnonzero(~ever):
            p = msprt_p_value(
                Moments(n, sc[e, look], qc[e, look]), Moments(n, st[e, look], qt[e, look])
            )
            assert p is not None
            ever[e] = p < ALPHA  # running minimum below alpha ⇔ some look below alpha
    assert ever.mean() <= 0.06
    assert naive.mean() > 0.15


def test_aa_bernoulli_data() -> None:
    rng = np.random.default_rng(7)
    experiments, batch = 600, 500
    conv = rng.binomial(batch, 0.1, (2, experiments, LOOKS)).cumsum(axis=2)
    rejected = 0
    for e in range(experiments):
        running = 1.0
        for look in range(LOOKS):
            n, c, t = batch * (look + 1), float(conv[0, e, look]), float(conv[1, e, look])
            p = msprt_p_value(Moments(n, c, c), Moments(n, t, t))
            assert p is not None
            running = min(running, p)
        rejected += running < ALPHA
    assert rejected / experiments <= 0.06


def test_power_grows_with_sample_size() -> None:
    rng = np.random.default_rng(8)
    power = []
    for n in (2_000, 8_000, 32_000):
        c = rng.binomial(n, 0.10, 400)
        t = rng.binomial(n, 0.11, 400)
        hits = 0
        for cc, tt in zip(c.tolist(), t.tolist(), strict=True):
            p = msprt_p_value(Moments(n, cc, cc), Moments(n, tt, tt))
            assert p is not None
            hits += p < ALPHA
        power.append(hits / 400)
    assert power[0] < power[1] < power[2]
    assert power[2] > 0.7


def test_running_minimum_never_increases() -> None:
    rng = np.random.default_rng(9)
    sc, qc = _normal_looks(rng, 5.0, 1.0, 1)
    st, qt = _normal_looks(rng, 5.03, 1.0, 1)
    running: float | None = None
    history, single = [], []
    for look in range(LOOKS):
        n = BATCH * (look + 1)
        control, treatment = (
            Moments(n, sc[0, look], qc[0, look]),
            Moments(n, st[0, look], qt[0, look]),
        )
        res = sequential(control, {"b": treatment}, previous_p_values={"b": running})
        running = res.comparisons["b"].p_value
        assert running is not None
        assert res.comparisons["b"].always_valid_p_value == running
        history.append(running)
        p = msprt_p_value(control, treatment)
        assert p is not None
        single.append(p)
    assert all(b <= a for a, b in itertools.pairwise(history))
    assert history == pytest.approx(np.minimum.accumulate(single).tolist())
    assert any(b > a for a, b in itertools.pairwise(single))  # single looks do rise


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_single_look_is_on_the_fixed_horizon_scale(n: int) -> None:
    """One look is more conservative than the fixed-horizon test, but not wildly: at alpha = 0.05 a
    z of 2 is not enough, a z of 4.5 is, and the always-valid p never undercuts the fixed one."""
    control = Moments(n, 0.1 * n, 0.1 * n)
    se = np.sqrt(2 * 0.09 / n)
    for z, rejects in ((0.5, False), (2.0, False), (4.5, True)):
        conv = 0.1 * n + z * se * n
        treatment = Moments(n, conv, conv)
        p_av = msprt_p_value(control, treatment)
        p_fixed = frequentist(control, {"b": treatment}).comparisons["b"].p_value
        assert p_av is not None
        assert p_fixed is not None
        assert p_av >= p_fixed
        assert (p_av < ALPHA) == rejects
    assert msprt_p_value(control, control) == 1.0


def test_confidence_sequence_is_dual_to_the_p_value() -> None:
    control = Moments(8_000, 800, 800)
    for conv in (800, 840, 870, 900, 960):
        treatment = Moments(8_000, conv, conv)
        p = msprt_p_value(control, treatment)
        cs = confidence_sequence(control, treatment, relative=False)
        assert p is not None
        assert cs is not None
        assert (cs[0] > 0 or cs[1] < 0) == (p < ALPHA)
        fixed = frequentist(control, {"b": treatment}).comparisons["b"]
        assert fixed.difference_ci_low is not None
        assert fixed.difference_ci_high is not None
        assert cs[0] < fixed.difference_ci_low < fixed.difference_ci_high < cs[1]


def test_confidence_sequence_covers_the_true_difference_at_every_look() -> None:
    rng = np.random.default_rng(10)
    experiments = 600
    sc, qc = _normal_looks(rng, 10.0, 2.0, experiments)
    st, qt = _normal_looks(rng, 10.2, 2.0, experiments)
    missed = np.zeros(experiments, dtype=bool)
    for look in range(LOOKS):
        n = BATCH * (look + 1)
        for e in np.flatnonzero(~missed):
            cs = confidence_sequence(
                Moments(n, sc[e, look], qc[e, look]),
                Moments(n, st[e, look], qt[e, look]),
                relative=False,
            )
            assert cs is not None
            missed[e] = not cs[0] <= 0.2 <= cs[1]
    assert missed.mean() <= 0.06


def test_mixing_variance_is_a_parameter() -> None:
    control, treatment = Moments(5_000, 500, 500), Moments(5_000, 560, 560)
    default = msprt_p_value(control, treatment)
    # default τ² = mixing_sd² · (s²_c + s²_t) / 2 with mixing_sd = 0.05
    mean_var = (0.1 * 0.9 + 0.112 * 0.888) / 2 * 5_000 / 4_999
    assert default == pytest.approx(msprt_p_value(control, treatment, tau2=0.05**2 * mean_var))
    assert msprt_p_value(control, treatment, tau2=1e-5) != default
    with pytest.raises(ValueError, match="tau2"):
        msprt_p_value(control, treatment, tau2=0.0)


def test_holm_and_degenerate_arms() -> None:
    control = Moments(10_000, 1_000, 1_000)
    res = sequential(
        control,
        {"b": Moments(10_000, 1_150, 1_150), "c": Moments(1, 1, 1)},
        previous_p_values={"c": 0.2},
    )
    b, c = res.comparisons["b"], res.comparisons["c"]
    # c has no new p-value, but its running minimum still counts in Holm's family
    assert b.p_value is not None
    assert b.p_value_adjusted == pytest.approx(2 * b.p_value)
    assert c.p_value == 0.2
    assert c.p_value_adjusted == 0.2
    assert c.reason == "c: fewer than 2 exposed units"
    assert b.significant
    assert b.ci_low is not None
    assert b.ci_low > 0
