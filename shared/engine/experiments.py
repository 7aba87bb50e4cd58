"""Experiment assignment and page matching, shared by the control plane and relays (pure).

A unit's variant: ``bucket = experiment_bucket(experiment_key, unit)`` (murmur3 of
``experiment_key + "." + unit``, in [0, 100000)), then the first variant whose cumulative weight
exceeds the bucket. Equal shares unless weights are given. The same unit always lands in the same
variant, on every relay and replica.

Layers and holdouts (``place``): an experiment of a layer holds a range ``[start, end)`` of the
layer's buckets (``layer_bucket``, murmur3 of ``"layer:" + layerKey + "." + unit``); a unit whose
layer bucket is outside it is not in the experiment. Ranges of a layer's running experiments never
overlap, so a unit is in at most one of them. A running holdout whose scope holds the experiment
keeps a unit out when its holdout bucket (``holdout_bucket``) is below the holdout's share: it is
served the control (the first variant) and never exposed to the experiment. The layer decides
first: a unit outside the range is neither in the experiment nor counted by its holdouts, so a
holdout's two groups are the units that reached an experiment they would be in, alike.

Pages: ``*`` runs everywhere; a pattern with ``*`` is a glob (``/pricing*``); anything else is
an exact path (a trailing ``/`` is ignored). A pattern starting with ``/`` is compared with the
path of the page URL (query and fragment ignored); a full URL pattern with scheme, host and path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from shared.engine.bucketing import choose, experiment_bucket, holdout_bucket, layer_bucket
from shared.wire.kinds import MULTI, USER, reference_names
from shared.wire.snapshot import WEIGHT_SCALE, ExperimentSnapshot, HoldoutSnapshot

HoldoutGroup = Literal["holdout", "general"]
HOLDOUT: HoldoutGroup = "holdout"
GENERAL: HoldoutGroup = "general"
"""A holdout's two groups: the units it keeps out, and all the others."""


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
    return choose(bounds, experiment_bucket(experiment_key, unit))


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


def holdout_group(holdout: HoldoutSnapshot, unit: str) -> HoldoutGroup:
    """``holdout`` when ``unit`` is among the holdout's share of units, else ``general``."""
    return HOLDOUT if holdout_bucket(holdout.key, unit) < holdout.share else GENERAL


def in_layer_range(experiment: ExperimentSnapshot, unit: str) -> bool:
    """Whether ``unit`` falls in the experiment's share of its layer (always, without a layer)."""
    if experiment.layer is None:
        return True
    if experiment.layer_range is None:  # not started: holds no part of the layer
        return False
    start, end = experiment.layer_range
    return start <= layer_bucket(experiment.layer, unit) < end


