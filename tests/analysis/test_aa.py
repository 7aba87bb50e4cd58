"""A/A simulations through the full decision path (``analyse`` then ``decide_winner``): with no
true difference every engine declares a winner in at most alpha of experiments (plus Monte
Carlo margin), the sequential one even when looked at ten times with its running state kept."""

from __future__ import annotations

import numpy as np
import pytest

from control_plane.analysis import Moments, SequentialBounds, analyse, decide_winner

ALPHA = 0.05
EXPERIMENTS = 2_000
# 2,000 experiments: the binomial sd of a rate of 0.05 is 0.0049; allow two of them
MARGIN = 0.01


def _arm(rng: np.random.Generator, n: int, kind: str) -> Moments:
    if kind == "conversion":
        c = float(rng.binomial(n, 0.1))
        return Moments(n, c, c)
    values = rng.lognormal(3.0, 1.0, n) - 15.0  # skewed, with negative values
    return Moments(n, float(values.sum()), float(values @ values))


@pytest.mark.parametrize("kind", ["conversion", "revenue"])
@pytest.mark.parametrize("engine", ["frequentist", "bayesian"])
def test_aa_fixed_horizon_engines_stay_at_alpha(engine: str, kind: str) -> None:
    rng = np.random.default_rng(11)
    decided = 0
    for _ in range(EXPERIMENTS):
        result = analyse(
            _arm(rng, 1_000, kind),
            {"treatment": _arm(rng, 1_000, kind)},
            engine=engine,  # type: ignore[arg-type]
            alpha=ALPHA,
        )
        decided += decide_winner(result.comparisons)[0] is not None
    assert decided / EXPERIMENTS <= ALPHA + MARGIN


def test_aa_sequential_with_ten_looks_stays_at_alpha() -> None:
    """Ten looks of 500 units per arm each, the running p-value and intersected sequences
    carried from look to look as the service does: a winner at any look counts."""
    rng = np.random.default_rng(12)
    ever = 0
    for _ in range(EXPERIMENTS // 2):
        control, treatment = Moments(0, 0.0, 0.0), Moments(0, 0.0, 0.0)
        p_values: dict[str, float | None] = {}
        bounds: dict[str, SequentialBounds] = {}
        for _look in range(10):
            control = control + _arm(rng, 500, "conversion")
            treatment = treatment + _arm(rng, 500, "conversion")
            result = analyse(
                control,
                {"treatment": treatment},
                engine="sequential",
                previous_p_values=p_values,
                previous_bounds=bounds,
            )
            p_values = {"treatment": result.comparisons["treatment"].always_valid_p_value}
            bounds = dict(result.sequential_bounds)
            if decide_winner(result.comparisons)[0] is not None:
                ever += 1
                break
    assert ever / (EXPERIMENTS // 2) <= ALPHA
