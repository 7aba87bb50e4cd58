"""Console sign-in: a session stored on the server, keyed by the SHA-256 of an opaque cookie.

The cookie is ``HttpOnly; SameSite=Strict; Path=/console`` (``Secure`` behind HTTPS). A session
ends at sign-out, after ``idle`` without a request, or at the first request after its management
key is revoked: the key is checked on every request, as the API checks a bearer key.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.auth import KeyKind, Principal, find_principal
from control_plane.db.models import ApiKey, ConsoleSession
from control_plane.db.types import utcnow
from shared.keys import hash_token

COOKIE = "vane_console"
TOUCH_EVERY = timedelta(seconds=60)  # seen_at is written at most this often per session


@dataclass(frozen=True, slots=True)
class SignedIn:
    """The person behind a console request: the key they signed in with, and their CSRF token."""

    principal: Principal
    csrf: str
    session_id: str


async def sign_in(session: AsyncSession, token: str) -> tuple[str, SignedIn] | None:
    """A new session for a live management key: (cookie value, who); None for any other key."""
    principal = await find_principal(session, token.strip())
    if principal is None or principal.kind is not KeyKind.MANAGEMENT:
        return None
    cookie = secrets.token_urlsafe(32)
    row = ConsoleSession(
        id=hash_token(cookie), key_id=principal.key_id, csrf=secrets.token_urlsafe(32)
    )
    session.add(row)
    await session.commit()
    return cookie, SignedIn(principal, row.csrf, row.id)


async def signed_in(session: AsyncSession, cookie: str, idle: timedelta) -> SignedIn | None:
    """Who holds ``cookie``, if its session is live and its key is not revoked."""
    now = utcnow()
    row = (
        await session.execute(
            select(ConsoleSession, ApiKey.project_id, ApiKey.environment_id)
            .join(ApiKey, ApiKey.id == ConsoleSession.key_id)
            .where(
                ConsoleSession.id == hash_token(cookie),
                ApiKey.revoked_at.is_(None),
                ApiKey.kind == KeyKind.MANAGEMENT.value,
            )
        )
    ).first()
    if row is None:
        return None
    console, project_id, environment_id = row
    if console.seen_at + idle < now:
        await session.execute(delete(ConsoleSession).where(ConsoleSession.id == console.id))
        await session.commit()
        return None
    if console.seen_at + TOUCH_EVERY < now:
        await session.execute(
            update(ConsoleSession).where(ConsoleSession.id == console.id).values(seen_at=now)
        )
        await session.commit()
    principal = Principal(console.key_id, project_id, KeyKind.MANAGEMENT, environment_id)
    return SignedIn(principal, console.csrf, console.id)


async def sign_out(session: AsyncSession, cookie: str) -> None:
    await session.execute(delete(ConsoleSession).where(ConsoleSession.id == hash_token(cookie)))
    await session.commit()
