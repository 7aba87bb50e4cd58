"""How a person signs in: a password (argon2id, through argon2-cffi), or a single-use link (an
invitation, or the sign-in link ``vane users create`` prints) with which they set it.

Failed password sign-ins are throttled per account and per client address, on every replica
(the failures are rows, counted in a window): past the limit a sign-in is refused with
``Retry-After`` before the password is even looked at. Each failure is logged and audited,
never with the password.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import timedelta
from functools import cache

import anyio
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.access import Role
from control_plane.auth import ACTIVE, Principal, person_principal
from control_plane.db.ids import new_id
from control_plane.db.models import (
    AuditEntry,
    Invitation,
    Membership,
    Project,
    SignInFailure,
    User,
)
from control_plane.db.types import utcnow
from control_plane.domain.people.services import DEACTIVATED
from control_plane.domain.problems import Problems
from control_plane.errors import ApiError
from shared.keys import hash_token

logger = logging.getLogger("vane.sign_in")

WINDOW = timedelta(minutes=15)
PER_ACCOUNT = 5  # failures per account in the window, then wait
PER_ADDRESS = 20  # failures from one client address in the window, then wait
MIN_PASSWORD = 10
MAX_PASSWORD = 1024

_HASHER = PasswordHasher()  # argon2id with the library's current parameters


@cache
def _dummy() -> str:
    """A hash to verify against for an unknown email, so that it costs the same time; made at
    the first sign-in, not at import (a third of a second of every start)."""
    return _HASHER.hash("not a password anyone has")


def _matches(stored: str | None, password: str) -> bool:
    try:
        _HASHER.verify(stored or _dummy(), password)
    except (VerificationError, InvalidHashError):
        return False
    return stored is not None


class Throttled(ApiError):
    def __init__(self, retry_after: int) -> None:
        super().__init__(
            429,
            f"too many failed sign-ins: try again in {retry_after} s",
            headers={"Retry-After": str(retry_after)},
        )
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Refused:
    """A sign-in that did not go through, with what the person is told (the same message
    whether the email is unknown or the password wrong)."""

    message: str = "That email and password do not match an active account."


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


async def hash_password_off_loop(password: str) -> str:
    """``hash_password`` in a worker thread: argon2 takes a tenth of a second or more of CPU,
    which the event loop's other requests would otherwise wait for."""
    return await anyio.to_thread.run_sync(hash_password, password)


def password_problem(password: str) -> str | None:
    if len(password) < MIN_PASSWORD:
        return f"at least {MIN_PASSWORD} characters"
    if len(password) > MAX_PASSWORD:
        return f"at most {MAX_PASSWORD} characters"
    if not password.strip():
        return "not only spaces"
    return None


async def _retry_after(session: AsyncSession, email: str, address: str) -> int:
    """Seconds until a sign-in for ``email`` from ``address`` may be tried again (0: now)."""
    since = utcnow() - WINDOW
    waits = []
    for column, value, limit in (
        (SignInFailure.email, email, PER_ACCOUNT),
        (SignInFailure.address, address, PER_ADDRESS),
    ):
        recent = (
            await session.execute(
                select(func.count(), func.min(SignInFailure.at)).where(
                    column == value, SignInFailure.at > since
                )
            )
        ).one()
        count, oldest = recent
        if count >= limit and oldest is not None:
            waits.append((oldest + WINDOW - utcnow()).total_seconds())
    return max((math.ceil(w) for w in waits if w > 0), default=0)


async def sign_in_with_password(
    session: AsyncSession, email: str, password: str, address: str
) -> Principal | Refused:
    """The person, acting in their first project, if ``password`` is theirs and they are
    active; ``Refused`` otherwise (recorded); ``Throttled`` (429) past the limits."""
    email = email.strip().lower()[:320]
    address = address[:64]
    wait = await _retry_after(session, email, address)
    if wait:
        await session.rollback()
        raise Throttled(wait)
    user = await session.scalar(select(User).where(User.email == email))
    stored = user.password_hash if user is not None else None
    matched = await anyio.to_thread.run_sync(_matches, stored, password)
    principal = None
    if matched and user is not None and user.state == ACTIVE:
        principal = await first_project_principal(session, user.id)
    if principal is None:
        await _failed(session, email, address, user)
        return Refused()
    assert user is not None
    assert stored is not None
    if _HASHER.check_needs_rehash(stored):
        user.password_hash = await hash_password_off_loop(password)
    await session.execute(delete(SignInFailure).where(SignInFailure.email == email))
    await session.commit()
    return principal


async def first_project(session: AsyncSession, user_id: str) -> str | None:
    """The project a person joined first: the one they act in when they sign in."""
    project_id: str | None = await session.scalar(
        select(Membership.project_id)
        .where(Membership.user_id == user_id)
        .order_by(Membership.created_at)
        .limit(1)
    )
    return project_id


async def first_project_principal(session: AsyncSession, user_id: str) -> Principal | None:
    """A person acting in the project they joined first."""
    project_id = await first_project(session, user_id)
    if project_id is None:
        return None
    return await person_principal(session, user_id, project_id)


