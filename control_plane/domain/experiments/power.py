"""Power planning: the units per variant a planned experiment needs (the checks of its inputs,
each naming its field, then the statistics of :mod:`control_plane.analysis.power`)."""

from __future__ import annotations

import math

from control_plane.analysis import power
from control_plane.domain import problems as base
from control_plane.domain.experiments import schemas as s
from control_plane.domain.experiments.canonical import MAX_VARIANTS, MIN_VARIANTS
from control_plane.errors import FieldError, invalid_many

MIN_RELATIVE_EFFECT = 1e-6
"""The smallest relative effect a plan or a power block is computed for (a ten-thousandth of a
percent): below it no sample of a size that can exist detects it."""


def _check_mean_baseline(problems: base.Problems, mean: float | None, sd: float | None) -> None:
    """A planned mean other than 0 (mde is relative to it) and its positive standard deviation
    per unit, each of a size within ``base.BASELINE_SIZE``, the sd at most
    ``base.MAX_COEFFICIENT_OF_VARIATION`` times the mean's size."""
    low, high = base.BASELINE_SIZE
    cv = base.MAX_COEFFICIENT_OF_VARIATION
    mean_ok = mean is not None and low <= abs(mean) <= high  # NaN compares False
    if mean is None:
        problems.add("baselineMean", "required with baselineSd")
    elif not mean_ok:
        problems.add(
            "baselineMean",
            f"a mean other than 0 (mde is relative to it), of a size from {low:g} to {high:g}",
        )
    if sd is None:
        problems.add("baselineSd", "a positive standard deviation per unit, required")
    elif not low <= sd <= high:
        problems.add("baselineSd", f"a standard deviation per unit: from {low:g} to {high:g}")
    elif mean_ok and mean is not None and sd > cv * abs(mean):
        problems.add("baselineSd", f"at most {cv:g} times the size of baselineMean")


def plan(body: s.PowerIn) -> s.PowerOut:
    """Units per variant for a planned experiment (conversion or mean metric)."""
    problems = base.Problems()
    by_rate = body.baseline_rate is not None
    by_mean = body.baseline_mean is not None or body.baseline_sd is not None
    if by_rate == by_mean:
        problems.add(
            "baselineRate", "give baselineRate (conversion) or baselineMean and baselineSd (mean)"
        )
    if body.baseline_rate is not None:
        base.check_between(
            problems, "baselineRate", body.baseline_rate, base.BASELINE_RATE, "a conversion rate"
        )
    if by_mean:
        _check_mean_baseline(problems, body.baseline_mean, body.baseline_sd)
    if not (math.isfinite(body.mde) and abs(body.mde) >= MIN_RELATIVE_EFFECT and body.mde > -1):
        problems.add(
            "mde",
            f"a relative effect such as 0.05 (+5 %), at least {MIN_RELATIVE_EFFECT:g} in size and above -1",
        )
    base.check_between(problems, "alpha", body.alpha, base.ALPHA, "the test's level, e.g. 0.05")
    base.check_between(problems, "power", body.power, base.POWER, "the chance to detect, e.g. 0.8")
    if not MIN_VARIANTS <= body.variants <= MAX_VARIANTS:
        problems.add("variants", f"{MIN_VARIANTS} to {MAX_VARIANTS} variants, control included")
    if (
        body.baseline_rate is not None
        and 0 < body.baseline_rate < 1
        and not 0 < body.baseline_rate * (1 + body.mde) < 1
    ):
        problems.add("mde", "the treated rate baselineRate * (1 + mde) must lie in (0, 1)")
    problems.raise_if_any()
    try:
        if body.baseline_rate is not None:
            result = power.plan_conversion(
                body.baseline_rate,
                body.mde,
                alpha=body.alpha,
                power=body.power,
                variants=body.variants,
            )
            metric = "conversion"
        else:
            assert body.baseline_mean is not None
            assert body.baseline_sd is not None
            result = power.plan_mean(
                body.baseline_mean,
                body.baseline_sd,
                body.mde,
                alpha=body.alpha,
                power=body.power,
                variants=body.variants,
            )
            metric = "mean"
    except (ValueError, ZeroDivisionError, OverflowError):
        # an effect too small for any finite sample (1e-300: the treated rate rounds to the
        # baseline, or the effect's square underflows), or one needing more than 2^53 units
        raise invalid_many(
            [
                FieldError(
                    "mde",
                    "too small to plan for: no finite sample of at most 2^53 units detects it",
                )
            ]
        ) from None
    treatments = body.variants - 1
    return s.PowerOut(
        metric=metric,
        units_per_variant=result.units_per_variant,
        total_units=result.units_per_variant * body.variants,
        variants=body.variants,
        mde=body.mde,
        treated_value=result.treatment_value,
        alpha=body.alpha,
        alpha_per_comparison=body.alpha / treatments,
        power=body.power,
        test="two-sided z-test on the difference of means; alpha split across treatments",
    )
