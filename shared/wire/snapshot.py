"""The per-environment snapshot: what the control plane compiles and relays evaluate.

Every struct here is frozen and every field added after schema version 1 must carry a default,
so that an old relay decodes a newer snapshot (unknown fields are ignored on decode).

Weights are integers out of ``WEIGHT_SCALE`` (100000 = 100 %), the precision LaunchDarkly uses.
"""

from __future__ import annotations

from typing import Any

import msgspec

SCHEMA_VERSION = 1
WEIGHT_SCALE = 100_000


class WireStruct(msgspec.Struct, rename="camel", frozen=True, omit_defaults=True):
    """Base of every snapshot struct: camelCase on the wire, immutable in memory."""


class Variation(WireStruct, frozen=True):
    idx: int
    value: Any
    name: str = ""


class WeightedVariation(WireStruct, frozen=True):
    idx: int
    weight: int  # out of WEIGHT_SCALE


class Serve(WireStruct, frozen=True):
    """Exactly one of ``variation`` (fixed) or ``rollout`` (percentage split) is set."""

    variation: int | None = None
    rollout: tuple[WeightedVariation, ...] | None = None
    bucket_by: str | None = None  # overrides the flag's bucketBy for this rollout
    # The context kind whose bucketBy is hashed; unset: the user's, bucketBy a literal name
    context_kind: str | None = None


class Clause(WireStruct, frozen=True):
    """One condition. ``segmentMatch`` clauses carry segment keys in ``values``.

    Within a clause any value may match (OR); ``negate`` inverts the clause's result, except that a
    missing attribute (or a context without the clause's kind) never matches, negated or not.
    With ``context_kind`` set, ``attribute`` is a reference (``/address/city`` reads into
    nested objects; a name without ``/`` is itself); unset, the clause reads the user and
    ``attribute`` is one literal name, as in rules written before kinds (LaunchDarkly's rule;
    see ``shared.engine.contexts``).
    """

    op: str
    attribute: str | None = None
    values: tuple[Any, ...] = ()
    negate: bool = False
    context_kind: str | None = None


class Rule(WireStruct, frozen=True):
    """All clauses must match (AND); the first matching rule of a flag serves."""

    id: str
    clauses: tuple[Clause, ...]
    serve: Serve
    description: str = ""


class Target(WireStruct, frozen=True):
    """Individual targeting: the keys in ``values`` of contexts of ``context_kind`` get
    ``variation``, before any rule (targets are checked in order)."""

    variation: int
    values: tuple[str, ...]
    context_kind: str | None = None  # unset: the user


class ContextKeys(WireStruct, frozen=True):
    """Keys of contexts of one kind (a segment's included or excluded contexts of that kind)."""

    context_kind: str | None = None  # unset: the user
    values: tuple[str, ...] = ()


class Prerequisite(WireStruct, frozen=True):
    """Flag ``key`` must be on and serve ``variation`` for this flag to go past its off state."""

    key: str
    variation: int


class FlagSnapshot(WireStruct, frozen=True):
    key: str
    version: int
    type: str  # boolean | string | number | json
    variations: tuple[Variation, ...]
    enabled: bool
    off_variation: int
    fallthrough: Serve
    rules: tuple[Rule, ...] = ()
    targets: tuple[Target, ...] = ()
    prerequisites: tuple[Prerequisite, ...] = ()
    bucket_by: str = "key"
    salt: str | None = None  # bucketing salt; None means the flag key
    client_side: bool = True
    track_exposures: bool = False  # metrics are attached: relays report first evaluations


class SegmentRule(WireStruct, frozen=True):
    """A segment rule: all clauses must match; with ``weight`` only that share of matches is in."""

    id: str
    clauses: tuple[Clause, ...]
    weight: int | None = None  # out of WEIGHT_SCALE
    bucket_by: str | None = None
    context_kind: str | None = None  # as ``Serve.context_kind``


class SegmentSnapshot(WireStruct, frozen=True):
    """``included`` and ``excluded`` are user keys; ``included_contexts`` and
    ``excluded_contexts`` list keys of other kinds."""

    key: str
    version: int
    included: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    included_contexts: tuple[ContextKeys, ...] = ()
    excluded_contexts: tuple[ContextKeys, ...] = ()
    rules: tuple[SegmentRule, ...] = ()
    salt: str | None = None  # bucketing salt for weighted rules; None means the segment key


class ExperimentVariant(WireStruct, frozen=True):
    """What a browser renders for one variant; ``cta`` variants may carry link and colours."""

    key: str
    content: str = ""
    href: str | None = None
    bg: str | None = None
    color: str | None = None
    weight: int | None = None  # out of WEIGHT_SCALE; None means an equal share


class HoldoutSnapshot(WireStruct, frozen=True):
    """A running holdout whose scope holds an experiment: units whose holdout bucket
    (``shared.engine.bucketing.holdout_bucket``) is below ``share`` (out of ``WEIGHT_SCALE``) are
    kept out of the experiment and served its control."""

    key: str
    share: int


class ExperimentSnapshot(WireStruct, frozen=True):
    """A running experiment, so relays assign browsers exactly as the control plane would.

    ``layer``: the layer it belongs to, if any; ``layer_range``: the ``[start, end)`` of the
    layer's buckets (``shared.engine.bucketing.layer_bucket``, out of ``WEIGHT_SCALE``) it holds,
    units outside it are not in the experiment. ``holdouts``: the running holdouts whose scope
    holds it (the project's, and its layer's). ``dimensions``: the attributes of the unit's
    context its exposures capture (``shared.engine.experiments.dimension_values``)."""

    key: str
    type: str  # element | cta | manual
    url: str  # "*", an exact path, or a glob such as "/pricing*"
    goal: str
    variants: tuple[ExperimentVariant, ...]
    selector: str | None = None
    version: int = 1
    unit_kind: str = "user"  # the context kind it randomizes on (``shared.wire.kinds``)
    layer: str | None = None
    layer_range: tuple[int, int] | None = None
    holdouts: tuple[HoldoutSnapshot, ...] = ()
    # the context attributes (names or references) its exposures capture, to split results by
    dimensions: tuple[str, ...] = ()


class Snapshot(WireStruct, frozen=True):
    project: str
    environment: str
    version: int
    flags: dict[str, FlagSnapshot]
    segments: dict[str, SegmentSnapshot]
    schema_version: int = SCHEMA_VERSION
    generated_at: int = 0  # epoch milliseconds
    experiments: dict[str, ExperimentSnapshot] = {}  # running experiments of the project
