"""Bayesian engine: a Gaussian posterior of the log lift, reported as a relative uplift.

Each arm's mean is approximately normal, m_k ~ N(mu_k, se_k^2) (CLT; delta method for ratio
metrics; CUPED-adjusted when asked). The effect is the log lift l = log(mu_t / mu_c) (the relative
uplift is e^l - 1, and l ~ e^l - 1 for small effects). By the delta method
    l_hat = log(m_t / m_c) ~ N(l, s^2),   s^2 = se_t^2 / m_t^2 + se_c^2 / m_c^2.
Prior: l ~ N(m0, s0^2) (default m0 = 0, s0 = 0.3: a lift of about +-30% is one prior standard
deviation, weakly informative; ``prior_sd=None`` is the flat prior). Conjugate posterior:
    precision = 1/s^2 + 1/s0^2,   v = 1/precision,   mu = v (l_hat/s^2 + m0/s0^2).
With a flat prior P(l > 0) matches P(mu_t > mu_c) under the arms' own Gaussians far better than
a Gaussian on e^l - 1 (the approach of GrowthBook's first Bayesian engine). Reported, in percent
of the control mean where relative (direction ``higher``; mirrored for ``lower``):
    chance_to_beat_control = P(l > 0) = Phi(mu/sqrt(v))
    uplift                 = E[e^l - 1] = e^(mu + v/2) - 1
    credible interval      = e^(mu -+ Phi^-1(1 - alpha/2) sqrt(v)) - 1
    expected_loss          = E[max(0, 1 - e^l)]  (risk of shipping the treatment)
    expected_loss_control  = E[max(0, e^l - 1)]  (risk of keeping control)
Both arm means must be positive. ``significant`` means the credible interval excludes 0 (chance
above 1 - alpha/2 or below alpha/2); no multiplicity correction. Closed forms: docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from typing import Any

from . import distributions
from .arms import Arm, PairStats, pairs, prepare
from .frequentist import check_alpha
from .results import AnalysisResult, Direction, build_comparisons, guarded

DEFAULT_PRIOR_SD = 0.3


def lognormal_losses(mu: float, sd: float) -> tuple[float, float]:
    """(E[max(0, 1 - e^l)], E[max(0, e^l - 1)]) for l ~ N(mu, sd^2), sd > 0."""
    z = mu / sd
    scale = math.exp(mu + sd * sd / 2.0)
    below = distributions.ndtr(-z) - scale * distributions.ndtr(-z - sd)
    above = scale * distributions.ndtr(z + sd) - distributions.ndtr(z)
    return max(below, 0.0), max(above, 0.0)


def _compare(
    pair: PairStats,
    *,
    alpha: float,
    direction: Direction,
    prior_mean: float,
    prior_sd: float | None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "engine": "bayesian",
        "interval": "credible",
        "test": "bayesian",
        "difference": pair.difference,
        "std_error": math.sqrt(pair.variance),
    }
    mt, mc = pair.treatment.mean, pair.control.mean
    if not (mt > 0 and mc > 0):
        out["reason"] = "the bayesian engine needs positive means in both arms"
        return out
    s2 = pair.treatment.se2 / (mt * mt) + pair.control.se2 / (mc * mc)
    if s2 <= 0:
        out["reason"] = "zero variance in both arms"
        return out
    precision = 1.0 / s2
    weighted = math.log(mt / mc) * precision
    if prior_sd is not None:
        precision += 1.0 / (prior_sd * prior_sd)
        weighted += prior_mean / (prior_sd * prior_sd)
    sd = math.sqrt(1.0 / precision)
    mu = weighted / precision
    q = distributions.ndtri(1.0 - alpha / 2.0)
    p_up = distributions.ndtr(mu / sd)
    below, above = lognormal_losses(mu, sd)
    higher = direction == "higher"
    out |= {
        "uplift": 100.0 * math.expm1(mu + sd * sd / 2.0),
        "ci_low": 100.0 * math.expm1(mu - q * sd),
        "ci_high": 100.0 * math.expm1(mu + q * sd),
        "chance_to_beat_control": p_up if higher else 1.0 - p_up,
        "expected_loss": 100.0 * (below if higher else above),
        "expected_loss_control": 100.0 * (above if higher else below),
        "significant": abs(mu) > q * sd,
    }
    return out


def bayesian(
    control: Arm,
    treatments: Mapping[str, Arm],
    *,
    ratio: bool = False,
    alpha: float = 0.05,
    cuped: bool = False,
    direction: Direction = "higher",
    prior_mean: float = 0.0,
    prior_sd: float | None = DEFAULT_PRIOR_SD,
) -> AnalysisResult:
    """Chance to beat control, expected loss and a credible interval for the relative uplift.

    ``prior_mean``/``prior_sd`` are the normal prior on the log lift (0.3 ~ 30%); ``prior_sd=None``
    is flat. ``direction`` orients the chance and the losses. ``p_value`` stays ``None``.
    """
    check_alpha(alpha)
    if prior_sd is not None and not prior_sd > 0:
        raise ValueError(f"prior_sd must be positive or None, got {prior_sd!r}")
    prepared = prepare(control, treatments, ratio=ratio, cuped=cuped)
    fields: dict[str, dict[str, Any]] = {}
    for key, (pair, reduction) in pairs(prepared).items():
        if isinstance(pair, str):
            fields[key] = {"engine": "bayesian", "interval": "credible", "reason": pair}
            continue
        fields[key] = guarded(
            partial(
                _compare,
                pair,
                alpha=alpha,
                direction=direction,
                prior_mean=prior_mean,
                prior_sd=prior_sd,
            ),
            {"engine": "bayesian", "interval": "credible"},
        )
        fields[key]["variance_reduction"] = reduction
    return AnalysisResult(
        engine="bayesian",
        alpha=alpha,
        ratio=ratio,
        control=prepared.control,
        treatments=prepared.treatments,
        comparisons=build_comparisons(fields, alpha=alpha, holm=False),
        cuped=prepared.cuped,
        notes=prepared.notes,
    )
