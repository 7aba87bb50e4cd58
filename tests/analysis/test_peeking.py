"""Issue #35 point 6: the verdict survives peeking. 200 A/A experiments, each watched at 10
looks: how many are ever declared a winner by each engine's verdict (:func:`verdict`, what the
API's ``winner``, the console's banner and the webhook all read), printed beside the same count
for a naive fixed-horizon reading (:func:`decide_winner` on the engine's comparisons at every
look).

The looks are evenly spaced up to the planned sample of the experiment's power settings (a +5 %
effect, power 0.8, alpha 0.05 at the arms' current variances: about 6,280 units per arm at a
50 % conversion rate), as a team reading the results every day until the plan would. A
fixed-horizon engine may name a winner only at the planned sample, so its verdict is one test at
level alpha; the sequential engine may name one at any look. Sufficient statistics are drawn
directly (a look adds a binomial draw per arm), so the simulation runs in a few seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

from control_plane.analysis import (
    MIN_UNITS_PER_ARM,
    Moments,
    SequentialBounds,
    analyse,
    decide_winner,
    planned_units_per_arm,
    verdict,
)

ALPHA = 0.05
EXPERIMENTS = 200
LOOKS = 10
RATE = 0.5
STEP = 650  # units per arm added between looks: the tenth look (6,500) passes the plan
TARGET_EFFECT = 0.05


def _watch(engine: str, seed: int) -> tuple[int, int]:
    """(experiments the verdict ever names a winner in, experiments a naive reading of the
    same comparisons at every look ever names one in)."""
    rng = np.random.default_rng(seed)
    by_verdict = by_naive = 0
    for _ in range(EXPERIMENTS):
        control, treatment = Moments(0, 0.0, 0.0), Moments(0, 0.0, 0.0)
        p_values: dict[str, float | None] = {}
        bounds: dict[str, SequentialBounds] = {}
        named = naive = False
        for _look in range(LOOKS):
            c, t = float(rng.binomial(STEP, RATE)), float(rng.binomial(STEP, RATE))
            control = control + Moments(STEP, c, c)
            treatment = treatment + Moments(STEP, t, t)
            result = analyse(
                control,
                {"treatment": treatment},
                engine=engine,  # type: ignore[arg-type]
                alpha=ALPHA,
                previous_p_values=p_values,
                previous_bounds=bounds,
            )
            if engine == "sequential":  # the running state the service keeps between looks
                p_values = {"treatment": result.comparisons["treatment"].always_valid_p_value}
                bounds = dict(result.sequential_bounds)
            naive = naive or decide_winner(result.comparisons)[0] is not None
            decided = verdict(
                result.comparisons,
                engine=engine,  # type: ignore[arg-type]
                exposed={"control": control.n, "treatment": treatment.n},
                planned_per_arm=planned_units_per_arm(result, TARGET_EFFECT, alpha=ALPHA),
            )
            named = named or decided.winner is not None
        by_verdict += named
        by_naive += naive
    return by_verdict, by_naive


@pytest.mark.parametrize("engine", ["frequentist", "bayesian", "sequential"])
def test_aa_watched_at_ten_looks_names_a_false_winner_at_most_alpha(engine: str) -> None:
    by_verdict, by_naive = _watch(engine, seed=35)
    print(
        f"\n{engine}: {by_verdict}/{EXPERIMENTS} A/A experiments ever named a winner by the "
        f"verdict; a naive fixed-horizon reading of every look: {by_naive}/{EXPERIMENTS}"
    )
    assert by_verdict <= ALPHA * EXPERIMENTS
    if engine != "sequential":
        # the simulation does peek: read naively, the same looks name far more false winners
        assert by_naive > 2 * ALPHA * EXPERIMENTS


def test_the_plan_of_the_simulation_is_reached_at_the_last_look_only() -> None:
    """The looks are what the docstring says: the plan lies between the ninth and tenth."""
    n = STEP * LOOKS
    half = Moments(n, n * RATE, n * RATE)
    planned = planned_units_per_arm(analyse(half, {"treatment": half}), TARGET_EFFECT, alpha=ALPHA)
    assert planned is not None
    assert STEP * (LOOKS - 1) < max(planned, MIN_UNITS_PER_ARM) <= STEP * LOOKS
