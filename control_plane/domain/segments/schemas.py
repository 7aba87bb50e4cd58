from __future__ import annotations

from datetime import datetime

import msgspec
from msgspec import UNSET, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut
from control_plane.domain.targeting.schemas import Clause, ClauseIn


class SegmentRuleIn(ApiIn):
    clauses: list[ClauseIn]
    id: str | None = None
    weight: float | None = None  # percent of matching contexts that are in
    bucket_by: str | None = None
    context_kind: str | None = None  # the kind whose bucketBy is hashed; none: the user's


class ContextKeysIn(ApiIn):
    """Keys of contexts of one kind (LaunchDarkly's ``includedContexts`` item)."""

    context_kind: str
    values: list[str]


class SegmentCreate(ApiIn):
    """``included``/``excluded``: user keys; ``includedContexts``/``excludedContexts``: keys of
    other kinds, one item per kind. Included comes first, then excluded, then the rules."""

    key: str
    name: str | None = None
    description: str = ""
    included: list[str] = msgspec.field(default_factory=list)
    excluded: list[str] = msgspec.field(default_factory=list)
    included_contexts: list[ContextKeysIn] = msgspec.field(default_factory=list)
    excluded_contexts: list[ContextKeysIn] = msgspec.field(default_factory=list)
    rules: list[SegmentRuleIn] = msgspec.field(default_factory=list)


class SegmentPatch(ApiIn):
    name: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    included: list[str] | UnsetType = UNSET
    excluded: list[str] | UnsetType = UNSET
    included_contexts: list[ContextKeysIn] | UnsetType = UNSET
    excluded_contexts: list[ContextKeysIn] | UnsetType = UNSET
    rules: list[SegmentRuleIn] | UnsetType = UNSET


class SegmentRule(ApiOut):
    id: str
    clauses: list[Clause]
    weight: float | int | None = None
    bucket_by: str | None = None
    context_kind: str | None = None


class ContextKeys(ApiOut):
    context_kind: str
    values: list[str]


class Segment(ApiOut):
    id: str
    key: str
    name: str
    description: str
    included: list[str]
    excluded: list[str]
    included_contexts: list[ContextKeys]
    excluded_contexts: list[ContextKeys]
    rules: list[SegmentRule]
    version: int
    created_at: datetime
    updated_at: datetime


class SegmentList(ApiOut):
    segments: list[Segment]
    count: int  # items on this page
    next_cursor: str | None = None
    has_more: bool = False


class Deleted(ApiOut):
    key: str
    deleted: bool
