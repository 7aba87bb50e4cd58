"""Request and response bodies of change requests."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from msgspec import UNSET, UnsetType

from control_plane.domain.flags.schemas import EnvironmentSettingsIn, FlagPatch, RuleIn
from control_plane.domain.schemas import ApiIn, ApiOut
from control_plane.domain.segments.schemas import SegmentPatch

Status = Literal["open", "applied", "rejected", "closed"]


class ChangeIn(ApiIn):
    """One item of a request, naming a flag or a segment (exactly one of them).

    A flag's change in the request's environment: ``settings`` in the shape of
    ``PUT /flags/{key}/environments/{env}`` (``enabled`` included), ``rules`` in the shape of
    ``PUT …/rules``'s ``rules`` (the whole list); one of them or both.

    A change to the flag itself, which every environment serves: ``flagPatch`` in the shape of
    ``PATCH /flags/{key}``'s body, and/or ``archived`` (true archives it, false restores it), in
    an item of its own (a request may carry both items of one flag; they apply in order).

    A segment's change: ``patch`` in the shape of ``PATCH /segments/{key}``'s body. A segment is
    the project's, so the change reaches every environment whose flags use it (deleting a segment
    through a request is not offered)."""

    flag: str | None = None
    settings: EnvironmentSettingsIn | None = None
    rules: list[RuleIn] | None = None
    segment: str | None = None
    patch: SegmentPatch | None = None
    flag_patch: FlagPatch | None = None
    archived: bool | None = None


class ChangeRequestCreate(ApiIn):
    environment: str
    title: str
    changes: list[ChangeIn]
    description: str = ""
    # once approved, the runner applies it at this time; not approved by then: it does not run
    apply_at: datetime | None = None


class ChangeRequestPatch(ApiIn):
    """The author's edit: an edit is a new version, approvals of the previous one no longer
    count, and the flags it changes are based on what is live now."""

    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    changes: list[ChangeIn] | UnsetType = UNSET
    apply_at: datetime | UnsetType | None = UNSET


class ReviewIn(ApiIn):
    comment: str = ""  # required to reject


class FieldDiff(ApiOut):
    # a flag setting's: enabled, offVariation, fallthrough, targets, prerequisites or rules;
    # the flag's own: a field of PATCH /flags/{key} or archived;
    # a segment's: name, description, included, excluded, includedContexts, excludedContexts or
    # rules
    field: str
    before: Any  # live now (for an applied request: what it replaced)
    after: Any  # as the request would set it
    changed: bool


class Moved(ApiOut, omit_defaults=True):
    """A field of a flag's setting, or of a segment, that changed since the request was based on
    it: ``flag`` or ``segment`` names it (the other is left out, so a flag's reads as before)."""

    field: str
    base: Any
    live: Any
    flag: str | None = None
    segment: str | None = None


class ItemChange(ApiOut):
    """One item of a request, against what is live: a flag setting's (``flag``, ``settings``
    and/or ``rules``), the flag's own (``flag``, ``flagPatch`` and/or ``archived``) or a
    segment's (``segment``, ``patch``)."""

    # the version the request was based on: the flag setting's, the flag's or the segment's
    base_version: int
    live_version: int | None  # now (null: the flag or segment is gone)
    moved: list[Moved]  # what moved underneath since: applying refuses while any did
    diff: list[FieldDiff]
    flag: str | None = None
    settings: dict[str, Any] | None = None  # as given
    rules: list[dict[str, Any]] | None = None
    segment: str | None = None
    patch: dict[str, Any] | None = None  # as given
    flag_patch: dict[str, Any] | None = None  # as given
    archived: bool | None = None


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
    # now: the environment's, or more if a segment it changes is used where more are required
    required_approvals: int
    approvals: int  # of the current version, by others than the author
    approved_by: list[str]
    changes: list[ItemChange]
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
