from __future__ import annotations

from datetime import datetime

from msgspec import UNSET, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut


class EnvironmentCreate(ApiIn):
    key: str
    name: str | None = None
    copy_from: str | None = None  # an environment whose flag settings, rules and targets to copy
    critical: bool | None = None  # toggles ask for confirmation in the console; default: production
    # approvals (0 to 5) a change to what it serves needs, as a change request; 0: none
    required_approvals: int = 0


class EnvironmentPatch(ApiIn):
    key: str | UnsetType = UNSET  # rename: keys bound to the environment stay bound
    name: str | UnsetType = UNSET
    critical: bool | UnsetType = UNSET
    required_approvals: int | UnsetType = UNSET


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
