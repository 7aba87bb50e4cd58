"""Fans outbox events out into deliveries and sends the deliveries that are due.

Runs in every control-plane replica as a background task; what it works on is claimed in the
database, never held in memory, so a restart loses nothing and two replicas do not normally send
the same delivery twice:

- fan-out claims an event by setting ``dispatched_at`` with a conditional UPDATE (``WHERE
  dispatched_at IS NULL``) in the transaction that inserts its deliveries;
- sending claims a delivery with a lease (``lease_until``/``lease_owner``, the same kind of
  conditional UPDATE), sends it outside any transaction, then records the attempt. A replica that
  dies while sending leaves a lease that expires, and the delivery is sent again: at least once,
  with the same ``id`` for the receiver to de-duplicate.

Once no delivery of an event is pending, the fields meant for its receivers alone (an
invitation's link: ``outbox.SECRETS``) are taken out of the stored event.

Deliveries that are done with (delivered or failed) are deleted once older than the retention
(``VANE_WEBHOOK_RETENTION_DAYS``, 30 by default), with the events no delivery refers to any more;
a pending delivery stays until it is sent or fails. The ids sort by creation, so that is a range
delete on the primary keys, run at most hourly.

On PostgreSQL a second replica's conditional UPDATE waits for the first one's row lock and then
finds the row taken; on SQLite writers queue (``BEGIN IMMEDIATE``). Either way one claim wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from dataclasses import dataclass
from datetime import timedelta
from email.utils import parsedate_to_datetime
from functools import cache
from typing import Any, cast

import httpx
import msgspec
from sqlalchemy import CursorResult, delete, exists, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.db.ids import first_id_at, new_id
from control_plane.db.models import OutboxEvent, Webhook, WebhookDelivery
from control_plane.db.types import utcnow
from control_plane.domain.webhooks import outbox
from control_plane.domain.webhooks.addresses import destination
from control_plane.domain.webhooks.signing import HEADER, signature
from shared.backoff import backoff_delay

logger = logging.getLogger("vane.webhooks")

BATCH = 50
LOG_KEEP = 20  # attempts kept in a delivery's log (the count keeps counting)
USER_AGENT = "Vane-Webhooks/1"


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    replica_id: str
    poll_s: float = 0.5
    timeout_s: float = 10.0
    max_attempts: int = 8
    backoff_s: float = 5.0
    backoff_cap_s: float = 3600.0
    private: str = "none"
    retention: timedelta = timedelta(days=30)

    @property
    def prune_every_s(self) -> float:
        return min(3600.0, self.retention.total_seconds() / 10)

    @property
    def lease(self) -> timedelta:
        """Longer than any attempt can take (resolving, then the request's own timeout)."""
        return timedelta(seconds=2 * self.timeout_s + 5)


def _rowcount(result: Any) -> int:
    return cast(CursorResult[Any], result).rowcount


def payload(delivery_id: str, event: OutboxEvent) -> bytes:
    return msgspec.json.encode(
        {
            "id": delivery_id,
            "type": event.type,
            "createdAt": event.created_at,
            "data": event.data,
        }
    )


@cache
def _tls() -> ssl.SSLContext:
    """The certificate authorities the deliveries are checked against, read once a process:
    httpx reads its whole bundle for every client (30 ms of CPU), and the app, with its
    dispatcher, may start many times in one process (the tests start it thousands of times)."""
    return httpx.create_ssl_context(trust_env=False)


class Dispatcher:
    def __init__(
        self, sessionmaker: async_sessionmaker[AsyncSession], settings: DispatchSettings
    ) -> None:
        self.sessionmaker = sessionmaker
        self.settings = settings

    async def run(self) -> None:
        async with httpx.AsyncClient(
            timeout=self.settings.timeout_s,
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
            trust_env=False,
            verify=_tls(),
        ) as client:
            pruned_at = float("-inf")
            while True:
                try:
                    await self.fan_out()
                    await self.send_due(client)
                    if time.monotonic() - pruned_at >= self.settings.prune_every_s:
                        pruned_at = time.monotonic()
                        await self.prune()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("webhook dispatch failed; retrying")
                await asyncio.sleep(self.settings.poll_s)

    async def prune(self) -> tuple[int, int]:
        """Delete the deliveries done with before the retention, then the events no delivery
        refers to any more (fanned out before it); how many of each."""
        cutoff_ms = int((time.time() - self.settings.retention.total_seconds()) * 1000)
        async with self.sessionmaker() as session, session.begin():
            deliveries = await session.execute(
                delete(WebhookDelivery)
                .where(
                    WebhookDelivery.id < first_id_at("dlv", cutoff_ms),
                    WebhookDelivery.status != "pending",
                )
                .execution_options(synchronize_session=False)
            )
            events = await session.execute(
                delete(OutboxEvent)
                .where(
                    OutboxEvent.id < first_id_at("evt", cutoff_ms),
                    OutboxEvent.dispatched_at.is_not(None),
                    ~exists().where(WebhookDelivery.event_id == OutboxEvent.id),
                )
                .execution_options(synchronize_session=False)
            )
        counts = _rowcount(deliveries), _rowcount(events)
        if any(counts):
            logger.info("pruned %d webhook deliveries and %d events", *counts)
        return counts

    async def fan_out(self) -> int:
        """One delivery per event and webhook that matches it, is enabled now and existed when
        the event was written; events nobody wants are dropped."""
        made = 0
        async with self.sessionmaker() as session, session.begin():
            events = list(
                await session.scalars(
                    select(OutboxEvent)
                    .where(OutboxEvent.dispatched_at.is_(None))
                    .order_by(OutboxEvent.id)
                    .limit(BATCH)
                )
            )
            hooks: dict[str, list[Webhook]] = {}
            now = utcnow()
            for event in events:
                claimed = await session.execute(
                    update(OutboxEvent)
                    .where(OutboxEvent.id == event.id, OutboxEvent.dispatched_at.is_(None))
                    .values(dispatched_at=now)
                    .execution_options(synchronize_session=False)
                )
                if _rowcount(claimed) != 1:
                    continue
                if event.project_id not in hooks:
                    hooks[event.project_id] = list(
                        await session.scalars(
                            select(Webhook).where(
                                Webhook.project_id == event.project_id, Webhook.enabled.is_(True)
                            )
                        )
                    )
                wanted = [
                    h
                    for h in hooks[event.project_id]
                    if outbox.matches(h.events, event.type) and h.created_at <= event.created_at
                ]
                if not wanted:
                    await session.execute(delete(OutboxEvent).where(OutboxEvent.id == event.id))
                    continue
                for hook in wanted:
                    session.add(
                        WebhookDelivery(
                            id=new_id("dlv"),
                            webhook_id=hook.id,
                            event_id=event.id,
                            status="pending",
                            attempts=0,
                            next_attempt_at=now,
                            last_error="",
                            log=[],
                            created_at=now,
                        )
                    )
                    made += 1
        return made

    async def claim_due(self) -> list[str]:
        now = utcnow()
        free = or_(WebhookDelivery.lease_until.is_(None), WebhookDelivery.lease_until < now)
        claimed: list[str] = []
        async with self.sessionmaker() as session, session.begin():
            due = list(
                await session.scalars(
                    select(WebhookDelivery.id)
                    .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                    .where(
                        WebhookDelivery.status == "pending",
                        WebhookDelivery.next_attempt_at <= now,
                        free,
                        Webhook.enabled.is_(True),
                    )
                    .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
                    .limit(BATCH)
                )
            )
            for delivery_id in sorted(due):
                result = await session.execute(
                    update(WebhookDelivery)
                    .where(
                        WebhookDelivery.id == delivery_id,
                        WebhookDelivery.status == "pending",
                        free,
                    )
                    .values(
                        lease_until=now + self.settings.lease, lease_owner=self.settings.replica_id
                    )
                    .execution_options(synchronize_session=False)
                )
                if _rowcount(result) == 1:
                    claimed.append(delivery_id)
        return claimed

    async def send_due(self, client: httpx.AsyncClient) -> int:
        claimed = await self.claim_due()
        if claimed:
            outcomes = await asyncio.gather(
                *(self.attempt(client, d) for d in claimed), return_exceptions=True
            )
            for outcome in outcomes:
                if isinstance(outcome, Exception):
                    logger.error("webhook delivery failed to record", exc_info=outcome)
        return len(claimed)

    async def attempt(self, client: httpx.AsyncClient, delivery_id: str) -> None:
        async with self.sessionmaker() as session:
            found = (
                await session.execute(
                    select(WebhookDelivery, Webhook, OutboxEvent)
                    .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                    .join(OutboxEvent, OutboxEvent.id == WebhookDelivery.event_id)
                    .where(WebhookDelivery.id == delivery_id)
                )
            ).first()
        if found is None:  # the webhook was deleted meanwhile
            return
        delivery, hook, event = found
        body = payload(delivery.id, event)
        started = time.monotonic()
        status_code: int | None = None
        retry_after = 0.0
        target = await destination(hook.url, self.settings.private, self.settings.timeout_s)
        error = target.problem
        if error is None:
            stamp = int(time.time())
            url, pinned, extensions = target.request(hook.url)  # the address just checked
            try:
                response = await asyncio.wait_for(  # a total bound: httpx's is per phase
                    client.post(
                        url,
                        content=body,
                        headers={
                            **pinned,
                            "Content-Type": "application/json",
                            HEADER: signature(hook.secret, body, stamp),
                            "Vane-Delivery": delivery.id,
                            "Vane-Event-Type": event.type,
                        },
                        extensions=extensions,
                    ),
                    self.settings.timeout_s,
                )
                status_code = response.status_code
                if not 200 <= status_code < 300:
                    error = f"answered {status_code}"
                    retry_after = _retry_after(response.headers.get("Retry-After"))
            except TimeoutError:
                error = f"no answer within {self.settings.timeout_s:g} s"
            except Exception as exc:  # whatever the URL or the peer did is this attempt's error
                error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        await self.record(delivery_id, status_code, error, started, retry_after)

    async def record(
        self,
        delivery_id: str,
        status_code: int | None,
        error: str | None,
        started: float,
        retry_after: float,
    ) -> None:
        now = utcnow()
        async with self.sessionmaker() as session, session.begin():
            row = await session.get(WebhookDelivery, delivery_id)
            if row is None or row.lease_owner != self.settings.replica_id:
                return  # deleted, or the lease ran out and another replica took it over
            row.attempts += 1
            entry = {
                "attempt": row.attempts,
                "at": now.isoformat(),
                "statusCode": status_code,
                "error": error or "",
                "durationMs": int((time.monotonic() - started) * 1000),
            }
            row.log = [*row.log, entry][-LOG_KEEP:]
            row.last_status_code = status_code
            row.last_error = error or ""
            row.lease_until = None
            row.lease_owner = None
            if error is None:
                row.status = "delivered"
                row.delivered_at = now
                row.next_attempt_at = None
                await outbox.forget_secrets(session, [row.event_id])
            elif row.attempts >= self.settings.max_attempts:
                row.status = "failed"
                row.next_attempt_at = None
                await outbox.forget_secrets(session, [row.event_id])
            else:
                wait = backoff_delay(
                    row.attempts, base=self.settings.backoff_s, cap=self.settings.backoff_cap_s
                )
                wait = max(wait, min(retry_after, self.settings.backoff_cap_s))
                row.next_attempt_at = now + timedelta(seconds=wait)


def _retry_after(value: str | None) -> float:
    if not value:
        return 0.0
    if value.strip().isdigit():
        return float(value.strip())
    with contextlib.suppress(TypeError, ValueError):
        return max(0.0, (parsedate_to_datetime(value) - utcnow()).total_seconds())
    return 0.0
