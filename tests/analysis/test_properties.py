"""Whatever the sufficient statistics, the engines return results instead of raising."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from control_plane.analysis import (
    Comparison,
    Moments,
    analyse,
    decide_winner,
    moments_from_values,
    srm_check,
)

sums = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False) | st.sampled_from(
    [0.0, 1.0, float("nan"), float("inf")]
)
moments = st.builds(
    Moments,
    n=st.integers(min_value=-1, max_value=10_000),
    sum_y=sums,
    sum_y2=st.floats(min_value=0, max_value=1e9),
    sum_z=sums,
    sum_z2=st.floats(min_value=0, max_value=1e9),
    sum_yz=sums,
    sum_x=sums,
    sum_x2=st.floats(min_value=0, max_value=1e9),
    sum_xy=sums,
)


@settings(max_examples=200, deadline=None)
@given(
    control=moments,
    treatments=st.dictionaries(st.sampled_from(["b", "c", "d"]), moments, min_size=1),
    engine=st.sampled_from(["frequentist", "bayesian", "sequential"]),
    ratio=st.booleans(),
    cuped=st.booleans(),
)
def test_engines_never_raise(
    control: Moments, treatments: dict[str, Moments], engine: str, ratio: bool, cuped: bool
) -> None:
    res = analyse(control, treatments, engine=engine, ratio=ratio, cuped=cuped)  # type: ignore[arg-type]
    assert set(res.comparisons) == set(treatments)
    for c in res.comparisons.values():
        for value in (c.p_value, c.p_value_adjusted, c.chance_to_beat_control):
            assert value is None or 0.0 <= value <= 1.0 or math.isnan(value)
        if c.significant:
            assert c.reason is None or "uplift" in c.reason
    decide_winner(res.comparisons)


@settings(max_examples=100, deadline=None)
@given(
    counts=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 10**7), min_size=0),
    weights=st.none() | st.dictionaries(st.sampled_from("abcdef"), st.floats(0, 100)),
)
def test_srm_never_raises(counts: dict[str, int], weights: dict[str, float] | None) -> None:
    res = srm_check(counts, weights)
    assert res.p_value is None or 0.0 <= res.p_value <= 1.0


unit_values = st.lists(
    st.one_of(
        st.integers(min_value=-1000, max_value=1000),
        st.sampled_from([0, 0, 0, 1, -1, 2**53 - 1, -(2**53) + 1, 2**63 - 1]),
    ),
    min_size=0,
    max_size=60,
)


def _intervals_side(c: Comparison) -> set[int]:
    sides = set()
    for low, high in ((c.ci_low, c.ci_high), (c.difference_ci_low, c.difference_ci_high)):
        if low is not None and high is not None:
            sides.add(1 if low > 0 else -1 if high < 0 else 0)
    return sides


@settings(max_examples=300, deadline=None)
@given(
    control=unit_values,
    treatments=st.dictionaries(st.sampled_from(["b", "c"]), unit_values, min_size=1),
    engine=st.sampled_from(["frequentist", "bayesian", "sequential"]),
    direction=st.sampled_from(["higher", "lower"]),
    ratio=st.booleans(),
)
def test_significance_and_winners_agree_with_their_intervals(
    control: list[int],
    treatments: dict[str, list[int]],
    engine: str,
    direction: str,
    ratio: bool,
) -> None:
    """Random arms of per-unit values (negative, zero and huge included): a significant
    comparison has every interval on one side of 0, and a winner's intervals point its way."""

    def moments(values: list[int]) -> Moments:
        z = [1.0 + (i % 3) for i in range(len(values))] if ratio else None
        return moments_from_values([float(v) for v in values], z)

    res = analyse(
        moments(control),
        {k: moments(v) for k, v in treatments.items()},
        engine=engine,  # type: ignore[arg-type]
        ratio=ratio,
        direction=direction,  # type: ignore[arg-type]
    )
    for c in res.comparisons.values():
        if c.significant:
            assert _intervals_side(c) in ({1}, {-1}), c
    winner, _ = decide_winner(res.comparisons, primary_direction=direction)  # type: ignore[arg-type]
    good = 1 if direction == "higher" else -1
    if winner is not None and winner != "control":
        assert _intervals_side(res.comparisons[winner]) == {good}
    if winner == "control":
        for c in res.comparisons.values():
            assert _intervals_side(c) == {-good}
