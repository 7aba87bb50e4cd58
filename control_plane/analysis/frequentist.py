"""Fixed-horizon frequentist engine: Welch's t-test and delta-method intervals.

Per-unit metrics: Welch's t on the difference of means,
    t = (ȳ_t - ȳ_c) / sqrt(s²_t/n_t + s²_c/n_c),
    df = (s²_t/n_t + s²_c/n_c)² / ((s²_t/n_t)²/(n_t-1) + (s²_c/n_c)²/(n_c-1)),
two-sided p = 2 · T_df(-|t|) — identical to ``scipy.stats.ttest_ind(equal_var=False)``.
Intervals use the t quantile with the same Welch df, so they match the test's scale.

Ratio metrics (mean = Σy/Σz per arm): the per-arm variance comes from the delta method (see
:mod:`.moments`), the difference is tested with a z-test and the intervals use the normal quantile.

The relative uplift r - 1 = m_t/m_c - 1 gets a delta-method interval (r - 1) ± q · SE(r), with
Var(r) ≈ se²_t/m_c² + m_t² se²_c/m_c⁴. With several treatments, Holm's adjusted p-values decide
``significant``; intervals are per comparison (not simultaneous).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from typing import Any

from . import distributions
from .arms import Arm, PairStats, baseline_notes, pairs, prepare
from .results import AnalysisResult, build_comparisons, guarded


def check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def welch_p_value(t: float, df: float) -> float:
    return 2.0 * distributions.stdtr(df, -abs(t))


def _compare(pair: PairStats, *, ratio: bool, alpha: float) -> dict[str, Any]:
    out: dict[str, Any] = {"engine": "frequentist", "difference": pair.difference}
    se = math.sqrt(pair.variance)
    if se == 0:
        out["reason"] = "zero variance in both arms"
        return out
    stat = pair.difference / se
    if ratio or pair.df is None:
        p = 2.0 * distributions.ndtr(-abs(stat))
        q = distributions.ndtri(1.0 - alpha / 2.0)
        out |= {"test": "z", "df": None}
    else:
        p = welch_p_value(stat, pair.df)
        q = distributions.stdtrit(pair.df, 1.0 - alpha / 2.0)
        out |= {"test": "welch_t", "df": pair.df}
    out |= {
        "difference_ci_low": pair.difference - q * se,
        "difference_ci_high": pair.difference + q * se,
        "std_error": se,
        "statistic": stat,
        "p_value": p,
    }
    if pair.relative is None or pair.relative_variance is None:
        out["reason"] = "control mean is zero: relative uplift is undefined"
        return out
    half = q * math.sqrt(pair.relative_variance)
    out |= {
        "uplift": 100.0 * pair.relative,
        "ci_low": 100.0 * (pair.relative - half),
        "ci_high": 100.0 * (pair.relative + half),
    }
    return out


def frequentist(
    control: Arm,
    treatments: Mapping[str, Arm],
    *,
    ratio: bool = False,
    alpha: float = 0.05,
    cuped: bool = False,
) -> AnalysisResult:
    """Welch t-test (z-test for ratio metrics), delta-method relative CI, Holm across arms."""
    check_alpha(alpha)
    prepared = prepare(control, treatments, ratio=ratio, cuped=cuped)
    fields: dict[str, dict[str, Any]] = {}
    for key, (pair, reduction) in pairs(prepared).items():
        if isinstance(pair, str):
            fields[key] = {"engine": "frequentist", "reason": pair}
        else:
            fields[key] = guarded(
                partial(_compare, pair, ratio=ratio, alpha=alpha), {"engine": "frequentist"}
            )
            fields[key]["variance_reduction"] = reduction
    return AnalysisResult(
        engine="frequentist",
        alpha=alpha,
        ratio=ratio,
        control=prepared.control,
        treatments=prepared.treatments,
        comparisons=build_comparisons(fields, alpha=alpha, holm=True),
        cuped=prepared.cuped,
        notes=prepared.notes + baseline_notes(prepared),
    )
