"""Result types shared by the engines (frozen; ``None`` where a number is undefined)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .cuped import CupedInfo
from .moments import ArmSummary
from .multiplicity import holm_by_key

Engine = Literal["frequentist", "bayesian", "sequential"]
Direction = Literal["higher", "lower"]
IntervalKind = Literal["confidence", "credible", "confidence_sequence"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """One treatment arm against control.

    Relative numbers (``uplift``, ``ci_low``, ``ci_high``, ``expected_loss*``) are in percent of
    the control mean; ``difference*`` are absolute, in the metric's units. ``ci_*`` is the
    engine's interval at level 1 - alpha (``interval`` says which kind). ``significant`` is two-sided
    and says nothing about direction: read the sign of ``uplift`` (or ``difference``).
    """

    arm: str
    engine: Engine
    uplift: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    interval: IntervalKind = "confidence"
    difference: float | None = None
    difference_ci_low: float | None = None
    difference_ci_high: float | None = None
    std_error: float | None = None
    test: Literal["welch_t", "z", "msprt", "bayesian"] | None = None
    statistic: float | None = None
    df: float | None = None
    p_value: float | None = None
    p_value_adjusted: float | None = None
    significant: bool = False
    # bayesian
    chance_to_beat_control: float | None = None
    expected_loss: float | None = None
    expected_loss_control: float | None = None
    # sequential
    always_valid_p_value: float | None = None
    # CUPED: 1 - Var(adjusted difference) / Var(unadjusted difference)
    variance_reduction: float | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SequentialBounds:
    """The running intersection of a comparison's confidence sequences over looks (relative in
    percent, and absolute); ``None`` is unbounded. A low above its high means the looks'
    sequences did not overlap."""

    ci_low: float | None = None
    ci_high: float | None = None
    difference_low: float | None = None
    difference_high: float | None = None


@dataclass(frozen=True, slots=True)
class AnalysisResult:
    """One metric of one experiment: per-arm summaries and per-treatment comparisons."""

    engine: Engine
    alpha: float
    ratio: bool
    control: ArmSummary
    treatments: Mapping[str, ArmSummary]
    comparisons: Mapping[str, Comparison]
    cuped: CupedInfo | None = None  # None when CUPED was not requested
    notes: tuple[str, ...] = field(default=())
    # sequential only: per arm, the intersection of the confidence sequences to keep for the
    # next look
    sequential_bounds: Mapping[str, SequentialBounds] = field(default_factory=dict)


def interval_sign(f: Mapping[str, Any]) -> int:
    """+1 / -1 when every interval reported (relative and absolute) lies wholly above / below 0,
    else 0 (an interval contains 0, they disagree, or there is none)."""
    signs = set()
    for low, high in (
        (f.get("ci_low"), f.get("ci_high")),
        (f.get("difference_ci_low"), f.get("difference_ci_high")),
    ):
        if low is None or high is None:
            continue
        signs.add(1 if low > 0 else -1 if high < 0 else 0)
    return signs.pop() if len(signs) == 1 else 0


INTERVAL_CONTAINS_ZERO = (
    "p < alpha, but the reported interval contains 0 (the relative interval also carries the "
    "control mean's noise): not significant"
)


def build_comparisons(
    fields_by_arm: Mapping[str, dict[str, Any]], *, alpha: float, holm: bool
) -> dict[str, Comparison]:
    """Construct each arm's :class:`Comparison` once (they are built on every look, so cheaply),
    after Holm's adjustment of the arms' ``p_value`` when ``holm`` is set.

    Whatever the engine, ``significant`` also needs every reported interval to exclude 0 on the
    same side, so the direction of a decision is always the direction of its interval."""
    if holm:
        adjusted = holm_by_key({k: f.get("p_value") for k, f in fields_by_arm.items()})
        for key, f in fields_by_arm.items():
            pa = adjusted[key]
            f["p_value_adjusted"] = pa
            f["significant"] = pa is not None and pa < alpha
    for f in fields_by_arm.values():
        if f.get("significant") and interval_sign(f) == 0:
            f["significant"] = False
            f["reason"] = f.get("reason") or INTERVAL_CONTAINS_ZERO
    return {key: Comparison(arm=key, **f) for key, f in fields_by_arm.items()}


DEGENERATE = "numerically degenerate input"


def guarded(compute: Callable[[], dict[str, Any]], fallback: dict[str, Any]) -> dict[str, Any]:
    """Run an engine's arithmetic; extreme inputs (overflow, underflow to zero, a non-finite
    result) give ``fallback`` with a reason instead of an exception or a NaN."""
    try:
        out = compute()
    except (ArithmeticError, ValueError):
        return fallback | {"reason": DEGENERATE}
    if any(isinstance(v, float) and not math.isfinite(v) for v in out.values()):
        return fallback | {"reason": DEGENERATE}
    return out
