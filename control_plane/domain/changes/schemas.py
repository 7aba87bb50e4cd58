"""Request and response bodies of change requests."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from msgspec import UNSET, UnsetType

from control_plane.domain.flags.schemas import EnvironmentSettingsIn, RuleIn
from control_plane.domain.schemas import ApiIn, ApiOut

Status = Literal["open", "applied", "rejected", "closed"]


class FlagChangeIn(ApiIn):
    """One flag's change in the request's environment: ``settings`` in the shape of
    ``PUT /flags/{key}/environments/{env}`` (``enabled`` included), ``rules`` in the shape of
    ``PUT …/rules``'s ``rules`` (the whole list); one of them or both."""

    flag: str
    settings: EnvironmentSettingsIn | None = None
    rules: list[RuleIn] | None = None


class ChangeRequestCreate(ApiIn):
    environment: str
    title: str
    changes: list[FlagChangeIn]
    description: str = ""
    # once approved, the runner applies it at this time; not approved by then: it does not run
    apply_at: datetime | None = None


class ChangeRequestPatch(ApiIn):
    """The author's edit: an edit is a new version, approvals of the previous one no longer
    count, and the flags it changes are based on what is live now."""

    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    changes: list[FlagChangeIn] | UnsetType = UNSET
    apply_at: datetime | UnsetType | None = UNSET


class ReviewIn(ApiIn):
    comment: str = ""  # required to reject


class FieldDiff(ApiOut):
    field: str  # enabled, offVariation, fallthrough, targets, prerequisites or rules
    before: Any  # live now (for an applied request: what it replaced)
    after: Any  # as the request would set it
    changed: bool


class Moved(ApiOut):
    """A field of a flag's setting that changed since the request was based on it."""

    flag: str
    field: str
    base: Any
    live: Any


class FlagChange(ApiOut):
    flag: str
    base_version: int  # the flag setting's version the request was based on
    live_version: int | None  # now (null: the flag is gone)
    moved: list[Moved]  # what moved underneath since: applying refuses while any did
    diff: list[FieldDiff]
    settings: dict[str, Any] | None = None  # as given
    rules: list[dict[str, Any]] | None = None


class Review(ApiOut):
    id: str
    reviewer: str
    decision: Literal["approve", "reject"]
    comment: str
    at: datetime
    request_version: int
    current: bool  # of the request's current version (an edit leaves earlier ones behind)


class ChangeRequest(ApiOut):
    id: str
    environment: str
    title: str
    description: str
    status: Status
    author: str
    created_at: datetime
    updated_at: datetime
    version: int
    required_approvals: int  # the environment's, now
    approvals: int  # of the current version, by others than the author
    approved_by: list[str]
    changes: list[FlagChange]
    reviews: list[Review]
    apply_at: datetime | None = None
    applied_at: datetime | None = None
    applied_by: str | None = None
    reason: str = ""  # why it was closed, or why its applyAt passed without it


class ChangeRequestList(ApiOut):
    change_requests: list[ChangeRequest]
    count: int  # items on this page
    next_cursor: str | None = None
    has_more: bool = False
