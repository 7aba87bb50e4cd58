"""People of a project: their roles, invitations (single-use links), deactivation, and the
personal tokens through which a person calls the API as themselves.

A person is one row of ``users`` whatever projects they belong to; a ``membership`` gives them
a role in a project. Deactivating a person ends their console sessions at once and stops their
tokens at the next request (``control_plane.auth`` checks the person on every lookup); their
history stays.
"""

from __future__ import annotations

import re
import secrets
from datetime import timedelta

from msgspec import UNSET
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.access import Permission, Role, at_most
from control_plane.auth import ACTIVE, KeyKind, new_api_key
from control_plane.db.ids import new_id
from control_plane.db.models import ApiKey, ConsoleSession, Invitation, Membership, User
from control_plane.db.types import utcnow
from control_plane.domain.common import Scope
from control_plane.domain.people import schemas as s
from control_plane.domain.problems import Problems
from control_plane.errors import ApiError, conflict, not_found
from shared.keys import hash_token

INVITATION_TTL = timedelta(days=7)
SIGN_IN_LINK_TTL = timedelta(hours=24)
WELCOME_PATH = "/console/welcome/"
MAX_TOKENS = 50  # live personal tokens per person and project
_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]{1,255}$")
DEACTIVATED = "deactivated"


def normal_email(problems: Problems, field: str, email: str) -> str:
    """An email as stored (trimmed, lowercased), or a problem naming ``field``."""
    email = email.strip().lower()
    if len(email) > 320 or not _EMAIL.match(email):
        problems.add(field, "an email address, like alice@example.com")
    return email


def person_out(user: User, member: Membership) -> s.Person:
    ways = (["password"] if user.password_hash else []) + (["sso"] if user.sso_subject else [])
    return s.Person(
        id=user.id,
        email=user.email,
        name=user.name,
        state=user.state,
        role=member.role,
        may_turn_off=member.may_turn_off,
        signs_in_with=ways,
        created_at=user.created_at,
        deactivated_at=user.deactivated_at,
    )


def invitation_out(row: Invitation) -> s.Invitation:
    return s.Invitation(
        id=row.id,
        email=row.email,
        role=row.role,
        invited_by=row.invited_by,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


async def list_people(scope: Scope) -> s.People:
    scope.require(Permission.READ)
    rows = await scope.session.execute(
        select(User, Membership)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.project_id == scope.project_id)
        .order_by(User.email)
    )
    pending = await scope.session.scalars(
        select(Invitation)
        .where(
            Invitation.project_id == scope.project_id,
            Invitation.user_id.is_(None),
            Invitation.used_at.is_(None),
            Invitation.expires_at > utcnow(),
        )
        .order_by(Invitation.created_at)
    )
    return s.People(
        people=[person_out(user, member) for user, member in rows],
        invitations=[invitation_out(row) for row in pending],
    )


async def invite(scope: Scope, body: s.InvitationCreate, base_url: str) -> s.CreatedInvitation:
    """A single-use link to join the project with ``role``, shown once; the webhook event
    ``user.invited`` carries it, so a team can deliver it without a mail server here."""
    scope.require(Permission.ADMIN)
    problems = Problems()
    email = normal_email(problems, "email", body.email)
    problems.raise_if_any()
    member = await scope.session.scalar(
        select(Membership.user_id)
        .join(User, User.id == Membership.user_id)
        .where(Membership.project_id == scope.project_id, User.email == email)
    )
    if member is not None:
        raise conflict(f"{email} is already a member of this project")
    row, token = new_invitation(
        scope.project_id, email, Role(body.role), scope.actor.label, INVITATION_TTL
    )
    scope.session.add(row)
    await scope.session.flush()
    out = invitation_out(row)
    url = base_url.rstrip("/") + WELCOME_PATH + token
    scope.audit("user.invite", "user", email, after=out)
    scope.announce(
        "user.invited",
        {
            "invitationId": row.id,
            "email": email,
            "role": row.role,
            "url": url,  # for the receivers alone: see webhooks.outbox.SECRETS
            "expiresAt": row.expires_at.isoformat(),
            "invitedBy": scope.actor.label,
        },
    )
    return s.CreatedInvitation(**{f: getattr(out, f) for f in out.__struct_fields__}, url=url)


