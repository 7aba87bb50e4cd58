from __future__ import annotations

from datetime import datetime

from control_plane.domain.schemas import ApiIn, ApiOut


class EnvironmentCreate(ApiIn):
    key: str
    name: str | None = None


class Environment(ApiOut):
    id: str
    key: str
    name: str
    snapshot_version: int
    created_at: datetime


class EnvironmentList(ApiOut):
    environments: list[Environment]
    count: int
