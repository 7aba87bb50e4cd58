"""The rule of an event's secrets (``outbox.forget_secrets``): once no delivery of it is pending,
the stored event keeps none. Two replicas recording an event's last two deliveries at the same
moment must not both see the other's still pending and both leave the secret behind: the
event's row is locked, so the second to commit waits for the first and sees its delivery done.
On PostgreSQL (SQLite serialises writers, so the race cannot happen there)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from control_plane.db.engine import make_async_engine
from control_plane.db.ids import new_id
from control_plane.db.models import OutboxEvent, Project, Webhook, WebhookDelivery
from control_plane.domain.webhooks import outbox

pytestmark = pytest.mark.postgres

INVITED = {"email": "ada@example.com", "url": "https://vane.example/console/invitations/secret"}


async def _event_with_two_pending_deliveries(session: AsyncSession) -> tuple[str, list[str]]:
    project = Project(id=new_id("prj"), key=new_id("p").lower(), name="p")
    hooks = [
        Webhook(
            id=new_id("whk"), project_id=project.id, url=f"https://hooks.example/{i}", secret="s"
        )
        for i in range(2)
    ]
    event = OutboxEvent(id=new_id("evt"), project_id=project.id, type="user.invited", data=INVITED)
    deliveries = [
        WebhookDelivery(id=new_id("dlv"), webhook_id=h.id, event_id=event.id) for h in hooks
    ]
    session.add(project)
    await session.flush()
    session.add_all([*hooks, event])
    await session.flush()
    session.add_all(deliveries)
    await session.commit()
    return event.id, [d.id for d in deliveries]


async def _delivered(session: AsyncSession, delivery_id: str) -> None:
    await session.execute(
        update(WebhookDelivery).where(WebhookDelivery.id == delivery_id).values(status="delivered")
    )


async def _blocked_or_done(engine: AsyncEngine, task: asyncio.Task[None]) -> None:
    """Until ``task`` waits on a row lock (the second replica's check, held until the first
    commits) or has finished (nothing held it: then the race runs as it would unlocked)."""
    async with AsyncSession(engine) as watch:
        while not task.done():
            waiting = await watch.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
            await watch.rollback()
            if waiting:
                return
            await asyncio.sleep(0.01)


async def _race(url: str, first_forgets_first: bool) -> dict[str, str]:
    engine = make_async_engine(url)
    try:
        async with AsyncSession(engine, expire_on_commit=False) as setup:
            event_id, (one, two) = await _event_with_two_pending_deliveries(setup)
        async with AsyncSession(engine) as a, AsyncSession(engine) as b:
            await _delivered(a, one)  # both replicas record their delivery, neither committed
            await _delivered(b, two)
            first, second = (a, b) if first_forgets_first else (b, a)
            await outbox.forget_secrets(first, [event_id])  # sees the other's still pending
            waiting = asyncio.create_task(outbox.forget_secrets(second, [event_id]))
            await _blocked_or_done(engine, waiting)
            await first.commit()
            await asyncio.wait_for(waiting, timeout=30)
            await second.commit()
        async with AsyncSession(engine) as read:
            stored = await read.get(OutboxEvent, event_id)
            assert stored is not None
            return dict(stored.data)
    finally:
        await engine.dispose()


@pytest.mark.parametrize("first_forgets_first", [True, False])
def test_two_replicas_recording_the_last_two_deliveries_at_once_leave_no_secret(
    postgres_url: str, first_forgets_first: bool
) -> None:
    data = asyncio.run(_race(postgres_url, first_forgets_first))
    assert data == {"email": "ada@example.com"}
