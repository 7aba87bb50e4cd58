"""Quantile metrics: the p-th quantile of an event value over an arm's events (p50, p90, p99 of a
page's load time, of an order's basket size), and its standard error, from which every engine
compares two arms as it compares means.

**Estimate.** The nearest-rank sample quantile over the arm's N events with a value,
ξ̂ = x_(k) with k = ⌈p·N⌉ (numpy's ``inverted_cdf``; the same definition as percentile capping).

**Standard error.** A unit's events are correlated and the unit is what was randomised, so the
textbook binomial interval for a quantile is too narrow when units send several events. With
S_i the number of unit i's events at or below ξ̂ and N_i its number of events, the empirical
distribution function at ξ̂ is a ratio of per-unit sums, F̂ = ΣS_i / ΣN_i, and the delta method
(Deng, Knoblich, Lu, "Applying the Delta Method in Metric Analytics", KDD 2018, §4.3) gives

    Var(F̂) ≈ sigma² / m,     sigma² = Var(S_i - p N_i) / N̄²

over the m units with events (N̄ = ΣN_i / m; with one event per unit sigma² = p(1 - p), the binomial
case). Inverting that interval for F (Woodruff, JASA 1952) gives the quantile's interval as two
order statistics, at the ranks of p ∓ z sigma/√m, and its width gives the standard error without
estimating a density:

    se(ξ̂) = (x_(k_hi) - x_(k_lo)) / (2 z)

with z = Φ⁻¹(0.95) ≈ 1.645: the order statistics of a 90 % interval for F. (They are always
these, whatever alpha the results report: the spread they measure is a property of the data.
Which ones was chosen by simulation: farther ones, z = 1.96, read the quantile function's
curvature into the width, and in the tail of a skewed value with few events there — p99 of
1,000 load times — the 95 % interval covered 97-98 %; nearer ones, z = 1, are fewer ranks apart
and so noisier, and covered 93-95 %; z = 1.645 covered 94.3-95.8 % in every case and seed tried.)

Two arms' estimates are independent, so the difference of quantiles is normal with variance
se²_t + se²_c; the engines run on (ξ̂, se²) exactly as on a mean and its squared standard error,
with normal (not Student) quantiles. In 2,000 A/A simulations per case
(``tests/analysis/test_quantiles.py``) the 95 % interval of the difference covers 0 at
95 % ± 1.5 % for p50, p90 and p99, with one and with several events per unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import distributions
from .moments import ArmSummary, sample_cov, sample_var


def rank_z() -> float:
    """z of the bracketing ranks: a 90 % interval for F at ξ̂."""
    return distributions.ndtri(0.95)


@dataclass(frozen=True, slots=True)
class ClusterSums:
    """Per arm, over the units with at least one event: how many (``m``) and the sums of S_i
    (events at or below the arm's estimate) and N_i (events), their squares and product."""

    m: int
    sum_s: float
    sum_s2: float
    sum_n: float
    sum_n2: float
    sum_sn: float


def nearest_rank(p: float, events: int) -> int:
    """k = ⌈p·N⌉ within [1, N] (rounded first, so that 0.9 · 10 is 9, not 10)."""
    return min(events, max(1, math.ceil(round(p * events, 9))))


def spread(p: float, sums: ClusterSums) -> float | None:
    """sigma = sqrt(Var(S_i - p N_i)) / N̄ of the delta method; None with fewer than 2 units."""
    if sums.m < 2 or sums.sum_n <= 0:
        return None
    # Var(S - pN) = Var(S) - 2p Cov(S, N) + p² Var(N)
    var_s = sample_var(sums.m, sums.sum_s, sums.sum_s2)
    var_n = sample_var(sums.m, sums.sum_n, sums.sum_n2)
    cov = sample_cov(sums.m, sums.sum_s, sums.sum_n, sums.sum_sn, sums.sum_s2, sums.sum_n2)
    var_d = max(var_s - 2.0 * p * cov + p * p * var_n, 0.0)
    mean_n = sums.sum_n / sums.m
    return math.sqrt(var_d) / mean_n


def bracket_ranks(p: float, events: int, sums: ClusterSums) -> tuple[int, int] | None:
    """The ranks of the order statistics bracketing ξ̂: those of p ∓ z sigma/√m, within [1, N]."""
    sigma = spread(p, sums)
    if sigma is None or events < 1:
        return None
    half = rank_z() * sigma / math.sqrt(sums.m)
    return nearest_rank(max(p - half, 0.0), events), nearest_rank(min(p + half, 1.0), events)


def quantile_summary(
    exposed: int, estimate: float | None, lower: float | None, upper: float | None
) -> ArmSummary:
    """The arm as the engines read it: ``mean`` the quantile ξ̂, ``std_error`` its standard
    error from the bracketing order statistics, ``variance`` = se² · n (so that
    ``std_error = sqrt(variance / n)`` holds, as for every metric)."""
    if estimate is None:
        return ArmSummary(exposed, None, None, None, reason="no events with a value")
    if lower is None or upper is None or exposed < 1:
        return ArmSummary(exposed, estimate, None, None, reason="fewer than 2 units with events")
    se = max(upper - lower, 0.0) / (2.0 * rank_z())
    return ArmSummary(exposed, estimate, se * se * exposed, se)
