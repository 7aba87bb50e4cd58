"""Request and response bodies of the flags API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut
from control_plane.domain.targeting.schemas import Clause as Clause
from control_plane.domain.targeting.schemas import ClauseIn as ClauseIn
from control_plane.domain.targeting.schemas import Serve as Serve
from control_plane.domain.targeting.schemas import ServeIn as ServeIn
from control_plane.domain.targeting.schemas import Weight as Weight
from control_plane.domain.targeting.schemas import WeightIn as WeightIn

FlagType = Literal["boolean", "string", "number", "json"]


class VariationIn(ApiIn):
    value: Any
    idx: int | None = None
    name: str | None = None


class FlagCreate(ApiIn):
    key: str
    name: str | None = None
    description: str = ""
    type: FlagType = "boolean"
    variations: list[VariationIn] | None = None
    temporary: bool = True
    bucket_by: str = "key"
    tags: list[str] = msgspec.field(default_factory=list)
    client_side: bool = True


class FlagPatch(ApiIn):
    """``variations``: the whole list. An item with ``idx`` renames or changes that variation,
    one without is added (next free idx); a variation left out is removed unless any
    environment, rule, target or prerequisite uses it."""

    name: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    tags: list[str] | UnsetType = UNSET
    temporary: bool | UnsetType = UNSET
    client_side: bool | UnsetType = UNSET
    bucket_by: str | UnsetType = UNSET
    variations: list[VariationIn] | UnsetType = UNSET


class FlagDeleted(ApiOut):
    key: str
    deleted: bool


class TargetIn(ApiIn):
    """The keys of contexts of ``contextKind`` (none: users) that get ``variation``."""

    variation: int
    values: list[str]
    context_kind: str | None = None


class PrerequisiteIn(ApiIn):
    key: str
    variation: int


class EnvironmentSettingsIn(ApiIn):
    """PUT body: fields left out keep their current value."""

    enabled: bool | UnsetType = UNSET
    off_variation: int | UnsetType = UNSET
    fallthrough: ServeIn | UnsetType = UNSET
    targets: list[TargetIn] | UnsetType = UNSET
    prerequisites: list[PrerequisiteIn] | UnsetType = UNSET


class ToggleIn(ApiIn):
    enabled: bool


class RuleIn(ApiIn):
    """A rule serves ``variation``/``rollout`` directly or wrapped in ``serve``."""

    clauses: list[ClauseIn]
    id: str | None = None
    description: str = ""
    variation: int | None = None
    rollout: list[WeightIn] | None = None
    serve: ServeIn | None = None


class RulesIn(ApiIn):
    rules: list[RuleIn]


class EvaluateIn(ApiIn):
    context: dict[str, Any]


# --- responses -------------------------------------------------------------------------------


class Variation(ApiOut):
    idx: int
    value: Any
    name: str


class Rule(ApiOut):
    id: str
    description: str
    clauses: list[Clause]
    serve: Serve


class Target(ApiOut):
    variation: int
    values: list[str]
    context_kind: str | UnsetType = UNSET


class Prerequisite(ApiOut):
    key: str
    variation: int


class EnvironmentSummary(ApiOut):
    enabled: bool
    off_variation: int
    fallthrough: Serve
    rules_count: int
    targets_count: int
    prerequisites_count: int
    version: int
    updated_at: datetime


class Flag(ApiOut):
    id: str
    key: str
    name: str
    description: str
    type: str
    variations: list[Variation]
    temporary: bool
    bucket_by: str
    tags: list[str]
    client_side: bool
    archived: bool
    archived_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime
    environments: dict[str, EnvironmentSummary]


class FlagList(ApiOut):
    flags: list[Flag]
    count: int  # items on this page
    next_cursor: str | None = None
    has_more: bool = False


class EnvironmentSettings(ApiOut):
    flag: str
    environment: str
    enabled: bool
    off_variation: int
    fallthrough: Serve
    targets: list[Target]
    prerequisites: list[Prerequisite]
    version: int
    updated_at: datetime


class Toggled(ApiOut):
    flag: str
    environment: str
    enabled: bool
    version: int


class Rules(ApiOut):
    flag: str
    environment: str
    rules: list[Rule]
    version: int


class Preview(ApiOut):
    """What a relay would serve a context, and why."""

    flag: str
    environment: str
    value: Any
    variation: int | None
    variation_name: str | None
    reason: str
    rule_index: int | None
    rule_id: str | None
    prerequisite_key: str | None
    error_kind: str | None
    in_rollout: bool
    openfeature_reason: str
    error_code: str | None
    snapshot_version: int