Outcome = Literal["assigned", "outside", "held_out"]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a unit stands in a running experiment (``place``).

    ``outcome``: ``assigned`` (in the experiment: an exposure of ``variant`` counts),
    ``outside`` (outside its share of its layer: not in it) or ``held_out`` (a holdout keeps it
    out: served the control, never exposed to the experiment);
    ``variant``: the index of the variant it is served (the control, 0, unless assigned);
    ``holdouts``: the ``(holdout key, group)`` exposures to record for the holdouts in scope
    (none for a unit outside the experiment's share of its layer)."""

    outcome: Outcome
    variant: int
    reason: str
    holdouts: tuple[tuple[str, HoldoutGroup], ...] = ()

    @property
    def assigned(self) -> bool:
        return self.outcome == "assigned"


def place(experiment: ExperimentSnapshot, unit: str) -> Placement:
    """The one rule of who is in a running experiment: its layer range, then its holdouts, then
    its variant. ``unit`` is the qualified unit (``shared.wire.kinds``)."""
    if not in_layer_range(experiment, unit):
        return Placement("outside", 0, f"not in the experiment's share of layer {experiment.layer}")
    groups = tuple((h.key, holdout_group(h, unit)) for h in experiment.holdouts)
    holding = next((key for key, group in groups if group == HOLDOUT), None)
    if holding is not None:
        reason = f"held out by holdout {holding}: served the control"
        return Placement("held_out", 0, reason, groups)
    bounds = thresholds([v.weight for v in experiment.variants])
    return Placement("assigned", choose_variant(experiment.key, unit, bounds), "assigned", groups)


def experiments_holdouts(experiments: Iterable[ExperimentSnapshot]) -> dict[str, HoldoutSnapshot]:
    """The running holdouts that hold some of ``experiments``, by key."""
    return {h.key: h for e in experiments for h in e.holdouts}


RunningExperiment = Callable[[str], "ExperimentSnapshot | None"]
"""Looks up a running experiment by key."""
RunningHoldout = Callable[[str], "HoldoutSnapshot | None"]
"""Looks up a running holdout by key."""
FlagVariations = Callable[[str], "Collection[int] | None"]
"""Looks up a live flag by key: the indexes of its variations, or None."""


def exposure_claim_problem(
    props: Mapping[str, Any] | None,
    unit: str,
    running: RunningExperiment,
    holdouts: RunningHoldout = lambda _: None,
) -> tuple[str, str] | None:
    """Why an ``$exposure`` claimed by a backend cannot be recorded, as ``(field, message)``.
    None when it holds.

    An exposure to an experiment names a running experiment (``props.experiment``) that ``place``
    puts ``unit`` in (not outside its share of a layer, not held out) and the variant it gives
    the unit (``props.variant``). An exposure to a holdout (``props.holdout``, no experiment)
    names a running holdout and the unit's group in it (``props.group``: holdout or general)."""
    props = props or {}
    if "holdout" in props and "experiment" not in props:
        return holdout_claim_problem(props, unit, holdouts)
    experiment, variant = props.get("experiment"), props.get("variant")
    if not isinstance(experiment, str):
        return "props.experiment", "an exposure names its experiment's key (or a holdout's)"
    if not isinstance(variant, str):
        return "props.variant", "an exposure names the variant shown"
    found = running(experiment)
    if found is None:
        return "props.experiment", f"no running experiment {experiment!r}"
    placement = place(found, unit)
    if not placement.assigned:
        return "props.experiment", f"unit {unit!r} is not in experiment {experiment!r}: " + (
            placement.reason
        )
    assigned = found.variants[placement.variant].key
    if variant != assigned:
        return "props.variant", f"unit {unit!r} is assigned {assigned!r}, not {variant!r}"
    return None


def holdout_claim_problem(
    props: Mapping[str, Any], unit: str, holdouts: RunningHoldout
) -> tuple[str, str] | None:
    """Why a claimed exposure to a holdout (``props.holdout``, ``props.group``) cannot be
    recorded: the holdout must be running and the group the unit's. None when it holds."""
    key, group = props.get("holdout"), props.get("group")
    if not isinstance(key, str):
        return "props.holdout", "a holdout exposure names the holdout's key"
    if group not in (HOLDOUT, GENERAL):
        return "props.group", f"a holdout exposure names the unit's group: {HOLDOUT} or {GENERAL}"
    found = holdouts(key)
    if found is None:
        return "props.holdout", f"no running holdout {key!r}"
    actual = holdout_group(found, unit)
    if group != actual:
        return "props.group", f"unit {unit!r} is in group {actual!r} of {key!r}, not {group!r}"
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


MAX_DIMENSIONS = 10
MAX_DIMENSION_VALUE = 200
"""An experiment's dimensions (``dimensions``: the context attributes its exposures capture, to
split its results by) are at most ten names or references (``/device/os``); a captured value is
text of at most 200 characters."""


def dimensions_problem(dimensions: Sequence[Any]) -> tuple[str, str] | None:
    """Why ``dimensions`` cannot be an experiment's (the field, what is wrong), or None."""
    if len(dimensions) > MAX_DIMENSIONS:
        return "dimensions", f"at most {MAX_DIMENSIONS} attributes"
    seen: set[tuple[str, ...]] = set()
    for index, name in enumerate(dimensions):
        field = f"dimensions[{index}]"
        if (
            not isinstance(name, str)
            or not name.strip()
            or len(name) > MAX_DIMENSION_VALUE
            or "\x00" in name
        ):
            return field, f"an attribute name or reference, 1 to {MAX_DIMENSION_VALUE} characters"
        try:
            names = reference_names(name)
        except ValueError as exc:
            return field, str(exc)
        if names in seen:
            return field, f"{name!r} is listed twice"
        if names in (("key",), ("kind",)):
            return field, f"{name!r} is the unit itself, not an attribute to split by"
        seen.add(names)
    return None


def dimension_text(value: Any) -> str | None:
    """A captured value as stored: a string as it is, a boolean or finite number as JSON writes
    it, cut to ``MAX_DIMENSION_VALUE`` characters; None for anything else, an empty string or
    text with a NUL (no value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            return None
        text = repr(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
    elif isinstance(value, str) and value:
        text = value
    else:
        return None
    if "\x00" in text:  # no event may carry one (``shared.wire.events``): no value
        return None
    return text[:MAX_DIMENSION_VALUE]


def dimension_values(
    context: Mapping[str, Any] | None,
    kind: str,
    dimensions: Sequence[str],
    private: Collection[str] = (),
) -> dict[str, str]:
    """The values of an experiment's ``dimensions`` in a context as it arrives (LaunchDarkly's
    shape: a plain context is a user, ``kind: "multi"`` holds a part per kind), read from the part
    of the ``kind`` the experiment randomizes on; leaving out the ``private`` attributes of the key
    that sent it (names or references, compared as the names they read)."""
    if not context or not dimensions:
        return {}
    given = context.get("kind")
    if given == MULTI:
        part = context.get(kind)
    else:
        part = context if (given if given is not None else USER) == kind else None
    if not isinstance(part, Mapping):
        return {}
    out: dict[str, str] = {}
    for name in without_private(dimensions, private):
        value: Any = part
        for step in _names(name):
            value = value.get(step) if isinstance(value, Mapping) else None
        text = dimension_text(value)
        if text is not None:
            out[name] = text
    return out


def captured_dimensions(given: Any, dimensions: Sequence[str]) -> dict[str, str]:
    """What an exposure's ``props.dimensions`` may record: the experiment's own dimensions with a
    value of text (cut to ``MAX_DIMENSION_VALUE``); anything else in it is ignored."""
    if not isinstance(given, Mapping) or not dimensions:
        return {}
    return {
        name: text for name in dimensions if (text := dimension_text(given.get(name))) is not None
    }


def without_private(names: Iterable[str], private: Collection[str]) -> list[str]:
    """``names`` (attributes, or references) but those that read a ``private`` attribute."""
    hidden = {_names(p) for p in private}
    return [name for name in names if _names(name) not in hidden]


def _names(attribute: str) -> tuple[str, ...]:
    try:
        return reference_names(attribute)
    except ValueError:
        return (attribute,)
