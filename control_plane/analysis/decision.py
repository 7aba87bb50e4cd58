"""Which arm wins, from comparisons already computed, and when that may be said.

:func:`decide_winner` reads the comparisons: a treatment wins when its primary-metric comparison
is significant in the metric's direction and no guardrail comparison of that arm is significant
in the harmful direction. Among several such arms the one with the best primary uplift wins.
Control wins when every treatment is significantly worse than control on the primary metric.
Otherwise there is no winner.

:func:`verdict` is what the results say (the API's ``winner``, the console's banner, the
``experiment.winner`` webhook): it survives peeking. A fixed-horizon engine (frequentist,
bayesian) names a winner only once every arm has reached the planned sample; before that the
verdict is ``not-yet``. The sequential engine's intervals are valid at every look, so it may
name one at any look.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .results import Comparison, Direction, Engine, interval_sign

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


MIN_UNITS_PER_ARM = 1_000
"""A fixed-horizon verdict never comes before this many units in every arm, whatever the plan
(a plan of a few units for a metric with almost no noise, or none at all: a zero control mean)."""

VerdictState = Literal["winner", "not-yet", "no-winner"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the results conclude. ``winner`` is ``None`` unless ``state`` is ``winner``;
    ``planned_per_arm`` is the sample a fixed-horizon engine waits for (``None`` for the
    sequential engine), ``reached_per_arm`` the smallest arm's units, ``units_still_needed`` the
    units all arms together still lack (0 once reached). ``reading`` is what the comparisons
    say at this look (:func:`decide_winner`'s reason): before the plan, an estimate only."""

    state: VerdictState
    winner: str | None
    reason: str
    planned_per_arm: int | None
    reached_per_arm: int
    units_still_needed: int
    reading: str


def verdict(
    primary: Mapping[str, Comparison],
    guardrails: Mapping[str, Mapping[str, Comparison]] | None = None,
    directions: Mapping[str, Direction] | None = None,
    *,
    engine: Engine,
    exposed: Mapping[str, int],
    planned_per_arm: int | None,
    primary_direction: Direction = "higher",
    control_key: str = CONTROL,
    min_per_arm: int = MIN_UNITS_PER_ARM,
) -> Verdict:
    """The verdict of the comparisons at this look (arguments as :func:`decide_winner`).

    ``exposed`` maps every arm → its units; ``planned_per_arm`` is the plan from the power
    settings (``None`` if it cannot be computed), raised to ``min_per_arm``. A fixed-horizon
    engine's winner before every arm reached that is ``not-yet``: the reason says what the
    comparisons show so far and how many units are missing."""
    winner, why = decide_winner(
        primary,
        guardrails,
        directions,
        primary_direction=primary_direction,
        control_key=control_key,
    )
    reached = min(exposed.values(), default=0)
    if engine == "sequential":
        state: VerdictState = "winner" if winner is not None else "no-winner"
        return Verdict(state, winner, why, None, reached, 0, why)
    planned = max(min_per_arm, planned_per_arm or 0)
    missing = sum(max(0, planned - n) for n in exposed.values())
    if reached < planned:
        return Verdict(
            "not-yet",
            None,
            f"not yet: {reached:,} of the {planned:,} units per variant planned; so far (an "
            f"estimate, not a verdict): {why}",
            planned,
            reached,
            missing,
            why,
        )
    state = "winner" if winner is not None else "no-winner"
    return Verdict(state, winner, why, planned, reached, 0, why)
