"""Request and response bodies of the webhooks API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from msgspec import UNSET, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut


class WebhookCreate(ApiIn):
    url: str
    events: list[str]
    secret: str | None = None  # generated (and answered once) when left out
    description: str = ""
    enabled: bool = True


class WebhookPatch(ApiIn):
    url: str | UnsetType = UNSET
    events: list[str] | UnsetType = UNSET
    secret: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET


class Webhook(ApiOut):
    id: str
    url: str
    events: list[str]
    description: str
    enabled: bool
    secret_hint: str  # the secret's last characters; the secret itself is never answered
    version: int  # answered as ETag; PATCH and DELETE take it in If-Match
    created_at: datetime
    updated_at: datetime
    secret: str | UnsetType = UNSET  # only in the answer that generated it


class WebhookList(ApiOut):
    webhooks: list[Webhook]
    count: int  # items on this page
    next_cursor: str | None = None  # null on the last page
    has_more: bool = False


class Deleted(ApiOut):
    id: str
    deleted: bool


class Attempt(ApiOut):
    attempt: int
    at: datetime
    status_code: int | None
    error: str
    duration_ms: int


class Delivery(ApiOut):
    id: str  # the ``id`` of the payload: the same on every attempt and redelivery
    webhook_id: str
    event_id: str
    type: str
    status: str  # pending | delivered | failed
    attempts: int
    last_status_code: int | None
    last_error: str
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    created_at: datetime
    log: list[Attempt]
    data: Any


class DeliveryList(ApiOut):
    deliveries: list[Delivery]
    count: int  # items on this page
    next_cursor: str | None = None  # null on the last page
    has_more: bool = False