async def _failed(session: AsyncSession, email: str, address: str, user: User | None) -> None:
    # what throttling no longer counts is forgotten as new failures come (the table stays small)
    await session.execute(delete(SignInFailure).where(SignInFailure.at <= utcnow() - WINDOW))
    session.add(SignInFailure(id=new_id("sif"), email=email, address=address))
    reason = (
        "unknown email"
        if user is None
        else ("deactivated" if user.state == DEACTIVATED else "wrong password")
    )
    if user is not None:  # audited where the person is a member: their admins see it
        projects = await session.scalars(
            select(Membership.project_id).where(Membership.user_id == user.id)
        )
        for project_id in projects:
            session.add(
                AuditEntry(
                    id=new_id("aud"),
                    project_id=project_id,
                    actor=email,
                    actor_user_id=user.id,
                    action="user.sign_in_failed",
                    resource_type="user",
                    resource_key=email,
                    after={"address": address, "reason": reason},
                )
            )
    await session.commit()
    logger.warning("failed sign-in for %s from %s: %s", email, address, reason)


# ------------------------------------------------------------------- single-use links


async def pending_link(session: AsyncSession, token: str) -> Invitation | None:
    """The live invitation or sign-in link of ``token`` (unused, unexpired)."""
    row = await session.scalar(select(Invitation).where(Invitation.token_hash == hash_token(token)))
    if row is None or row.used_at is not None or row.expires_at <= utcnow():
        return None
    return row


async def use_link(session: AsyncSession, token: str, name: str, password: str) -> Principal:
    """Join (an invitation) or set one's password (a sign-in link), once: the link is used up
    in the same transaction. 422 naming the field for a bad name or password; 404 for a link
    that is unknown, used or expired."""
    row = await pending_link(session, token)
    if row is None:
        raise ApiError(404, "this link is unknown, used or expired: ask an admin for a new one")
    problems = Problems()
    if len(name.strip()) > 200:
        problems.add("name", "at most 200 characters")
    user = (
        await session.get(User, row.user_id)
        if row.user_id
        else await session.scalar(select(User).where(User.email == row.email))
    )
    needs_password = user is None or user.password_hash is None or bool(password)
    if needs_password and (problem := password_problem(password)) is not None:
        problems.add("password", problem)
    problems.raise_if_any()
    if user is None:
        user = User(id=new_id("usr"), email=row.email, name=name.strip(), state=ACTIVE)
        session.add(user)
    elif user.state != ACTIVE:
        raise ApiError(403, "this account is deactivated: ask an admin")
    if name.strip():
        user.name = name.strip()
    if password:
        user.password_hash = await hash_password_off_loop(password)
        user.must_change_password = False
    member = await session.get(Membership, (row.project_id, user.id))
    if member is None:
        session.add(
            Membership(
                project_id=row.project_id,
                user_id=user.id,
                role=row.role,
                may_turn_off=row.role == Role.ADMIN.value,
            )
        )
    row.used_at = utcnow()
    await session.flush()
    principal = await person_principal(session, user.id, row.project_id)
    assert principal is not None
    session.add(
        AuditEntry(
            id=new_id("aud"),
            project_id=row.project_id,
            actor=user.email,
            actor_user_id=user.id,
            action="user.join" if row.user_id is None else "user.password_set",
            resource_type="user",
            resource_key=user.email,
            after={"role": principal.role.value, "invitedBy": row.invited_by},
        )
    )
    await session.commit()
    return principal


# ------------------------------------------------------------------ the identity provider


async def _vouched_person(
    session: AsyncSession, subject: str, email: str, name: str
) -> User | Refused:
    """The person of ``subject``, else of the verified ``email`` (linked to the subject now),
    else a new one (not yet flushed); refused if deactivated or the email is another's."""
    user = await session.scalar(select(User).where(User.sso_subject == subject))
    if user is None:
        user = await session.scalar(select(User).where(User.email == email))
        if user is not None and user.sso_subject not in (None, subject):
            return Refused("This email belongs to another identity at the provider.")
    if user is None:
        user = User(
            id=new_id("usr"), email=email, name=name[:200], state=ACTIVE, sso_subject=subject
        )
        session.add(user)
        return user
    if user.state != ACTIVE:
        return Refused("This account is deactivated: ask an admin.")
    user.sso_subject = subject
    return user


async def sign_in_with_sso(
    session: AsyncSession,
    *,
    subject: str,
    email: str,
    name: str,
    role: Role | None,
    default_role: Role,
) -> Principal | Refused:
    """A person the identity provider vouches for (``control_plane.sso.finish`` checked the
    token, the verified email and the domain): found by their subject, else by their email
    (linked to the subject then), else created in the oldest project with ``role`` or
    ``default_role``. A role the provider's claim maps to is theirs at every sign-in."""
    role = Role(role) if role is not None else None
    default_role = Role(default_role)
    user = await _vouched_person(session, subject, email, name)
    if isinstance(user, Refused):
        return user
    joined = False  # a new person has no membership yet: they join below
    project_id = await first_project(session, user.id)
    if project_id is None:
        project_id = await session.scalar(select(Project.id).order_by(Project.id).limit(1))
        if project_id is None:
            return Refused("There is no project to sign in to yet.")
        given = role or default_role
        session.add(
            Membership(
                project_id=project_id,
                user_id=user.id,
                role=given.value,
                may_turn_off=given is Role.ADMIN,
            )
        )
        joined = True
    elif role is not None:
        member = await session.get(Membership, (project_id, user.id))
        if member is not None:
            member.role = role.value
    await session.flush()
    if joined:
        session.add(
            AuditEntry(
                id=new_id("aud"),
                project_id=project_id,
                actor=user.email,
                actor_user_id=user.id,
                action="user.join",
                resource_type="user",
                resource_key=user.email,
                after={"role": (role or default_role).value, "through": "sso"},
            )
        )
    principal = await person_principal(session, user.id, project_id)
    await session.commit()
    return principal if principal is not None else Refused()
