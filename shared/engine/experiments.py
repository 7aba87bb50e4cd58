"""Experiment assignment and page matching, shared by the control plane and relays (pure).

A unit's variant: ``bucket = experiment_bucket(experiment_key, unit)`` (murmur3 of
``experiment_key + "." + unit``, in [0, 100000)), then the first variant whose cumulative weight
exceeds the bucket. Equal shares unless weights are given. The same unit always lands in the same
variant, on every relay and replica.

Pages: ``*`` runs everywhere; a pattern with ``*`` is a glob (``/pricing*``); anything else is
an exact path (a trailing ``/`` is ignored). A pattern starting with ``/`` is compared with the
path of the page URL (query and fragment ignored); a full URL pattern with scheme, host and path.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from shared.engine.bucketing import experiment_bucket
from shared.wire.snapshot import WEIGHT_SCALE


def thresholds(weights: Sequence[int | None]) -> tuple[int, ...]:
    """Cumulative upper bounds out of ``WEIGHT_SCALE``; ``None`` weights mean equal shares."""
    count = len(weights)
    if count == 0:
        return ()
    if any(w is None for w in weights):
        return tuple(round((i + 1) * WEIGHT_SCALE / count) for i in range(count))
    total = 0
    bounds = []
    for weight in weights:
        total += int(weight or 0)
        bounds.append(total)
    return tuple(bounds)


def choose_variant(experiment_key: str, unit: str, bounds: Sequence[int]) -> int:
    """Index of the unit's variant for cumulative ``bounds`` (see ``thresholds``)."""
    bucket = experiment_bucket(experiment_key, unit)
    for index, bound in enumerate(bounds):
        if bucket < bound:
            return index
    return len(bounds) - 1


def glob_matches(pattern: str, text: str) -> bool:
    """``pattern``'s ``*`` stands for any run of characters; the rest must appear as written.

    Greedy and leftmost, with ``str`` searches only: the first part is a prefix, the last a
    suffix, each one between found at its earliest place after the previous. That is exact for
    ``*``-only globs and takes time linear in ``text`` per part, where a regular expression
    (``.*`` between the parts) backtracks polynomially: a page chooses ``text``."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return text == pattern
    first, *middle, last = parts
    if len(text) < len(first) + len(last) or not text.startswith(first):
        return False
    if not text.endswith(last):
        return False
    at, end = len(first), len(text) - len(last)
    for part in middle:
        found = text.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


def _norm(path: str) -> str:
    return path.rstrip("/") or "/"


def url_matches(pattern: str, url: str | None) -> bool:
    if pattern in {"", "*"}:
        return True
    if url is None:
        return False
    if pattern.startswith("/"):
        target = url if url.startswith("/") else (urlsplit(url).path or "/")
        target = target.split("?", 1)[0].split("#", 1)[0]
    else:
        parts = urlsplit(url)
        target = f"{parts.scheme}://{parts.netloc}{parts.path or '/'}"
    if "*" in pattern:
        return glob_matches(pattern, target)
    return _norm(target) == _norm(pattern)


def variant_of(
    experiment_key: str, unit: str, variants: Sequence[str], weights: Sequence[int | None]
) -> str:
    """The key of ``unit``'s variant among ``variants`` (with their stored ``weights``)."""
    return variants[choose_variant(experiment_key, unit, thresholds(weights))]


RunningVariants = Callable[[str], "tuple[Sequence[str], Sequence[int | None]] | None"]
"""Looks up a running experiment by key: its variant keys and weights, or None."""
FlagVariations = Callable[[str], "Collection[int] | None"]
"""Looks up a live flag by key: the indexes of its variations, or None."""


def exposure_claim_problem(
    props: Mapping[str, Any] | None, unit: str, running: RunningVariants
) -> tuple[str, str] | None:
    """Why an ``$exposure`` claimed by a backend cannot be recorded, as ``(field, message)``:
    it must name a running experiment (``props.experiment``) and the variant the deterministic
    assignment gives ``unit`` (``props.variant``). None when it holds."""
    props = props or {}
    experiment, variant = props.get("experiment"), props.get("variant")
    if not isinstance(experiment, str):
        return "props.experiment", "an exposure names its experiment's key"
    if not isinstance(variant, str):
        return "props.variant", "an exposure names the variant shown"
    found = running(experiment)
    if found is None:
        return "props.experiment", f"no running experiment {experiment!r}"
    assigned = variant_of(experiment, unit, *found)
    if variant != assigned:
        return "props.variant", f"unit {unit!r} is assigned {assigned!r}, not {variant!r}"
    return None


def flag_exposure_claim_problem(
    props: Mapping[str, Any] | None, flags: FlagVariations
) -> tuple[str, str] | None:
    """Why a ``$flag_exposure`` cannot be recorded: it must name a live flag (``props.flag``) and
    one of its variation indexes (``props.variation``). None when it holds."""
    props = props or {}
    flag, variation = props.get("flag"), props.get("variation")
    if not isinstance(flag, str):
        return "props.flag", "a flag exposure names the flag's key"
    if not isinstance(variation, int) or isinstance(variation, bool):
        return "props.variation", "a flag exposure names the variation index served"
    indexes = flags(flag)
    if indexes is None:
        return "props.flag", f"no flag {flag!r}"
    if variation not in indexes:
        return "props.variation", f"flag {flag!r} has variations {sorted(indexes)}"
    return None
