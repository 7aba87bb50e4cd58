"""Sequential engine: always-valid p-values and confidence sequences by the mixture SPRT.

Johari, Koomen, Pekelis, Walsh, "Always Valid Inference: Continuous Monitoring of A/B Tests",
Operations Research 70(3), 2022 (arXiv:1512.04922). With θ̂ the difference in means and V its
(Welch) variance se²_t + se²_c, the normal likelihood ratio of θ against 0, mixed over θ ~ N(0, τ²),
is
    Λ = sqrt(V / (V + τ²)) · exp( τ² θ̂² / (2 V (V + τ²)) ),
and p = min(1, 1/Λ) is an always-valid p-value at this look: P(∃ look: p ≤ alpha) ≤ alpha under H0, for
any (data-dependent) stopping rule, as long as the caller keeps the running minimum over looks
(``previous_p_values``). Inverting the test gives the confidence sequence
    θ̂ ± sqrt( V (V + τ²)/τ² · ( log((V + τ²)/V) + 2 log(1/alpha) ) ),
which covers the true difference at every look simultaneously with probability ≥ 1 - alpha. The
relative-uplift sequence uses the same formula on δ̂ = m_t/m_c - 1 with its delta-method
variance and mixing sd τ/|m_c|.

τ is scale-dependent; by default it is ``mixing_sd`` (0.05) standard deviations of the metric's
per-unit value, τ² = mixing_sd² · (s²_t + s²_c)/2 (unadjusted variances) — the boundary (relative to
the fixed-n one) is then tightest around n ≈ 20/mixing_sd² = 8,000 units per arm (V/τ² ≈ 0.1). Pass ``tau2`` to fix τ²
in the metric's squared units instead (fixing it before the experiment starts is the textbook
setting; the plug-in default is asymptotically equivalent).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from typing import Any

from .arms import Arm, Estimate, PairStats, baseline_notes, pairs, prepare
from .frequentist import check_alpha
from .moments import Moments
from .results import AnalysisResult, SequentialBounds, build_comparisons, guarded

DEFAULT_MIXING_SD = 0.05

NO_OVERLAP = (
    "the always-valid p-value rejects 'no difference', but the confidence sequences of earlier "
    "looks and this one do not overlap (the effect changed over time): no direction can be "
    "claimed, so this is not significant"
)


def _intersect(
    low: float, high: float, previous: tuple[float | None, float | None]
) -> tuple[float, float]:
    before_low, before_high = previous
    return (
        low if before_low is None else max(low, before_low),
        high if before_high is None else min(high, before_high),
    )


def msprt_p_value_from_stats(difference: float, variance: float, tau2: float) -> float:
    """1/Λ capped at 1, for one look: θ̂ = ``difference``, V = ``variance``, mixing var τ²."""
    total = variance + tau2
    log_lr = 0.5 * math.log(variance / total) + tau2 * difference * difference / (
        2.0 * variance * total
    )
    return 1.0 if log_lr <= 0 else math.exp(-log_lr)


def confidence_sequence_halfwidth(variance: float, tau2: float, alpha: float) -> float:
    """Half-width of the (1 - alpha) mSPRT confidence sequence at variance V and mixing var τ²."""
    total = variance + tau2
    return math.sqrt(variance * total / tau2 * (math.log(total / variance) - 2.0 * math.log(alpha)))


def _tau2(raw_t: Estimate | str, raw_c: Estimate | str, pair: PairStats, mixing_sd: float) -> float:
    vt = raw_t.variance if isinstance(raw_t, Estimate) else pair.treatment.variance
    vc = raw_c.variance if isinstance(raw_c, Estimate) else pair.control.variance
    return mixing_sd * mixing_sd * (vt + vc) / 2.0


def _compare(
    pair: PairStats,
    tau2: float,
    *,
    alpha: float,
    previous: float | None,
    bounds: SequentialBounds,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "engine": "sequential",
        "interval": "confidence_sequence",
        "test": "msprt",
        "difference": pair.difference,
        "p_value": previous,
        "always_valid_p_value": previous,
    }
    if pair.variance <= 0:
        out["reason"] = "zero variance in both arms"
        return out
    if not tau2 > 0:
        out["reason"] = "mixing variance tau2 is zero"
        return out
    p = msprt_p_value_from_stats(pair.difference, pair.variance, tau2)
    if previous is not None:
        p = min(p, previous)
    half = confidence_sequence_halfwidth(pair.variance, tau2, alpha)
    se = math.sqrt(pair.variance)
    d_low, d_high = _intersect(
        pair.difference - half,
        pair.difference + half,
        (bounds.difference_low, bounds.difference_high),
    )
    out |= {
        "std_error": se,
        "statistic": pair.difference / se,
        "p_value": p,
        "always_valid_p_value": p,
        "bounds": SequentialBounds(bounds.ci_low, bounds.ci_high, d_low, d_high),
    }
    if d_low > d_high:
        out["reason"] = NO_OVERLAP
        return out
    out |= {"difference_ci_low": d_low, "difference_ci_high": d_high}
    if pair.relative is None or not pair.relative_variance:
        out["reason"] = "control mean is zero: relative uplift is undefined"
        return out
    mc2 = pair.control.mean * pair.control.mean
    rel_half = confidence_sequence_halfwidth(pair.relative_variance, tau2 / mc2, alpha)
    low, high = _intersect(
        100.0 * (pair.relative - rel_half),
        100.0 * (pair.relative + rel_half),
        (bounds.ci_low, bounds.ci_high),
    )
    out["bounds"] = SequentialBounds(low, high, d_low, d_high)
    out["uplift"] = 100.0 * pair.relative
    if low > high:
        out["reason"] = NO_OVERLAP
        return out
    out |= {"ci_low": low, "ci_high": high}
    return out


def _check(alpha: float, mixing_sd: float, tau2: float | None) -> None:
    check_alpha(alpha)
    if not mixing_sd > 0:
        raise ValueError(f"mixing_sd must be positive, got {mixing_sd!r}")
    if tau2 is not None and not tau2 > 0:
        raise ValueError(f"tau2 must be positive or None, got {tau2!r}")


def sequential(
    control: Arm,
    treatments: Mapping[str, Arm],
    *,
    ratio: bool = False,
    alpha: float = 0.05,
    cuped: bool = False,
    mixing_sd: float = DEFAULT_MIXING_SD,
    tau2: float | None = None,
    previous_p_values: Mapping[str, float | None] | None = None,
    previous_bounds: Mapping[str, SequentialBounds] | None = None,
) -> AnalysisResult:
    """mSPRT always-valid p-values (running minimum with ``previous_p_values``), Holm across
    arms, and confidence sequences for the relative uplift (``ci_*``) and the difference
    (``difference_ci_*``), intersected with the earlier looks' (``previous_bounds``; store
    ``result.sequential_bounds`` for the next look). A comparison is significant only when the
    intersection lies wholly on one side of 0, which is also the direction it reports. See the
    module docstring for the formulas and the reference."""
    _check(alpha, mixing_sd, tau2)
    prepared = prepare(control, treatments, ratio=ratio, cuped=cuped)
    previous = previous_p_values or {}
    earlier = previous_bounds or {}
    kept: dict[str, SequentialBounds] = {}
    fields: dict[str, dict[str, Any]] = {}
    for key, (pair, reduction) in pairs(prepared).items():
        prev = previous.get(key)
        if isinstance(pair, str):
            fields[key] = {
                "engine": "sequential",
                "interval": "confidence_sequence",
                "p_value": prev,
                "always_valid_p_value": prev,
                "reason": pair,
            }
            continue
        t2 = (
            tau2
            if tau2 is not None
            else _tau2(prepared.raw_estimates[key], prepared.raw_control_estimate, pair, mixing_sd)
        )
        fields[key] = guarded(
            partial(
                _compare,
                pair,
                t2,
                alpha=alpha,
                previous=prev,
                bounds=earlier.get(key, SequentialBounds()),
            ),
            {
                "engine": "sequential",
                "interval": "confidence_sequence",
                "p_value": prev,
                "always_valid_p_value": prev,
            },
        )
        fields[key]["variance_reduction"] = reduction
        kept[key] = fields[key].pop("bounds", None) or earlier.get(key, SequentialBounds())
    return AnalysisResult(
        engine="sequential",
        alpha=alpha,
        ratio=ratio,
        control=prepared.control,
        treatments=prepared.treatments,
        comparisons=build_comparisons(fields, alpha=alpha, holm=True),
        cuped=prepared.cuped,
        notes=prepared.notes + baseline_notes(prepared),
        sequential_bounds=kept,
    )


def msprt_p_value(
    control: Moments,
    treatment: Moments,
    *,
    ratio: bool = False,
    cuped: bool = False,
    mixing_sd: float = DEFAULT_MIXING_SD,
    tau2: float | None = None,
) -> float | None:
    """The always-valid p-value of ONE look from the current cumulative moments (None if
    degenerate). Keep the running minimum across looks: that minimum is the valid p-value."""
    result = sequential(
        control, {"treatment": treatment}, ratio=ratio, cuped=cuped, mixing_sd=mixing_sd, tau2=tau2
    )
    return result.comparisons["treatment"].p_value


def confidence_sequence(
    control: Moments,
    treatment: Moments,
    *,
    ratio: bool = False,
    alpha: float = 0.05,
    cuped: bool = False,
    mixing_sd: float = DEFAULT_MIXING_SD,
    tau2: float | None = None,
    relative: bool = True,
) -> tuple[float, float] | None:
    """(low, high) of the 1 - alpha confidence sequence at this look: the relative uplift in percent
    (``relative=True``) or the absolute difference. Intersecting over looks stays valid."""
    c = sequential(
        control,
        {"treatment": treatment},
        ratio=ratio,
        alpha=alpha,
        cuped=cuped,
        mixing_sd=mixing_sd,
        tau2=tau2,
    ).comparisons["treatment"]
    low, high = (c.ci_low, c.ci_high) if relative else (c.difference_ci_low, c.difference_ci_high)
    return None if low is None or high is None else (low, high)
