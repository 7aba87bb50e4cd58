"""Which arm wins, from comparisons already computed (the caller decides whether to show it).

A treatment wins when its primary-metric comparison is significant in the metric's direction
and no guardrail comparison of that arm is significant in the harmful direction. Among several
such arms the one with the best primary uplift wins. Control wins when every treatment is
significantly worse than control on the primary metric. Otherwise there is no winner.
"""

from __future__ import annotations

from collections.abc import Mapping

from .results import Comparison, Direction, interval_sign

CONTROL = "control"


def effect_sign(c: Comparison) -> int:
    """+1 / -1 / 0: the side of 0 the comparison's intervals lie on; without intervals, the sign
    of the uplift, or of the difference if the uplift is undefined."""
    sign = interval_sign(
        {
            "ci_low": c.ci_low,
            "ci_high": c.ci_high,
            "difference_ci_low": c.difference_ci_low,
            "difference_ci_high": c.difference_ci_high,
        }
    )
    if sign or c.ci_low is not None or c.difference_ci_low is not None:
        return sign
    value = c.uplift if c.uplift is not None else c.difference
    if value is None or value == 0:
        return 0
    return 1 if value > 0 else -1


def _good(c: Comparison, direction: Direction) -> int:
    return effect_sign(c) * (1 if direction == "higher" else -1)


def decide_winner(
    primary: Mapping[str, Comparison],
    guardrails: Mapping[str, Mapping[str, Comparison]] | None = None,
    directions: Mapping[str, Direction] | None = None,
    *,
    primary_direction: Direction = "higher",
    control_key: str = CONTROL,
) -> tuple[str | None, str]:
    """(winning arm key or None, a one-line reason).

    ``primary`` maps treatment arm → its comparison with control on the primary metric;
    ``guardrails`` maps guardrail metric key → (arm → comparison); ``directions`` maps guardrail
    metric key → ``higher``/``lower`` (default ``higher``).
    """
    guardrails = guardrails or {}
    directions = directions or {}
    if not primary:
        return None, "no treatment to compare"
    better = [a for a, c in primary.items() if c.significant and _good(c, primary_direction) > 0]
    harmed: dict[str, list[str]] = {}
    for arm in better:
        for metric, comps in guardrails.items():
            g = comps.get(arm)
            if g is not None and g.significant and _good(g, directions.get(metric, "higher")) < 0:
                harmed.setdefault(arm, []).append(metric)
    eligible = [a for a in better if a not in harmed]
    if eligible:
        sign = 1.0 if primary_direction == "higher" else -1.0

        def rank(arm: str) -> tuple[float, float]:
            c = primary[arm]
            effect = c.uplift if c.uplift is not None else (c.difference or 0.0)
            return (-sign * effect, c.p_value_adjusted if c.p_value_adjusted is not None else 1.0)

        arm = min(eligible, key=rank)
        c = primary[arm]
        effect = f"{c.uplift:+.2f}%" if c.uplift is not None else f"{c.difference:+.4g}"
        return arm, (
            f"'{arm}' is significantly better than control on the primary metric ({effect}) "
            "and harms no guardrail"
        )
    if better:
        detail = "; ".join(f"'{a}' harms {', '.join(sorted(m))}" for a, m in harmed.items())
        return None, f"significantly better on the primary metric but guardrails harmed: {detail}"
    if all(c.significant and _good(c, primary_direction) < 0 for c in primary.values()):
        return (
            control_key,
            "every treatment is significantly worse than control on the primary metric",
        )
    return None, "no treatment is significantly better than control on the primary metric"
