"""Power and sample size for a two-sided comparison of two means (the fixed-horizon test).

With per-unit variances s²_c, s²_t, an absolute effect Δ and n units per arm, the test statistic
is approximately normal with mean Δ / sqrt((s²_c + s²_t)/n), so the power at level alpha is
    1 - beta = Φ( |Δ| / sqrt((s²_c + s²_t)/n) - z_{1-alpha/2} )
(ignoring the negligible chance of rejecting in the wrong direction), which gives
    n = (z_{1-alpha/2} + z_{1-beta})² (s²_c + s²_t) / Δ²               units per arm, and
    MDE = (z_{1-alpha/2} + z_{1-beta}) · sqrt(se²_c + se²_t)            at the current standard errors.
Relative effects are against |control mean|, as everywhere else. With several treatments the
level per comparison is alpha / (number of treatments): Holm's first step, so the plan holds for
the hardest comparison. Conversion: s² = p(1 - p) per arm, at the baseline and the treated rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import distributions
from .moments import ArmSummary
from .results import AnalysisResult

DEFAULT_POWER = 0.8


MAX_UNITS = 2**53 - 1
"""A plan needing more units than this (about 9e15 per arm) is no plan: refused, not computed."""


def _check(alpha: float, power: float, treatments: int) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    if treatments < 1:
        raise ValueError(f"treatments must be at least 1, got {treatments!r}")


def z_sum(alpha: float, power: float, treatments: int = 1) -> float:
    """z_{1 - alpha/(2m)} + z_{power} for m treatments."""
    _check(alpha, power, treatments)
    return distributions.ndtri(1.0 - alpha / (2.0 * treatments)) + distributions.ndtri(power)


def units_per_arm(
    variance_control: float,
    variance_treatment: float,
    effect: float,
    *,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
    treatments: int = 1,
) -> int | None:
    """Units per arm to detect the absolute ``effect`` (``None`` if it cannot be computed)."""
    z = z_sum(alpha, power, treatments)
    total = variance_control + variance_treatment
    if not (effect != 0 and math.isfinite(effect) and total > 0 and math.isfinite(total)):
        return None
    squared = effect * effect
    if squared == 0.0:  # an effect so small its square underflows: no finite sample detects it
        return None
    n = z * z * total / squared
    return max(2, math.ceil(n)) if math.isfinite(n) and n <= MAX_UNITS else None


def minimum_detectable_effect(
    std_error_difference: float,
    *,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
    treatments: int = 1,
) -> float:
    """The smallest absolute effect the test detects with ``power`` at this standard error."""
    return z_sum(alpha, power, treatments) * std_error_difference


@dataclass(frozen=True, slots=True)
class Plan:
    units_per_variant: int
    treatment_value: float  # the treated rate or mean the plan detects
    variance_control: float
    variance_treatment: float


def plan_conversion(
    baseline_rate: float,
    mde: float,
    *,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
    variants: int = 2,
) -> Plan:
    """Units per variant to detect a relative change ``mde`` of a conversion rate."""
    treated = baseline_rate * (1.0 + mde)
    if not (0.0 < baseline_rate < 1.0 and 0.0 < treated < 1.0 and mde != 0):
        raise ValueError("baseline rate and treated rate must lie in (0, 1), mde non-zero")
    vc = baseline_rate * (1.0 - baseline_rate)
    vt = treated * (1.0 - treated)
    n = units_per_arm(
        vc, vt, treated - baseline_rate, alpha=alpha, power=power, treatments=variants - 1
    )
    if n is None:
        raise ValueError("no finite sample size for these inputs")
    return Plan(n, treated, vc, vt)


def plan_mean(
    baseline_mean: float,
    baseline_sd: float,
    mde: float,
    *,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
    variants: int = 2,
) -> Plan:
    """Units per variant to detect a relative change ``mde`` of a mean (equal sd in both arms)."""
    if not (baseline_mean != 0 and baseline_sd > 0 and mde != 0):
        raise ValueError("baseline mean non-zero, sd positive, mde non-zero")
    effect = mde * abs(baseline_mean)
    v = baseline_sd * baseline_sd
    n = units_per_arm(v, v, effect, alpha=alpha, power=power, treatments=variants - 1)
    if n is None:
        raise ValueError("no finite sample size for these inputs")
    return Plan(n, baseline_mean + effect, v, v)


def _variance(summary: ArmSummary) -> float | None:
    v = summary.adjusted_variance if summary.adjusted_variance is not None else summary.variance
    return v if v is not None and math.isfinite(v) else None


def units_needed(
    result: AnalysisResult,
    target_effect: float,
    *,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
) -> dict[str, int | None]:
    """Per treatment of ``result``: the units per arm to detect the relative ``target_effect``
    (against |control mean|) with ``power`` at the arms' current (CUPED-adjusted when applied)
    variances, at alpha / (number of treatments); ``None`` where it cannot be computed (a zero
    control mean, no variance)."""
    treatments = max(1, len(result.comparisons))
    control = result.control
    mean_c = control.adjusted_mean if control.adjusted_mean is not None else control.mean
    var_c = _variance(control)
    out: dict[str, int | None] = {}
    for arm in result.comparisons:
        summary = result.treatments.get(arm)
        var_t = _variance(summary) if summary is not None else None
        if not mean_c or var_c is None or var_t is None:
            out[arm] = None
            continue
        effect = target_effect * abs(mean_c)
        out[arm] = units_per_arm(
            var_c, var_t, effect, alpha=alpha, power=power, treatments=treatments
        )
    return out


def planned_units_per_arm(
    result: AnalysisResult,
    target_effect: float,
    *,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
) -> int | None:
    """The planned sample of a fixed-horizon test: the units per arm the hardest comparison
    needs (:func:`units_needed`), ``None`` if no comparison's can be computed."""
    needed = [
        n
        for n in units_needed(result, target_effect, alpha=alpha, power=power).values()
        if n is not None
    ]
    return max(needed) if needed else None
