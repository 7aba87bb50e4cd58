"""What every engine needs before its own arithmetic: per-arm estimates (CUPED-adjusted when
asked) and, per treatment, the difference and the relative uplift with delta-method variances."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .cuped import CupedInfo, cuped_adjust
from .moments import ArmSummary, Moments, summarise

_CONTROL = object()

Arm = Moments | ArmSummary
"""An arm as an engine takes it: the sufficient statistics of a per-unit or ratio metric, or an
estimate already made with its standard error (a quantile's, :mod:`.quantiles`)."""

NOT_MEANS = (
    "CUPED is not applied to quantile metrics: it adjusts means by a per-unit covariate, and a "
    "quantile has no per-unit value to regress"
)


def _summary(arm: Arm, ratio: bool) -> ArmSummary:
    return arm if isinstance(arm, ArmSummary) else summarise(arm, ratio=ratio)


@dataclass(frozen=True, slots=True)
class Estimate:
    """An arm's mean and per-unit variance: the mean's squared standard error is variance / n."""

    mean: float
    variance: float
    n: int

    @property
    def se2(self) -> float:
        return self.variance / self.n


@dataclass(frozen=True, slots=True)
class Prepared:
    control: ArmSummary
    treatments: dict[str, ArmSummary]
    estimates: dict[str, Estimate | str]  # treatment key → estimate, or the reason there is none
    control_estimate: Estimate | str
    raw_estimates: dict[str, Estimate | str]
    raw_control_estimate: Estimate | str
    cuped: CupedInfo | None
    notes: tuple[str, ...]


def _estimate(summary: ArmSummary, adjusted: tuple[float, float] | None) -> Estimate | str:
    if summary.reason is not None or summary.mean is None or summary.variance is None:
        return summary.reason or "undefined"
    if adjusted is not None:
        return Estimate(adjusted[0], adjusted[1], summary.n)
    return Estimate(summary.mean, summary.variance, summary.n)


def prepare(control: Arm, treatments: Mapping[str, Arm], *, ratio: bool, cuped: bool) -> Prepared:
    summaries = {key: _summary(m, ratio) for key, m in treatments.items()}
    control_summary = _summary(control, ratio)
    info: CupedInfo | None = None
    adjusted: dict[object, tuple[float, float]] = {}
    notes: list[str] = []
    if cuped:
        keyed: dict[object, Moments] = {}
        for key, arm in [(_CONTROL, control), *treatments.items()]:
            if isinstance(arm, Moments):
                keyed[key] = arm
        if len(keyed) == 1 + len(treatments):
            info, adjusted = cuped_adjust(keyed, ratio=ratio)
        else:
            info = CupedInfo(False, reason=NOT_MEANS)
        if not info.applied and info.reason:
            notes.append(info.reason)
    raw = {k: _estimate(s, None) for k, s in summaries.items()}
    raw_control = _estimate(control_summary, None)
    if adjusted:
        summaries = {
            k: replace(s, adjusted_mean=adjusted[k][0], adjusted_variance=adjusted[k][1])
            if k in adjusted and s.reason is None
            else s
            for k, s in summaries.items()
        }
        if _CONTROL in adjusted and control_summary.reason is None:
            a = adjusted[_CONTROL]
            control_summary = replace(control_summary, adjusted_mean=a[0], adjusted_variance=a[1])
    return Prepared(
        control=control_summary,
        treatments=summaries,
        estimates={k: _estimate(s, adjusted.get(k)) for k, s in summaries.items()},
        control_estimate=_estimate(control_summary, adjusted.get(_CONTROL)),
        raw_estimates=raw,
        raw_control_estimate=raw_control,
        cuped=info,
        notes=tuple(notes),
    )


@dataclass(frozen=True, slots=True)
class PairStats:
    """Treatment minus control.

    ``variance`` = se²_t + se²_c (the Welch variance of the difference). The relative effect is
    taken against the size of the baseline, δ = (m_t - m_c) / |m_c| (= m_t/m_c - 1 for a positive
    control mean; gbstats' definition), so its sign is always the sign of the difference. Its
    variance is the delta method's, Var = se²_t / m_c² + m_t² se²_c / m_c⁴, but never less than
    the difference's own, (se²_t + se²_c) / m_c²: the relative interval is then never narrower
    than the test's scale, so it excludes 0 only when the difference does (and a zero-variance
    arm, e.g. no conversions, no longer gives a zero-width interval).
    """

    difference: float
    variance: float
    df: float | None  # Welch-Satterthwaite; None when a variance term is zero in both arms
    relative: float | None  # None when the control mean is zero
    relative_variance: float | None
    treatment: Estimate
    control: Estimate


def pair_stats(control: Estimate, treatment: Estimate) -> PairStats:
    a, b = treatment.se2, control.se2
    variance = a + b
    denom = (a * a / (treatment.n - 1) if a else 0.0) + (b * b / (control.n - 1) if b else 0.0)
    df = variance * variance / denom if denom > 0 else None
    relative = relative_variance = None
    mc = control.mean
    if mc != 0 and math.isfinite(1.0 / mc):
        mc2 = mc * mc
        relative = (treatment.mean - mc) / abs(mc)
        relative_variance = max(a / mc2 + treatment.mean**2 * b / (mc2 * mc2), variance / mc2)
    return PairStats(
        treatment.mean - control.mean, variance, df, relative, relative_variance, treatment, control
    )


def variance_reduction(raw: Estimate | str, raw_c: Estimate | str, pair: PairStats) -> float | None:
    """1 - Var(adjusted difference) / Var(raw difference) for one comparison."""
    if isinstance(raw, str) or isinstance(raw_c, str):
        return None
    raw_var = raw.se2 + raw_c.se2
    return 1.0 - pair.variance / raw_var if raw_var > 0 else None


def pairs(prepared: Prepared) -> dict[str, tuple[PairStats | str, float | None]]:
    """Per treatment: its :class:`PairStats` (or why there are none) and the CUPED reduction."""
    out: dict[str, tuple[PairStats | str, float | None]] = {}
    c = prepared.control_estimate
    for key, t in prepared.estimates.items():
        if isinstance(c, str):
            out[key] = (f"control: {c}", None)
        elif isinstance(t, str):
            out[key] = (f"{key}: {t}", None)
        else:
            try:
                pair = pair_stats(c, t)
            except ArithmeticError:
                out[key] = ("numerically degenerate input", None)
                continue
            if not (math.isfinite(pair.difference) and math.isfinite(pair.variance)):
                out[key] = ("numerically degenerate input", None)
                continue
            reduction = None
            if prepared.cuped is not None and prepared.cuped.applied:
                reduction = variance_reduction(
                    prepared.raw_estimates[key], prepared.raw_control_estimate, pair
                )
            out[key] = (pair, reduction)
    return out


NEGATIVE_BASELINE = (
    "the control mean is negative: relative effects are (treatment - control) / |control|, so a "
    "positive uplift means the treatment is higher"
)


def baseline_notes(prepared: Prepared) -> tuple[str, ...]:
    """Notes on the control's baseline that change how a relative number reads."""
    c = prepared.control_estimate
    if isinstance(c, Estimate) and c.mean < 0:
        return (NEGATIVE_BASELINE,)
    return ()
