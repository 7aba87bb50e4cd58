"""Sample-ratio mismatch: Pearson's chi-square goodness of fit of the exposed counts per arm
against the configured split.

    E_k = N · w_k / Σw,   χ² = Σ (O_k - E_k)² / E_k,   p = P(χ²_{k-1} ≥ χ²)

Flagged when p < 0.001 (a strict threshold: the check runs on every look of every experiment).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import distributions

SRM_THRESHOLD = 0.001


@dataclass(frozen=True, slots=True)
class SrmResult:
    statistic: float | None
    p_value: float | None
    flagged: bool
    expected: Mapping[str, float]
    threshold: float = SRM_THRESHOLD
    reason: str | None = None


def srm_check(
    counts: Mapping[str, int],
    weights: Mapping[str, float] | None = None,
    *,
    threshold: float = SRM_THRESHOLD,
) -> SrmResult:
    """Chi-square test of ``counts`` against ``weights`` (any positive scale; equal if None)."""
    if weights is None:
        weights = dict.fromkeys(counts, 1.0)
    if set(weights) != set(counts):
        return SrmResult(None, None, False, {}, threshold, "arms of counts and weights differ")
    total_w = float(sum(weights.values()))
    total_n = float(sum(counts.values()))
    if len(counts) < 2:
        return SrmResult(None, None, False, {}, threshold, "fewer than 2 arms")
    if any(w < 0 for w in weights.values()) or total_w <= 0:
        return SrmResult(None, None, False, {}, threshold, "weights must be non-negative")
    if any(c < 0 for c in counts.values()):
        return SrmResult(None, None, False, {}, threshold, "counts must be non-negative")
    expected = {k: total_n * weights[k] / total_w for k in counts}
    if total_n == 0:
        return SrmResult(None, None, False, expected, threshold, "no exposed units")
    if any(expected[k] == 0 and counts[k] > 0 for k in counts):
        return SrmResult(
            float("inf"), 0.0, True, expected, threshold, "units exposed in an arm of weight 0"
        )
    cells = [k for k in counts if expected[k] > 0]
    if len(cells) < 2:
        return SrmResult(None, None, False, expected, threshold, "fewer than 2 arms with weight")
    stat = sum((counts[k] - expected[k]) ** 2 / expected[k] for k in cells)
    p = distributions.chdtrc(len(cells) - 1, stat)
    return SrmResult(stat, p, p < threshold, expected, threshold)
