"""Experiment analysis: pure statistics on per-arm sufficient statistics.

SQL reduces every arm to :class:`Moments` (n, Σy, Σy², and Σz, Σz², Σyz for ratio metrics,
Σx, Σx², Σxy for CUPED); the functions here only finish the arithmetic. No I/O, no clock, no
logging; degenerate data yields ``None`` fields and a ``reason``, never an exception (invalid
*parameters* such as alpha outside (0, 1) raise ``ValueError``). Formulas: docs/statistics.md.
"""

from __future__ import annotations

from collections.abc import Mapping

from .arms import Arm
from .bayesian import DEFAULT_PRIOR_SD, bayesian
from .cuped import CupedInfo, cuped_adjust
from .decision import MIN_UNITS_PER_ARM, Verdict, VerdictState, decide_winner, effect_sign, verdict
from .frequentist import frequentist
from .moments import ArmSummary, Moments, combine, moments_from_values, summarise
from .multiplicity import holm, holm_by_key
from .power import planned_units_per_arm, units_needed
from .results import (
    AnalysisResult,
    Comparison,
    Direction,
    Engine,
    IntervalKind,
    SequentialBounds,
)
from .sequential import (
    DEFAULT_MIXING_SD,
    confidence_sequence,
    confidence_sequence_halfwidth,
    msprt_p_value,
    msprt_p_value_from_stats,
    sequential,
)
from .srm import SRM_THRESHOLD, SrmResult, srm_check

__all__ = [
    "DEFAULT_MIXING_SD",
    "DEFAULT_PRIOR_SD",
    "MIN_UNITS_PER_ARM",
    "SRM_THRESHOLD",
    "AnalysisResult",
    "Arm",
    "ArmSummary",
    "Comparison",
    "CupedInfo",
    "Direction",
    "Engine",
    "IntervalKind",
    "Moments",
    "SequentialBounds",
    "SrmResult",
    "Verdict",
    "VerdictState",
    "analyse",
    "bayesian",
    "combine",
    "confidence_sequence",
    "confidence_sequence_halfwidth",
    "cuped_adjust",
    "decide_winner",
    "effect_sign",
    "frequentist",
    "holm",
    "holm_by_key",
    "moments_from_values",
    "msprt_p_value",
    "msprt_p_value_from_stats",
    "planned_units_per_arm",
    "sequential",
    "srm_check",
    "summarise",
    "units_needed",
    "verdict",
]


def analyse(
    control: Arm,
    treatments: Mapping[str, Arm],
    *,
    engine: Engine = "frequentist",
    ratio: bool = False,
    alpha: float = 0.05,
    cuped: bool = False,
    direction: Direction = "higher",
    prior_mean: float = 0.0,
    prior_sd: float | None = DEFAULT_PRIOR_SD,
    mixing_sd: float = DEFAULT_MIXING_SD,
    tau2: float | None = None,
    previous_p_values: Mapping[str, float | None] | None = None,
    previous_bounds: Mapping[str, SequentialBounds] | None = None,
) -> AnalysisResult:
    """Run the named engine; engine-specific settings are ignored by the other engines."""
    if engine == "frequentist":
        return frequentist(control, treatments, ratio=ratio, alpha=alpha, cuped=cuped)
    if engine == "bayesian":
        return bayesian(
            control,
            treatments,
            ratio=ratio,
            alpha=alpha,
            cuped=cuped,
            direction=direction,
            prior_mean=prior_mean,
            prior_sd=prior_sd,
        )
    if engine == "sequential":
        return sequential(
            control,
            treatments,
            ratio=ratio,
            alpha=alpha,
            cuped=cuped,
            mixing_sd=mixing_sd,
            tau2=tau2,
            previous_p_values=previous_p_values,
            previous_bounds=previous_bounds,
        )
    raise ValueError(f"unknown stats engine {engine!r}")
