"""Sample-ratio mismatch against scipy.stats.chisquare."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from control_plane.analysis import srm_check


@pytest.mark.parametrize(
    ("counts", "weights"),
    [
        ({"control": 5_000, "b": 5_100}, None),
        ({"control": 5_000, "b": 5_400}, None),
        ({"control": 1_000, "b": 2_100, "c": 950}, {"control": 25, "b": 50, "c": 25}),
        ({"control": 3_310, "b": 3_300, "c": 3_390}, {"control": 1, "b": 1, "c": 1}),
    ],
)
def test_srm_agrees_with_scipy_chisquare(
    counts: dict[str, int], weights: dict[str, float] | None
) -> None:
    w = weights or dict.fromkeys(counts, 1.0)
    total_w = sum(w.values())
    n = sum(counts.values())
    expected = [n * w[k] / total_w for k in counts]
    ref = stats.chisquare(list(counts.values()), expected)
    res = srm_check(counts, weights)
    assert res.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert res.p_value == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)
    assert res.flagged == (ref.pvalue < 0.001)


def test_srm_flags_a_broken_split_and_not_a_healthy_one() -> None:
    assert srm_check({"control": 5_000, "b": 5_400}).flagged
    assert not srm_check({"control": 5_000, "b": 5_050}).flagged


@pytest.mark.parametrize(
    ("counts", "weights", "reason"),
    [
        ({"control": 0, "b": 0}, None, "no exposed units"),
        ({"control": 10}, None, "fewer than 2 arms"),
        ({"control": 10, "b": 12}, {"control": 1.0}, "arms of counts and weights differ"),
    ],
)
def test_srm_degenerate_inputs_do_not_raise(
    counts: dict[str, int], weights: dict[str, float] | None, reason: str
) -> None:
    res = srm_check(counts, weights)
    assert res.p_value is None
    assert not res.flagged
    assert res.reason == reason


def test_srm_units_in_a_zero_weight_arm_are_flagged() -> None:
    res = srm_check({"control": 10, "b": 3}, {"control": 1.0, "b": 0.0})
    assert res.flagged
    assert res.statistic is not None
    assert math.isinf(res.statistic)
