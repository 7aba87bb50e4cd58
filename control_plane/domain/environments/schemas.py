from __future__ import annotations

from datetime import datetime
from typing import Annotated

from msgspec import UNSET, Meta, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut

MAX_APPROVALS = 5
_APPROVALS = (
    "Approvals (0 to 5) a change to what the environment serves needs, as a change request; "
    "0 (the default): not protected"
)
Approvals = Annotated[int, Meta(ge=0, le=MAX_APPROVALS, description=_APPROVALS)]
"""An environment's ``requiredApprovals``: the bodies' decoding refuses a number outside it (422
naming the field), and the OpenAPI document shows its bounds. The services check it again for the
callers that build a body themselves (the console's form)."""
ApprovalsPatch = Annotated[
    int,
    Meta(
        ge=0,
        le=MAX_APPROVALS,
        description=_APPROVALS,
        # Litestar drops a bound of 0 from a field that may be UNSET (it tests the bound's
        # truth): given again as its own schema's ``minimum``
        extra_json_schema={"extra": {"minimum": 0}},
    ),
]
"""``Approvals`` in a patch (``ApprovalsPatch | UnsetType``)."""


class EnvironmentCreate(ApiIn):
    key: str
    name: str | None = None
    copy_from: str | None = None  # an environment whose flag settings, rules and targets to copy
    critical: bool | None = None  # toggles ask for confirmation in the console; default: production
    required_approvals: Approvals = 0


class EnvironmentPatch(ApiIn):
    key: str | UnsetType = UNSET  # rename: keys bound to the environment stay bound
    name: str | UnsetType = UNSET
    critical: bool | UnsetType = UNSET
    required_approvals: ApprovalsPatch | UnsetType = UNSET


class EnvironmentDeleted(ApiOut):
    key: str
    deleted: bool
    revoked_keys: list[str]


class Environment(ApiOut):
    id: str
    key: str
    name: str
    snapshot_version: int
    version: int
    created_at: datetime
    critical: bool = False
    required_approvals: int = 0  # above 0: protected, changes are made as change requests


class EnvironmentList(ApiOut):
    environments: list[Environment]
    count: int  # items on this page
    next_cursor: str | None = None
    has_more: bool = False