def new_invitation(
    project_id: str,
    email: str,
    role: Role,
    invited_by: str,
    ttl: timedelta,
    *,
    user_id: str | None = None,
) -> tuple[Invitation, str]:
    """An invitation row and its token (never stored: only its hash is)."""
    token = secrets.token_urlsafe(32)
    now = utcnow()
    row = Invitation(
        id=new_id("inv"),
        project_id=project_id,
        email=email,
        role=role.value,
        user_id=user_id,
        token_hash=hash_token(token),
        invited_by=invited_by[:200],
        created_at=now,
        expires_at=now + ttl,
    )
    return row, token


async def revoke_invitation(scope: Scope, invitation_id: str) -> s.Invitation:
    scope.require(Permission.ADMIN)
    row = await scope.session.scalar(
        select(Invitation).where(
            Invitation.project_id == scope.project_id,
            Invitation.id == invitation_id,
            Invitation.used_at.is_(None),
        )
    )
    if row is None:
        raise not_found("invitation", invitation_id)
    out = invitation_out(row)
    await scope.session.delete(row)
    await scope.session.flush()
    scope.audit("user.uninvite", "user", row.email, before=out)
    return out


async def _member(scope: Scope, user_id: str) -> tuple[User, Membership]:
    row = (
        await scope.session.execute(
            select(User, Membership)
            .join(Membership, Membership.user_id == User.id)
            .where(Membership.project_id == scope.project_id, User.id == user_id)
        )
    ).first()
    if row is None:
        raise not_found("person", user_id)
    user, member = row
    return user, member


async def get_person(scope: Scope, user_id: str) -> s.Person:
    scope.require(Permission.READ)
    user, member = await _member(scope, user_id)
    return person_out(user, member)


async def patch_person(scope: Scope, user_id: str, body: s.PersonPatch) -> s.Person:
    """Change a person's role, "may turn off", or state. Deactivating ends their sessions at
    once and their tokens at the next request. Nobody deactivates or demotes themselves, and a
    project keeps one active admin."""
    scope.require(Permission.ADMIN)
    user, member = await _member(scope, user_id)
    before = person_out(user, member)
    self_edit = scope.actor.user_id == user.id
    demoted = body.role is not UNSET and body.role != Role.ADMIN.value
    deactivated = body.state == DEACTIVATED and user.state == ACTIVE
    if self_edit and (demoted or deactivated):
        raise conflict("you cannot demote or deactivate yourself: ask another admin")
    if member.role == Role.ADMIN.value and (demoted or deactivated):
        await _keep_an_admin(scope, user.id)
    if body.role is not UNSET:
        member.role = str(body.role)
    if body.may_turn_off is not UNSET:
        member.may_turn_off = bool(body.may_turn_off)
    if body.state is not UNSET and body.state != user.state:
        user.state = str(body.state)
        user.deactivated_at = utcnow() if user.state == DEACTIVATED else None
        if user.state == DEACTIVATED:
            await scope.session.execute(
                delete(ConsoleSession).where(ConsoleSession.user_id == user.id)
            )
    await scope.session.flush()
    after = person_out(user, member)
    action = "user.deactivate" if deactivated else "user.update"
    scope.audit(action, "user", user.email, before=before, after=after)
    return after


async def _keep_an_admin(scope: Scope, leaving: str) -> None:
    others = await scope.session.scalar(
        select(func.count())
        .select_from(Membership)
        .join(User, User.id == Membership.user_id)
        .where(
            Membership.project_id == scope.project_id,
            Membership.role == Role.ADMIN.value,
            Membership.user_id != leaving,
            User.state == ACTIVE,
        )
    )
    if not others:
        raise conflict("this is the project's last active admin: make someone else admin first")


async def sign_out_everywhere(scope: Scope, user_id: str) -> s.SignedOut:
    """End every console session of a person: themselves, or anyone for an admin."""
    if scope.actor.user_id != user_id:
        scope.require(Permission.ADMIN)
    else:
        scope.require(Permission.READ)
    user, _member_row = await _member(scope, user_id)
    ended = await scope.session.execute(
        delete(ConsoleSession).where(ConsoleSession.user_id == user.id)
    )
    count = int(ended.rowcount)  # type: ignore[attr-defined]
    return s.SignedOut(id=user.id, sessions_ended=count)


# ----------------------------------------------------------------------- personal tokens


def _person(scope: Scope) -> str:
    if scope.actor.user_id is None:
        raise ApiError(
            403,
            "personal tokens belong to people: sign in to the console as yourself, or call "
            "with a personal token (a management key is a service account: see /keys)",
        )
    return scope.actor.user_id


