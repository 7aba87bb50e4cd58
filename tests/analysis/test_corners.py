"""The corners of issue 11 in the pure engines: negative and zero baselines, peeking with a
changing sign, zero-variance arms. Each case names the right winner (or none), and the direction
of every decision comes from the interval that makes it significant."""

from __future__ import annotations

import pytest

from control_plane.analysis import (
    Comparison,
    analyse,
    decide_winner,
    moments_from_values,
    sequential,
)

REFUNDS_CONTROL = moments_from_values([-500] * 150 + [100] * 50)  # mean -350
REFUNDS_TREATMENT = moments_from_values([-500] * 100 + [100] * 100)  # mean -200
# the same arms ten times larger: always-valid inference needs more data to decide
REFUNDS_CONTROL_10 = moments_from_values([-500] * 1500 + [100] * 500)
REFUNDS_TREATMENT_10 = moments_from_values([-500] * 1000 + [100] * 1000)


def excludes_zero_in_direction(c: Comparison, sign: int) -> bool:
    intervals = [(c.ci_low, c.ci_high), (c.difference_ci_low, c.difference_ci_high)]
    known = [(lo, hi) for lo, hi in intervals if lo is not None and hi is not None]
    assert known
    return all(lo > 0 if sign > 0 else hi < 0 for lo, hi in known)


@pytest.mark.parametrize("engine", ["frequentist", "sequential"])
def test_negative_control_mean_keeps_the_sign_of_the_effect(engine: str) -> None:
    """Refunds: the treatment loses less money (-200 vs -350 per unit): it is better, so the
    uplift is positive (relative to |control mean|, as gbstats does) and the treatment wins."""
    control, treatment = (
        (REFUNDS_CONTROL, REFUNDS_TREATMENT)
        if engine == "frequentist"
        else (REFUNDS_CONTROL_10, REFUNDS_TREATMENT_10)
    )
    result = analyse(control, {"treatment": treatment}, engine=engine)  # type: ignore[arg-type]
    c = result.comparisons["treatment"]
    assert c.uplift == pytest.approx(100 * 150 / 350)
    assert c.difference == pytest.approx(150)
    assert c.ci_low is not None
    assert c.ci_high is not None
    assert c.uplift is not None
    assert c.ci_low < c.uplift < c.ci_high
    assert c.significant
    assert excludes_zero_in_direction(c, +1)
    assert decide_winner(result.comparisons)[0] == "treatment"
    assert decide_winner(result.comparisons, primary_direction="lower")[0] == "control"
    assert any("negative" in note for note in result.notes)


def test_negative_control_mean_with_little_data_is_never_a_win_for_control() -> None:
    """The issue's 200 units per arm under the sequential engine: not yet significant, and the
    interval leans the treatment's way; certainly no win for control."""
    result = analyse(REFUNDS_CONTROL, {"treatment": REFUNDS_TREATMENT}, engine="sequential")
    c = result.comparisons["treatment"]
    assert c.uplift is not None
    assert c.uplift > 0
    assert decide_winner(result.comparisons)[0] != "control"


def test_negative_control_mean_is_refused_by_the_bayesian_engine_with_a_note() -> None:
    c = analyse(REFUNDS_CONTROL, {"treatment": REFUNDS_TREATMENT}, engine="bayesian").comparisons[
        "treatment"
    ]
    assert c.uplift is None
    assert not c.significant
    assert c.reason == "the bayesian engine needs positive means in both arms"


def _conversions(converted: int, n: int) -> list[int]:
    return [1] * converted + [0] * (n - converted)


def test_sequential_direction_comes_from_the_intersected_confidence_sequence() -> None:
    """First look: control 300/3000, treatment 150/3000 (significantly worse). Second look adds
    3,000 per arm (control +300, treatment +460): today's sequence contains 0 and points the
    other way. The running minimum p still rejects 'no difference', but the sequences of the two
    looks do not overlap, so no direction can be claimed: no winner, and never 'treatment'."""
    first = sequential(
        moments_from_values(_conversions(300, 3000)),
        {"treatment": moments_from_values(_conversions(150, 3000))},
    )
    c1 = first.comparisons["treatment"]
    assert c1.significant
    assert excludes_zero_in_direction(c1, -1)
    assert decide_winner(first.comparisons)[0] == "control"
    bounds = first.sequential_bounds
    second = sequential(
        moments_from_values(_conversions(600, 6000)),
        {"treatment": moments_from_values(_conversions(610, 6000))},
        previous_p_values={"treatment": c1.p_value},
        previous_bounds=bounds,
    )
    c2 = second.comparisons["treatment"]
    assert c2.p_value == c1.p_value  # the running minimum
    assert not c2.significant
    assert c2.reason is not None
    assert "do not overlap" in c2.reason
    assert decide_winner(second.comparisons)[0] is None


def test_sequential_keeps_a_decision_whose_later_sequences_still_agree() -> None:
    first = sequential(
        moments_from_values(_conversions(300, 3000)),
        {"treatment": moments_from_values(_conversions(150, 3000))},
    )
    c1 = first.comparisons["treatment"]
    second = sequential(
        moments_from_values(_conversions(600, 6000)),
        {"treatment": moments_from_values(_conversions(420, 6000))},
        previous_p_values={"treatment": c1.p_value},
        previous_bounds=first.sequential_bounds,
    )
    c2 = second.comparisons["treatment"]
    assert c2.significant
    assert c2.ci_high is not None
    assert c2.ci_high < 0
    assert c1.ci_high is not None
    assert c2.ci_high <= c1.ci_high  # the intersection only shrinks
    assert decide_winner(second.comparisons)[0] == "control"


@pytest.mark.parametrize(("engine", "significant"), [("frequentist", True), ("sequential", False)])
def test_zero_conversions_in_a_treatment_give_an_interval_with_width(
    engine: str, significant: bool
) -> None:
    """20/200 against 0/200: the interval has width and agrees with the decision (Welch rejects;
    one always-valid look of 200 units does not), and no note blames the control."""
    result = analyse(
        moments_from_values(_conversions(20, 200)),
        {"treatment": moments_from_values(_conversions(0, 200))},
        engine=engine,  # type: ignore[arg-type]
    )
    c = result.comparisons["treatment"]
    assert c.uplift == pytest.approx(-100.0)
    assert c.ci_low is not None
    assert c.ci_high is not None
    assert c.ci_high - c.ci_low > 10
    assert c.reason is None
    assert c.significant is significant
    if significant:
        assert excludes_zero_in_direction(c, -1)
        assert decide_winner(result.comparisons)[0] == "control"
    else:
        assert c.ci_low < 0 < c.ci_high
        assert decide_winner(result.comparisons)[0] is None


def test_frequentist_significance_agrees_with_its_interval() -> None:
    """10 % against 10.88 % with 10,000 units per arm: Welch p = 0.042 < alpha, but the relative
    interval (which also carries the control mean's noise) reaches below 0: not significant, and
    the note says why."""
    c = analyse(
        moments_from_values(_conversions(1_000, 10_000)),
        {"b": moments_from_values(_conversions(1_088, 10_000))},
    ).comparisons["b"]
    assert c.p_value == pytest.approx(0.0419, abs=1e-4)
    assert c.ci_low is not None
    assert c.ci_low < 0
    assert c.difference_ci_low is not None
    assert c.difference_ci_low > 0
    assert not c.significant
    assert c.reason is not None
    assert "interval contains 0" in c.reason
