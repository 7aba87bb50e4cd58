"""Request and response bodies of scheduled changes."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from msgspec import UNSET, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut
from control_plane.domain.targeting.schemas import ServeIn


class ScheduleIn(ApiIn):
    """``{at, enabled}`` (a toggle) or ``{at, fallthrough}`` (a rollout step): exactly one."""

    at: datetime
    enabled: bool | None = None
    fallthrough: ServeIn | None = None


class ScheduledChange(ApiOut):
    id: str
    flag: str
    environment: str
    at: datetime
    kind: Literal["toggle", "rollout"]
    status: Literal["pending", "done", "failed", "cancelled"]
    reason: str  # why it failed, or what it did
    created_by: str
    created_at: datetime
    finished_at: datetime | None
    enabled: bool | UnsetType = UNSET
    fallthrough: dict[str, Any] | UnsetType = UNSET


class ScheduleList(ApiOut):
    schedules: list[ScheduledChange]
    count: int  # items on this page
    next_cursor: str | None = None  # null on the last page
    has_more: bool = False
