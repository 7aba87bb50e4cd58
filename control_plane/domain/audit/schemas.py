"""Audit entries as the API shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from control_plane.domain.schemas import ApiOut


class AuditEntry(ApiOut):
    id: str
    at: datetime
    actor: str  # the person's email, or the key's name (a service account)
    actor_key_id: str | None  # the key or personal token used (None: a console session)
    actor_user_id: str | None  # the person, if a person acted
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
