"""Webhooks: saved per project, their secrets kept to sign with and never answered."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import select, update

from control_plane.access import Permission
from control_plane.db.ids import new_id
from control_plane.db.models import OutboxEvent, Webhook, WebhookDelivery
from control_plane.db.types import utcnow
from control_plane.domain.common import Scope
from control_plane.domain.paging import paged
from control_plane.domain.problems import Problems
from control_plane.domain.rows import BY_ID, find_by_key
from control_plane.domain.webhooks import outbox
from control_plane.domain.webhooks import schemas as s
from control_plane.domain.webhooks.addresses import url_problem
from control_plane.errors import ApiError, not_found

MAX_PATTERNS = 64
SECRET_MIN, SECRET_MAX = 16, 200


def webhook_out(row: Webhook, *, secret: str | None = None) -> s.Webhook:
    return s.Webhook(
        id=row.id,
        url=row.url,
        events=list(row.events),
        description=row.description,
        enabled=row.enabled,
        secret_hint="…" + row.secret[-4:],
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
        secret=secret if secret is not None else msgspec.UNSET,
    )


def _audited(out: s.Webhook) -> dict[str, Any]:
    return {"id": out.id, "url": out.url, "events": out.events, "enabled": out.enabled}


def _check(
    problems: Problems,
    policy: str,
    *,
    url: str | None = None,
    events: list[str] | None = None,
    secret: str | None = None,
    description: str | None = None,
) -> None:
    if url is not None and (problem := url_problem(url, policy)) is not None:
        problems.add("url", problem)
    if events is not None:
        if not events:
            problems.add("events", "name at least one event type or pattern (such as flag.* or *)")
        if len(events) > MAX_PATTERNS:
            problems.add("events", f"at most {MAX_PATTERNS} entries")
        for i, pattern in enumerate(events[:MAX_PATTERNS]):
            if not pattern or len(pattern) > 64 or not outbox.valid_pattern(pattern):
                problems.add(f"events[{i}]", f"{pattern!r} matches no event type")
    if secret is not None and not (SECRET_MIN <= len(secret) <= SECRET_MAX):
        problems.add("secret", f"between {SECRET_MIN} and {SECRET_MAX} characters")
    if description is not None and len(description) > 500:
        problems.add("description", "at most 500 characters")


async def create_webhook(scope: Scope, body: s.WebhookCreate, policy: str) -> s.Webhook:
    scope.require(Permission.ADMIN)
    problems = Problems()
    _check(
        problems,
        policy,
        url=body.url,
        events=body.events,
        secret=body.secret,
        description=body.description,
    )
    problems.raise_if_any()
    generated = None if body.secret is not None else "whsec_" + secrets.token_urlsafe(32)
    now = utcnow()
    row = Webhook(
        id=new_id("whk"),
        project_id=scope.project_id,
        url=body.url,
        events=list(dict.fromkeys(body.events)),
        secret=body.secret if body.secret is not None else generated,
        description=body.description,
        enabled=body.enabled,
        version=1,
        created_at=now,
        updated_at=now,
    )
    scope.session.add(row)
    await scope.session.flush()
    out = webhook_out(row)
    scope.audit("webhook.create", "webhook", row.id, after=_audited(out))
    return webhook_out(row, secret=generated)


async def _find(scope: Scope, webhook_id: str) -> Webhook:
    return await find_by_key(scope, Webhook, "webhook", webhook_id, by=BY_ID)


async def list_webhooks(scope: Scope, *, limit: int, cursor: str | None) -> s.WebhookList:
    async def convert(rows: list[Webhook]) -> list[s.Webhook]:
        return [webhook_out(r) for r in rows]

    query = select(Webhook).where(Webhook.project_id == scope.project_id)
    found = await paged(
        scope, query, Webhook.id, list_name="webhooks", limit=limit, cursor=cursor, convert=convert
    )
    return s.WebhookList(
        webhooks=found.items,
        count=len(found.items),
        next_cursor=found.next_cursor,
        has_more=found.has_more,
    )


async def get_webhook(scope: Scope, webhook_id: str) -> s.Webhook:
    return webhook_out(await _find(scope, webhook_id))


async def patch_webhook(
    scope: Scope, webhook_id: str, body: s.WebhookPatch, policy: str
) -> s.Webhook:
    scope.require(Permission.ADMIN)
    row = await _find(scope, webhook_id)
    await _expect_current(scope, row)
    before = _audited(webhook_out(row))
    given = {f: getattr(body, f) for f in body.__struct_fields__}
    present = {f: v for f, v in given.items() if v is not msgspec.UNSET}
    problems = Problems()
    _check(
        problems,
        policy,
        url=present.get("url"),
        events=present.get("events"),
        secret=present.get("secret"),
        description=present.get("description"),
    )
    problems.raise_if_any()
    if "events" in present:
        present["events"] = list(dict.fromkeys(present["events"]))
    for name, value in present.items():
        setattr(row, name, value)
    if present:
        row.version += 1
    row.updated_at = utcnow()
    await scope.session.flush()
    out = webhook_out(row)
    scope.audit("webhook.update", "webhook", row.id, before=before, after=_audited(out))
    return out


async def _expect_current(scope: Scope, row: Webhook) -> None:
    await scope.expect_version(Webhook, Webhook.version, row.version, Webhook.id == row.id)


async def delete_webhook(scope: Scope, webhook_id: str) -> s.Deleted:
    scope.require(Permission.ADMIN)
    row = await _find(scope, webhook_id)
    await _expect_current(scope, row)
    before = _audited(webhook_out(row))
    events = list(
        await scope.session.scalars(
            select(WebhookDelivery.event_id).where(WebhookDelivery.webhook_id == webhook_id)
        )
    )
    await scope.session.delete(row)
    await scope.session.flush()
    await outbox.forget_secrets(scope.session, events)  # its deliveries went with it
    scope.audit("webhook.delete", "webhook", webhook_id, before=before)
    return s.Deleted(id=webhook_id, deleted=True)


def delivery_out(row: WebhookDelivery, event: OutboxEvent) -> s.Delivery:
    return s.Delivery(
        id=row.id,
        webhook_id=row.webhook_id,
        event_id=row.event_id,
        type=event.type,
        status=row.status,
        attempts=row.attempts,
        last_status_code=row.last_status_code,
        last_error=row.last_error,
        next_attempt_at=row.next_attempt_at if row.status == "pending" else None,
        delivered_at=row.delivered_at,
        created_at=row.created_at,
        log=[_attempt(a) for a in row.log],
        data=outbox.without_secrets(event.type, event.data),
    )


def _attempt(entry: dict[str, Any]) -> s.Attempt:
    return s.Attempt(
        attempt=int(entry["attempt"]),
        at=datetime.fromisoformat(entry["at"]),
        status_code=entry.get("statusCode"),
        error=str(entry.get("error", "")),
        duration_ms=int(entry.get("durationMs", 0)),
    )


async def deliveries(
    scope: Scope, webhook_id: str, *, limit: int, cursor: str | None, status: str | None
) -> s.DeliveryList:
    """A webhook's deliveries, newest first: an admin's, as webhooks are (an event's fields
    meant for its receivers alone are never listed: ``outbox.SECRETS``)."""
    scope.require(Permission.ADMIN)
    await _find(scope, webhook_id)
    query = (
        select(WebhookDelivery, OutboxEvent)
        .join(OutboxEvent, OutboxEvent.id == WebhookDelivery.event_id)
        .where(WebhookDelivery.webhook_id == webhook_id)
    )
    if status:
        query = query.where(WebhookDelivery.status == status)

    async def convert(rows: list[tuple[WebhookDelivery, OutboxEvent]]) -> list[s.Delivery]:
        return [delivery_out(d, e) for d, e in rows]

    found = await paged(
        scope,
        query,
        WebhookDelivery.id,
        list_name="deliveries",
        limit=limit,
        cursor=cursor,
        convert=convert,
        descending=True,
    )
    return s.DeliveryList(
        deliveries=found.items,
        count=len(found.items),
        next_cursor=found.next_cursor,
        has_more=found.has_more,
    )


async def redeliver(scope: Scope, webhook_id: str, delivery_id: str) -> s.Delivery:
    """Send again now, with the same ``id`` (a receiver that has it drops the repeat); a failed
    delivery gets a fresh round of attempts."""
    scope.require(Permission.ADMIN)
    await _find(scope, webhook_id)
    found = (
        await scope.session.execute(
            select(WebhookDelivery, OutboxEvent)
            .join(OutboxEvent, OutboxEvent.id == WebhookDelivery.event_id)
            .where(WebhookDelivery.webhook_id == webhook_id, WebhookDelivery.id == delivery_id)
        )
    ).first()
    if found is None:
        raise not_found("delivery", delivery_id)
    row, event = found
    if row.status == "pending" and row.lease_until is not None and row.lease_until > utcnow():
        raise ApiError(409, f"delivery {delivery_id!r} is being sent right now")
    await scope.session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id)
        .values(status="pending", attempts=0, next_attempt_at=utcnow(), lease_until=None)
        .execution_options(synchronize_session="fetch")
    )
    await scope.session.refresh(row)
    scope.audit("webhook.redeliver", "webhook", webhook_id, after={"delivery": delivery_id})
    return delivery_out(row, event)
