"""The project document and the bodies of ``/export``, ``/plan`` and ``/apply``.

The document is made of the API's own input structs (variations, rules, clauses, serves,
targets, prerequisites, segment rules): what a file says is what the API would be sent, and the
JSON Schema at ``/schema/project.json`` is generated from these structs."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from control_plane.domain.environments.schemas import Approvals
from control_plane.domain.experiments.schemas import Engine, ExperimentType, Status, VariantIn
from control_plane.domain.flags.schemas import (
    FlagType,
    PrerequisiteIn,
    RuleIn,
    ServeIn,
    TargetIn,
    VariationIn,
)
from control_plane.domain.keys.schemas import KindName, RoleName
from control_plane.domain.layers.schemas import HoldoutStatus
from control_plane.domain.metrics.schemas import MetricCreate
from control_plane.domain.schemas import ApiIn, ApiOut
from control_plane.domain.segments.schemas import ContextKeysIn, SegmentRuleIn

FORMAT: Literal[1] = 1


class EnvironmentDoc(ApiIn):
    """An environment and its protection (``requiredApprovals`` above 0: changes to what it
    serves are made as change requests)."""

    key: str
    name: str | None = None  # none: the key, capitalised
    critical: bool | None = None  # none: as it is (a new one: true for ``production``)
    required_approvals: Approvals = 0


class FlagEnvironmentDoc(ApiIn):
    """A flag's setting in one environment: what ``PUT /flags/{key}/environments/{env}`` and
    ``PUT …/rules`` set."""

    enabled: bool
    off_variation: int
    fallthrough: ServeIn
    targets: list[TargetIn] = msgspec.field(default_factory=list)
    prerequisites: list[PrerequisiteIn] = msgspec.field(default_factory=list)
    rules: list[RuleIn] = msgspec.field(default_factory=list)


class FlagDoc(ApiIn, kw_only=True):
    """A flag; an environment left out of ``environments`` is left as it is."""

    key: str
    name: str | None = None  # none: the key
    description: str = ""
    type: FlagType = "boolean"
    temporary: bool = True
    bucket_by: str = "key"
    tags: list[str] = msgspec.field(default_factory=list)
    client_side: bool = True
    archived: bool = False
    variations: list[VariationIn]
    environments: dict[str, FlagEnvironmentDoc] = msgspec.field(default_factory=dict)


class SegmentDoc(ApiIn):
    key: str
    name: str | None = None  # none: the key
    description: str = ""
    included: list[str] = msgspec.field(default_factory=list)
    excluded: list[str] = msgspec.field(default_factory=list)
    included_contexts: list[ContextKeysIn] = msgspec.field(default_factory=list)  # other kinds
    excluded_contexts: list[ContextKeysIn] = msgspec.field(default_factory=list)
    rules: list[SegmentRuleIn] = msgspec.field(default_factory=list)


class MetricDoc(MetricCreate, kw_only=True):
    """A metric, in the shape ``POST /metrics`` takes, its key required. Its event,
    aggregation, ratio parts and quantile cannot change once made (results would change
    meaning); the rest can."""

    key: str


class LayerDoc(ApiIn):
    """A layer: experiments that must not share units (``POST /layers``)."""

    key: str
    name: str | None = None  # none: the key
    description: str = ""


class HoldoutDoc(ApiIn, kw_only=True):
    """A holdout, in the shape ``POST /holdouts`` takes (its results never in the document):
    ``share`` and ``layer`` cannot change once it is made; ``status`` moves between running and
    stopped."""

    key: str
    name: str | None = None  # none: the key
    description: str = ""
    share: float  # the fraction of units held out: 0.05 is 5 %
    layer: str | None = None  # none: every experiment of the project
    metrics: list[str]  # metrics' keys, the first one primary
    status: HoldoutStatus | None = None  # none: as it is (a new one: running)


class ExperimentDoc(ApiIn, kw_only=True):
    """An experiment's definition, in the shape ``POST /experiments`` takes (its results are
    never in the document). ``type``, ``unitKind``, the variants' keys and weights cannot change
    once it is made; ``url``, ``selector``, ``goal`` and the variants' content once units are
    exposed; ``layer`` and ``traffic`` unless it is (or goes back to) a draft. ``status`` moves
    as ``PUT /experiments/{key}/status`` allows; ``primary`` and ``guardrails`` are its metrics'
    keys, as ``PUT /experiments/{key}/metrics`` sets them."""

    key: str
    name: str | None = None  # none: the key
    description: str = ""
    type: ExperimentType = "manual"
    status: Status | None = None  # none: as it is (a new one: draft)
    url: str = "*"
    selector: str | None = None
    goal: str | None = None  # none: ``cta_click`` (a manual experiment names its goal)
    stats_engine: Engine = "frequentist"
    variants: list[VariantIn] | None = None  # none: ``control`` and ``treatment``, equal shares
    cuped: bool = False
    unit_kind: str = "user"
    layer: str | None = None
    traffic: float = 1.0
    dimensions: list[str] = msgspec.field(default_factory=list)
    primary: str | None = None
    guardrails: list[str] = msgspec.field(default_factory=list)


class WebhookDoc(ApiIn):
    """A webhook, named by its ``url`` (webhooks have ids, not keys): what ``POST /webhooks``
    takes but its secret, which is never in the document (one made from a document gets a
    generated secret that is never shown: set your own with ``PATCH /webhooks/{id}``)."""

    url: str
    events: list[str]
    description: str = ""
    enabled: bool = True


class KeyDoc(ApiIn):
    """A key, for the record: its name, kind, environment (a server or public key's) and role (a
    management key's), never its token nor its hint. Apply never issues nor revokes a key; one
    in the document that is not live is a note of the plan."""

    kind: KindName
    name: str = ""
    environment: str | None = None
    role: RoleName | None = None


class ProjectDoc(ApiIn):
    """A project as one document: sorted by key, rule ids kept, so a diff in git shows only
    what changed."""

    version: Literal[1] = FORMAT
    environments: list[EnvironmentDoc] = msgspec.field(default_factory=list)
    segments: list[SegmentDoc] = msgspec.field(default_factory=list)
    flags: list[FlagDoc] = msgspec.field(default_factory=list)
    metrics: list[MetricDoc] = msgspec.field(default_factory=list)
    layers: list[LayerDoc] = msgspec.field(default_factory=list)
    holdouts: list[HoldoutDoc] = msgspec.field(default_factory=list)
    experiments: list[ExperimentDoc] = msgspec.field(default_factory=list)
    webhooks: list[WebhookDoc] = msgspec.field(default_factory=list)  # sorted by url
    keys: list[KeyDoc] = msgspec.field(default_factory=list)  # an inventory: never written


class PlanIn(ApiIn):
    document: ProjectDoc
    prune: bool = (
        False  # also what is live but not in the document (flags archived, segments deleted)
    )


class ApplyIn(ApiIn):
    document: ProjectDoc
    # the plan's ``versions``: apply refuses (409) if any moved since; none: planned now
    versions: dict[str, int] | None = None
    prune: bool = False
    file_name: str = "document"  # named in the audit: "applied from <fileName>"


# --- answers ----------------------------------------------------------------------------------

Action = Literal["create", "update", "archive", "restore", "delete", "propose"]
Kind = Literal[
    "environment",
    "segment",
    "flag",
    "setting",
    "metric",
    "experiment",
    "layer",
    "holdout",
    "webhook",
]


class FieldChange(ApiOut):
    path: str  # within the resource: ``rules[0].serve.variation``
    before: Any
    after: Any


class ResourceChange(ApiOut):
    kind: Kind  # ``setting``: a flag's setting in ``environment``
    key: str
    action: Action  # ``propose``: the environment requires approval, a change request is opened
    changes: list[FieldChange]
    environment: str | None = None


class Plan(ApiOut):
    changes: list[ResourceChange]  # what would be created, changed, archived or deleted
    unchanged: list[str]  # left alone: ``flag checkout``, ``setting checkout/production``
    versions: dict[str, int]  # the live versions read: hand them to apply
    has_changes: bool
    # what to do by hand: a new webhook's secret to set, keys in the document that are not live
    notes: list[str] = msgspec.field(default_factory=list)


class OpenedRequest(ApiOut):
    id: str
    environment: str
    flags: list[str]
    segments: list[str]
    already_open: bool  # an open request proposed exactly this already: none is opened again


class Applied(ApiOut):
    plan: Plan
    applied: bool  # false: nothing written, no change request opened
    change_requests: list[OpenedRequest]
    message: str
