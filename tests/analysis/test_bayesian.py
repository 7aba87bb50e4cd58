"""Bayesian engine against Monte Carlo draws from the arms' Gaussian posteriors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from control_plane.analysis import Comparison, Moments, bayesian

CONTROL = Moments(5_000, 500, 500)  # 10.0%
TREATMENT = Moments(5_000, 530, 530)  # 10.6%
DRAWS = 400_000


def _arm_draws(m: Moments, rng: np.random.Generator) -> np.ndarray:
    mean = m.sum_y / m.n
    var = (m.sum_y2 - m.sum_y**2 / m.n) / (m.n - 1)
    return rng.normal(mean, np.sqrt(var / m.n), DRAWS)


def _run(**kwargs: object) -> Comparison:
    return bayesian(CONTROL, {"b": TREATMENT}, **kwargs).comparisons["b"]  # type: ignore[arg-type]


def test_flat_prior_matches_monte_carlo() -> None:
    rng = np.random.default_rng(5)
    mu_c, mu_t = _arm_draws(CONTROL, rng), _arm_draws(TREATMENT, rng)
    lift = mu_t / mu_c - 1
    c = _run(prior_sd=None)
    assert c.chance_to_beat_control is not None
    assert 0.7 < c.chance_to_beat_control < 0.95  # a case where the answer is not trivially 0 or 1
    assert c.chance_to_beat_control == pytest.approx(float(np.mean(mu_t > mu_c)), abs=0.01)
    assert c.expected_loss == pytest.approx(100 * float(np.mean(np.maximum(0, -lift))), rel=0.05)
    assert c.expected_loss_control == pytest.approx(
        100 * float(np.mean(np.maximum(0, lift))), rel=0.05
    )
    assert c.uplift == pytest.approx(100 * float(lift.mean()), abs=0.1)
    low, high = np.quantile(lift, [0.025, 0.975])
    assert c.ci_low == pytest.approx(100 * low, abs=0.3)
    assert c.ci_high == pytest.approx(100 * high, abs=0.3)
    assert not c.significant
    assert c.p_value is None
    assert c.interval == "credible"


@pytest.mark.parametrize(("prior_mean", "shift"), [(0.0, -1), (0.1, 1)])
def test_informative_prior_matches_importance_weighted_monte_carlo(
    prior_mean: float, shift: int
) -> None:
    """Re-weighting flat-prior draws by the prior density of log(mu_t/mu_c) gives the posterior."""
    rng = np.random.default_rng(6)
    mu_c, mu_t = _arm_draws(CONTROL, rng), _arm_draws(TREATMENT, rng)
    prior_sd = 0.03
    w = stats.norm.pdf(np.log(mu_t / mu_c), prior_mean, prior_sd)
    mc_chance = float(np.sum(w * (mu_t > mu_c)) / np.sum(w))
    c = _run(prior_sd=prior_sd, prior_mean=prior_mean)
    flat = _run(prior_sd=None)
    assert c.chance_to_beat_control is not None
    assert flat.chance_to_beat_control is not None
    assert c.chance_to_beat_control == pytest.approx(mc_chance, abs=0.01)
    # the prior pulls towards its mean: down from 0.84 towards 0.5, or up towards 1
    assert shift * (c.chance_to_beat_control - flat.chance_to_beat_control) > 0.05
    lift = mu_t / mu_c - 1
    assert c.uplift == pytest.approx(100 * float(np.sum(w * lift) / np.sum(w)), abs=0.1)


def test_default_prior_is_weak() -> None:
    default, flat = _run(), _run(prior_sd=None)
    assert default.chance_to_beat_control is not None
    assert flat.chance_to_beat_control is not None
    assert default.chance_to_beat_control == pytest.approx(flat.chance_to_beat_control, abs=0.01)


def test_direction_lower_mirrors_chance_and_loss() -> None:
    up, down = _run(), _run(direction="lower")
    assert up.chance_to_beat_control is not None
    assert down.chance_to_beat_control is not None
    assert down.chance_to_beat_control == pytest.approx(1 - up.chance_to_beat_control)
    assert down.expected_loss == pytest.approx(up.expected_loss_control)
    assert down.expected_loss_control == pytest.approx(up.expected_loss)
    assert (down.ci_low, down.ci_high) == (up.ci_low, up.ci_high)


def test_clear_winner_is_significant() -> None:
    c = bayesian(Moments(5_000, 500, 500), {"b": Moments(5_000, 620, 620)}).comparisons["b"]
    assert c.chance_to_beat_control is not None
    assert c.chance_to_beat_control > 0.99
    assert c.significant
    assert c.ci_low is not None
    assert c.ci_low > 0
    assert c.expected_loss is not None
    assert c.expected_loss < 0.01


@pytest.mark.parametrize(
    ("control", "treatment"),
    [
        (Moments(100, 0, 0), Moments(100, 5, 5)),
        (Moments(100, 5, 5), Moments(100, 0, 0)),
        (Moments(1, 1, 1), Moments(100, 5, 5)),
        (Moments(100, 100, 100), Moments(100, 100, 100)),
    ],
)
def test_degenerate_inputs_do_not_raise(control: Moments, treatment: Moments) -> None:
    c = bayesian(control, {"b": treatment}).comparisons["b"]
    assert c.reason is not None
    assert c.chance_to_beat_control is None
    assert not c.significant


def test_invalid_prior_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="prior_sd"):
        _run(prior_sd=0.0)
