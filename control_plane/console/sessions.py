"""Console sign-in: a session stored on the server, keyed by the SHA-256 of an opaque cookie.

The cookie is ``HttpOnly; SameSite=Strict; Path=/console`` (``Secure`` behind HTTPS). A session
belongs to a person in one project (signed in with a password or through the identity
provider), or to a management key (a service account). It ends at sign-out, after ``idle``
without a request, at "sign out everywhere", or at the first request after its person is
deactivated or leaves the project, or its key is revoked: who it belongs to is checked on every
request, as the API checks a bearer key.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.auth import (
    KeyKind,
    Principal,
    find_principal,
    key_principal,
    person_principal,
)
from control_plane.db.models import ConsoleSession
from control_plane.db.types import utcnow
from shared.keys import hash_token

COOKIE = "vane_console"
TOUCH_EVERY = timedelta(seconds=60)  # seen_at is written at most this often per session


@dataclass(frozen=True, slots=True)
class SignedIn:
    """The person (or key) behind a console request, and their CSRF token."""

    principal: Principal
    csrf: str
    session_id: str


async def sign_in(session: AsyncSession, token: str) -> tuple[str, SignedIn] | None:
    """A new session for a live management key: (cookie value, who); None for any other key."""
    principal = await find_principal(session, token.strip())
    if principal is None or principal.kind is not KeyKind.MANAGEMENT:
        return None
    return await open_session(session, principal)


async def open_session(session: AsyncSession, principal: Principal) -> tuple[str, SignedIn]:
    """A new console session for ``principal`` (a person, or a management key): the cookie's
    value (never stored) and who it is."""
    cookie = secrets.token_urlsafe(32)
    row = ConsoleSession(
        id=hash_token(cookie),
        key_id=None if principal.user_id else principal.key_id,
        user_id=principal.user_id,
        project_id=principal.project_id,
        csrf=secrets.token_urlsafe(32),
    )
    session.add(row)
    await session.commit()
    return cookie, SignedIn(principal, row.csrf, row.id)


async def signed_in(
    session: AsyncSession, cookie: str, idle: timedelta, *, touch: bool = True
) -> SignedIn | None:
    """Who holds ``cookie``, if its session is live and its person or key still may. A request
    counts as activity (``touch``); an open page's live stream asking again does not."""
    now = utcnow()
    console = await session.scalar(
        select(ConsoleSession).where(ConsoleSession.id == hash_token(cookie))
    )
    if console is None:
        return None
    if console.seen_at + idle < now:
        await session.execute(delete(ConsoleSession).where(ConsoleSession.id == console.id))
        await session.commit()
        return None
    principal: Principal | None = None
    if console.user_id is not None and console.project_id is not None:
        principal = await person_principal(session, console.user_id, console.project_id)
    elif console.key_id is not None:
        principal = await key_principal(session, console.key_id)
        if principal is not None and principal.kind is not KeyKind.MANAGEMENT:
            principal = None
    if principal is None:
        return None
    if touch and console.seen_at + TOUCH_EVERY < now:
        await session.execute(
            update(ConsoleSession).where(ConsoleSession.id == console.id).values(seen_at=now)
        )
        await session.commit()
    return SignedIn(principal, console.csrf, console.id)


async def sign_out(session: AsyncSession, cookie: str) -> None:
    await session.execute(delete(ConsoleSession).where(ConsoleSession.id == hash_token(cookie)))
    await session.commit()
