"""How far a subject is from a readable result: its pace (exposed units per day), and per
treatment the minimum detectable effect now and the units and days to detect the target effect
(``power_block``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from control_plane.analysis import (
    AnalysisResult,
    units_needed,
)
from control_plane.analysis.power import DEFAULT_POWER as POWER
from control_plane.analysis.power import minimum_detectable_effect
from control_plane.db.types import utcnow
from control_plane.domain.results.metric import ALPHA, finite

PACE_MIN_DAYS = 1.0
"""A pace (exposed units per day) needs a day of history: fewer hours see one part of the daily
cycle (a night, a morning's peak) and an hour's units multiplied by 24 are no forecast."""


PACE_MIN_UNITS = 100
"""... and this many exposed units: a handful of them divided by any time is noise."""


def running_days(status: str, started_at: datetime | None) -> float | None:
    """Days a subject has run, for its pace; none when it is not running."""
    if status != "running" or started_at is None:
        return None
    return (utcnow() - started_at).total_seconds() / 86_400


def pace(exposed_total: int, running_days: float | None) -> tuple[float | None, str | None]:
    """Exposed units per day since the start, or ``None`` with the reason there is none yet: not
    running (``running_days`` None), or less history than :data:`PACE_MIN_DAYS` and
    :data:`PACE_MIN_UNITS`."""
    if running_days is None:
        return None, "not running"
    if running_days < PACE_MIN_DAYS or exposed_total < PACE_MIN_UNITS:
        hours = max(0.0, running_days) * 24
        return None, (
            f"not enough history yet ({exposed_total:,} exposed units in {hours:.1f} hours; "
            f"a pace needs {PACE_MIN_DAYS * 24:.0f} hours and {PACE_MIN_UNITS} units)"
        )
    return finite(exposed_total / running_days), None


def power_block(
    result: AnalysisResult,
    exposed_total: int,
    target_effect: float,
    running_days: float | None,
    variants: int,
) -> dict[str, Any]:
    """Per treatment: the minimum detectable effect at the current sample (relative, percent) and
    the units per variant (and days at the current :func:`pace`) to detect ``target_effect``
    (relative) with power 0.8 in a two-sided fixed-horizon test at alpha / (number of
    treatments)."""
    treatments = max(1, variants - 1)
    rate, pace_note = pace(exposed_total, running_days)
    control = result.control
    mean_c = control.adjusted_mean if control.adjusted_mean is not None else control.mean
    needed_by_arm = units_needed(result, target_effect, alpha=ALPHA, power=POWER)
    arms: dict[str, Any] = {}
    for arm, comparison in result.comparisons.items():
        out: dict[str, Any] = {
            "mde": None,
            "unitsPerVariantNeeded": None,
            "additionalUnits": None,
            "daysNeeded": None,
        }
        arms[arm] = out
        if not mean_c or comparison.std_error is None:
            continue
        scale = abs(mean_c)
        out["mde"] = finite(
            100.0
            * minimum_detectable_effect(
                comparison.std_error, alpha=ALPHA, power=POWER, treatments=treatments
            )
            / scale
        )
        needed = needed_by_arm.get(arm)
        if needed is None:
            continue
        additional = max(0, needed * variants - exposed_total)
        out["unitsPerVariantNeeded"] = needed
        out["additionalUnits"] = additional
        out["daysNeeded"] = finite(additional / rate) if rate else None
    return {
        "basis": "two-sided fixed-horizon z-test at alpha / treatments, power 0.8",
        "alpha": ALPHA,
        "power": POWER,
        "targetEffect": 100.0 * target_effect,
        "unitsPerDay": rate,
        "paceNote": pace_note,
        "variants": arms,
    }
