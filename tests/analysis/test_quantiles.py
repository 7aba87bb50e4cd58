"""Quantile metrics: the estimate, its standard error from the bracketing order statistics
(Woodruff's interval with the delta method's variance for units with several events), and the
coverage of the interval for a difference of quantiles in A/A simulations."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from control_plane.analysis import analyse
from control_plane.analysis.moments import ArmSummary
from control_plane.analysis.quantiles import (
    ClusterSums,
    bracket_ranks,
    nearest_rank,
    quantile_summary,
    rank_z,
)

Units = tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], int]
"""An arm's event values, the unit each belongs to, and how many units were exposed."""


def summary_of(units: Units, p: float) -> ArmSummary:
    """What the SQL computes for an arm, computed here from its units' event values."""
    values, unit_of, exposed = units
    ordered = np.sort(values)
    events = values.size
    estimate = float(np.quantile(values, p, method="inverted_cdf"))
    assert estimate == ordered[nearest_rank(p, events) - 1]
    n = np.bincount(unit_of, minlength=exposed).astype(float)
    s = np.bincount(unit_of, weights=(values <= estimate).astype(float), minlength=exposed)
    s, n = s[n > 0], n[n > 0]
    sums = ClusterSums(
        s.size, float(s.sum()), float(s @ s), float(n.sum()), float(n @ n), float(s @ n)
    )
    ranks = bracket_ranks(p, events, sums)
    assert ranks is not None
    return quantile_summary(exposed, estimate, ordered[ranks[0] - 1], ordered[ranks[1] - 1])


def arm(rng: np.random.Generator, units: int, events: str) -> Units:
    """Page load times: a unit's own speed (so its events are alike) times each load's noise;
    ``one`` event per unit, or ``several`` (Poisson, mean 2.5: some units with none)."""
    speed = rng.lognormal(6.0, 0.5, units)
    counts = np.ones(units, dtype=int) if events == "one" else rng.poisson(2.5, units)
    unit_of = np.repeat(np.arange(units), counts)
    return rng.lognormal(0.0, 0.4, unit_of.size) * speed[unit_of], unit_of, units


def independent(units: Units) -> Units:
    """The same events as if each came from a unit of its own."""
    values = units[0]
    return values, np.arange(values.size), values.size


def test_one_event_per_unit_is_the_binomial_interval() -> None:
    """With one event per unit σ² = p(1-p): the ranks are the classic distribution-free ones."""
    rng = np.random.default_rng(1)
    values = rng.normal(100, 10, 4_000)
    p = 0.9
    s = (values <= np.sort(values)[nearest_rank(p, 4_000) - 1]).astype(float)
    sums = ClusterSums(4_000, float(s.sum()), float(s @ s), 4_000.0, 4_000.0, float(s.sum()))
    half = rank_z() * math.sqrt(s.var(ddof=1)) / math.sqrt(4_000)
    assert math.isclose(s.var(ddof=1), p * (1 - p), rel_tol=0.01)
    assert bracket_ranks(p, 4_000, sums) == (
        math.ceil((p - half) * 4_000),
        math.ceil((p + half) * 4_000),
    )


def test_the_estimate_and_its_standard_error() -> None:
    rng = np.random.default_rng(2)
    units = arm(rng, 2_000, "several")
    summary = summary_of(units, 0.9)
    assert summary.mean == float(np.quantile(units[0], 0.9, method="inverted_cdf"))
    assert summary.n == 2_000
    assert summary.std_error is not None
    assert summary.variance == pytest.approx(summary.std_error**2 * 2_000, rel=1e-12)
    # the clustered standard error is wider than the one that takes events as independent
    naive = summary_of(independent(units), 0.9).std_error
    assert naive is not None
    assert summary.std_error > 1.1 * naive


@pytest.mark.parametrize("events", ["one", "several"])
@pytest.mark.parametrize("p", [0.5, 0.9, 0.99])
def test_a_a_coverage_and_false_positives(p: float, events: str) -> None:
    """2,000 A/A experiments of 1,000 units per arm (4,000 for p99: its tail needs events): the
    95 % interval of the difference of quantiles covers 0 in 95 % ± 1.5 % of them, and the
    p-value is below 0.05 exactly as often as it does not cover."""
    rng = np.random.default_rng(int(p * 1000) + (7 if events == "one" else 0))
    size = 4_000 if p > 0.95 else 1_000
    runs, covered, rejected = 2_000, 0, 0
    for _ in range(runs):
        control, treatment = arm(rng, size, events), arm(rng, size, events)
        c = analyse(summary_of(control, p), {"b": summary_of(treatment, p)}, ratio=True)
        comparison = c.comparisons["b"]
        assert comparison.difference_ci_low is not None
        assert comparison.difference_ci_high is not None
        assert comparison.p_value is not None
        covered += comparison.difference_ci_low <= 0 <= comparison.difference_ci_high
        rejected += comparison.p_value < 0.05
    assert 0.935 <= covered / runs <= 0.965, covered / runs
    assert rejected == runs - covered


def test_a_difference_is_found_and_the_interval_holds_it() -> None:
    """Treatment loads 10 % slower: its p90 is 10 % higher, found, and inside the interval."""
    rng = np.random.default_rng(3)
    control = arm(rng, 5_000, "several")
    values, unit_of, exposed = arm(rng, 5_000, "several")
    treatment = (values * 1.1, unit_of, exposed)
    result = analyse(summary_of(control, 0.9), {"b": summary_of(treatment, 0.9)}, ratio=True)
    comparison = result.comparisons["b"]
    assert comparison.significant
    assert comparison.uplift is not None
    assert comparison.ci_low is not None
    assert comparison.ci_high is not None
    assert comparison.ci_low < 10 < comparison.ci_high
    se = math.hypot(result.control.std_error or 0, result.treatments["b"].std_error or 0)
    z = (comparison.difference or 0) / se
    assert comparison.p_value == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-12)