def token_out(row: ApiKey) -> s.Token:
    return s.Token(
        id=row.id,
        name=row.name,
        hint=row.hint,
        role=row.role,
        may_turn_off=row.may_turn_off,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


async def list_tokens(scope: Scope) -> s.Tokens:
    scope.require(Permission.READ)
    user_id = _person(scope)
    rows = await scope.session.scalars(
        select(ApiKey)
        .where(ApiKey.project_id == scope.project_id, ApiKey.user_id == user_id)
        .order_by(ApiKey.id)
    )
    return s.Tokens(tokens=[token_out(row) for row in rows])


async def create_token(scope: Scope, body: s.TokenCreate) -> s.CreatedToken:
    """A token that acts as the caller, with their role or less (``role``) and their "may turn
    off" or not (``mayTurnOff``), shown once (``access.of_token`` bounds it on every use)."""
    scope.require(Permission.READ)  # any member may have tokens; they act with their role
    user_id = _person(scope)
    problems = Problems()
    name = body.name.strip()
    if not name or len(name) > 200:
        problems.add("name", "1 to 200 characters")
    role = Role(body.role) if body.role else scope.actor.role
    if at_most(role, scope.actor.role) is not role:
        problems.add("role", f"at most your own role ({scope.actor.role.value})")
    granted = scope.holds(Permission.TURN_OFF)
    may_turn_off = body.may_turn_off
    if may_turn_off is None:
        may_turn_off = granted and role is scope.actor.role
    elif may_turn_off and not granted:
        problems.add("mayTurnOff", "only if you may turn off yourself (an admin, or granted it)")
    problems.raise_if_any()
    live = await scope.session.scalar(
        select(func.count())
        .select_from(ApiKey)
        .where(ApiKey.user_id == user_id, ApiKey.revoked_at.is_(None))
    )
    if (live or 0) >= MAX_TOKENS:
        raise conflict(f"at most {MAX_TOKENS} live tokens: revoke one first")
    row, token = new_api_key(scope.project_id, KeyKind.MANAGEMENT, name=name)
    row.user_id = user_id
    row.role = role.value
    row.may_turn_off = may_turn_off
    row.created_at = utcnow()
    scope.session.add(row)
    await scope.session.flush()
    out = token_out(row)
    scope.audit("token.create", "token", row.id, after=out)
    return s.CreatedToken(**{f: getattr(out, f) for f in out.__struct_fields__}, token=token)


async def revoke_token(scope: Scope, token_id: str) -> s.Token:
    """Revoke one of the caller's tokens (an admin may revoke anyone's in the project)."""
    scope.require(Permission.READ)
    row = await scope.session.scalar(
        select(ApiKey).where(
            ApiKey.project_id == scope.project_id,
            ApiKey.id == token_id,
            ApiKey.user_id.is_not(None),
        )
    )
    if row is None or (row.user_id != scope.actor.user_id and not scope.holds(Permission.ADMIN)):
        raise not_found("token", token_id)
    if row.revoked_at is not None:
        raise conflict(f"token {token_id!r} is already revoked")
    before = token_out(row)
    row.revoked_at = utcnow()
    await scope.session.flush()
    after = token_out(row)
    scope.audit("token.revoke", "token", row.id, before=before, after=after)
    return after


# ----------------------------------------------------------------- people made by the CLI


async def create_person(
    session: AsyncSession,
    project_id: str,
    email: str,
    role: Role,
    *,
    name: str = "",
    may_turn_off: bool = False,
    invited_by: str = "cli",
) -> tuple[User, str]:
    """A new active person with ``role`` in the project and a one-time sign-in link's token
    (valid a day) with which they set their password. Not committed."""
    problems = Problems()
    email = normal_email(problems, "email", email)
    problems.raise_if_any()
    if await session.scalar(select(User.id).where(User.email == email)) is not None:
        raise conflict(f"there is already a person with the email {email}")
    user = User(id=new_id("usr"), email=email, name=name[:200], state=ACTIVE)
    session.add(user)
    await session.flush()  # before the rows naming it (no ORM relationship orders them)
    session.add(
        Membership(
            project_id=project_id,
            user_id=user.id,
            role=role.value,
            may_turn_off=may_turn_off or role is Role.ADMIN,
        )
    )
    row, token = new_invitation(
        project_id, email, role, invited_by, SIGN_IN_LINK_TTL, user_id=user.id
    )
    session.add(row)
    await session.flush()
    return user, token
