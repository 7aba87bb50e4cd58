"""Audit entries as the API shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from control_plane.domain.schemas import ApiOut


class AuditEntry(ApiOut):
    id: str
    at: datetime
    actor: str
    actor_key_id: str | None
    action: str
    resource_type: str
    resource_key: str
    environment: str | None
    before: Any
    after: Any


class AuditList(ApiOut):
    entries: list[AuditEntry]
    next_cursor: str | None
    has_more: bool = False
