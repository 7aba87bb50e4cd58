"""Whatever the sufficient statistics, the engines return results instead of raising."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from control_plane.analysis import Moments, analyse, decide_winner, srm_check

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
