"""The base every domain's validation stands on: collected field errors, keys, names and tags.

The one home of what a key, a name or a tag may be. Each check names the field it failed on,
with the path a user would write (``rules[0].clauses[1].values``); ``Problems.raise_if_any``
turns what was collected into one 422. A domain's own rules (a flag's variations, a metric's
aggregation) live in its package and are built from these.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from control_plane.domain.common import Scope
from control_plane.errors import FieldError, invalid_many

KEY_PATTERN = re.compile(r"^[a-z0-9_.\-]{1,128}$")
KEY_RULE = "must be 1 to 128 characters of lowercase letters, digits, '_', '-' and '.'"
MAX_NAME = 200


Bounds = tuple[float, float]
ALPHA: Bounds = (0.001, 0.2)
"""A test's level (power planning): 0.1 % to 20 %; 0.05 is the default everywhere."""
POWER: Bounds = (0.5, 0.999)
"""A plan's power: below 0.5 an experiment misses the effect more often than it finds it."""
QUANTILE: Bounds = (0.001, 0.999)
"""A quantile metric's p: p0.1 to p99.9, what nearest-rank estimation reads from real samples."""
BASELINE_RATE: Bounds = (1e-6, 1 - 1e-6)
"""A planned conversion rate: one in a million to all but one in a million. Closer to 0 or 1 the
effect of any mde is too small to square in doubles, and no sample that can exist detects it."""
BASELINE_SIZE: Bounds = (1e-6, 2**53 - 1)
"""A planned mean's size and its standard deviation per unit: event values are whole minor units
up to 2^53 - 1, and within these bounds the effect, its square and the variance are all
ordinary doubles (1e308 overflowed the variance, 1e-300 underflowed it)."""
MAX_COEFFICIENT_OF_VARIATION = 1e4
"""A planned standard deviation is at most this many times the mean's size: a revenue per unit
converting once in 10^8 units has about this much; beyond it the sd is a typo, not a metric."""
PERCENTILE_CAP: Bounds = (0.5, 0.9999)
"""A percentile cap: at least the median (a lower cap would flatten most units), at most p99.99."""
ABSOLUTE_CAP: Bounds = (1, 2**53 - 1)
"""An absolute cap, in the metric's units: event values are whole minor units (cents), so a cap
below 1 caps every value there is, and one above 2^53 - 1 is beyond every value there can be."""


def check_between(problems: Problems, field: str, value: float, bounds: Bounds, what: str) -> None:
    """``value`` within ``bounds`` (inclusive; NaN and infinities are not), else a problem that
    says the range and what the value means."""
    low, high = bounds
    if not low <= value <= high:  # NaN compares False
        problems.add(field, f"{what}: from {low:g} to {high:g}")


class Problems:
    """Collects field errors; ``raise_if_any`` turns them into one 422."""

    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, field: str, message: str) -> None:
        self.items.append(FieldError(field, message))

    def raise_if_any(self) -> None:
        if self.items:
            raise invalid_many(self.items)


def check_key(problems: Problems, field: str, key: str) -> None:
    if not KEY_PATTERN.match(key):
        problems.add(field, KEY_RULE)
    elif key in {".", ".."}:
        problems.add(field, "'.' and '..' cannot be addressed in a URL path")


def check_name(problems: Problems, field: str, name: str) -> None:
    if not name.strip():
        problems.add(field, "must not be blank")
    elif len(name) > MAX_NAME:
        problems.add(field, f"must be at most {MAX_NAME} characters")


def check_tags(problems: Problems, field: str, tags: Sequence[str]) -> None:
    for i, tag in enumerate(tags):
        if not tag.strip() or len(tag) > 64:
            problems.add(f"{field}[{i}]", "a tag is 1 to 64 characters")


def slugify(text: str) -> str:
    """A key made from a name: ``"Revenue (EUR)"`` → ``"revenue-eur"``."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    return slug[:120] or "item"


async def unique_key(scope: Scope, model: Any, wanted: str) -> str:
    """``wanted``, or ``wanted-2``, ``wanted-3``… whichever is free in the project among the
    rows of ``model`` (a table with ``project_id`` and ``key``)."""
    taken = set(
        await scope.session.scalars(
            select(model.key).where(
                model.project_id == scope.project_id, model.key.like(f"{wanted}%")
            )
        )
    )
    if wanted not in taken:
        return wanted
    n = 2
    while f"{wanted}-{n}" in taken:
        n += 1
    return f"{wanted}-{n}"
