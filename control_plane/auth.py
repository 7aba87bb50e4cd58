"""API keys: ``<prefix>live_<secret>``, stored only as a SHA-256 hash, checked on every request.

Secrets carry 238 bits of entropy, so a plain SHA-256 (no salt, no stretching) is enough and keeps
the lookup a single indexed query. Revocation takes effect on the next request: nothing is cached.
The lookup runs in the request's own session and transaction (see the middleware).
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from litestar.connection import ASGIConnection
from litestar.enums import ScopeType
from litestar.exceptions import WebSocketException
from litestar.handlers.base import BaseRouteHandler
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.types import Receive, Scope, Send
from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.access import Role, of_token
from control_plane.db.ids import new_id
from control_plane.db.models import ApiKey, Membership, User
from control_plane.errors import ApiError
from control_plane.ratelimit import Limiter
from shared.keys import PREFIXES as SHARED_PREFIXES
from shared.keys import SERVER_KEY_FROM_PAGE, hash_token
from shared.keys import kind_of as shared_kind_of


class KeyKind(StrEnum):
    MANAGEMENT = "management"
    SERVER = "server"
    RELAY = "relay"
    PUBLIC = "public"


PREFIXES: dict[KeyKind, str] = {KeyKind(kind): prefix for kind, prefix in SHARED_PREFIXES.items()}
ACTIVE = "active"
"""The state of a person who may sign in (the other: ``deactivated``)."""
_SECRET_ALPHABET = string.ascii_letters + string.digits
_SECRET_LENGTH = 40


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key's id, project, kind and (for public and relay keys) environment;
    for a management key or a person, the role it acts with (``control_plane.access``).

    A person acts through a console session (``key_id`` None) or a personal token (both ids);
    a management key alone is a service account. ``name`` is what the audit shows: the
    person's email, or the key's name."""

    key_id: str | None
    project_id: str
    kind: KeyKind
    environment_id: str | None
    role: Role = Role.ADMIN
    may_turn_off: bool = False
    user_id: str | None = None
    name: str = ""
    # the key's private attributes (``rows.private_attributes``), read with the key itself
    private_attributes: tuple[str, ...] = ()
    # a management key's maker (``ApiKey.owner_identity``): who the key is, as ``identity``
    owner_identity: str | None = None

    @property
    def identity(self) -> str:
        """One id per person or service account, whichever session, token or key they use
        (nobody approves their own change request through a second one). A key someone made
        is them, and so is a key made with that key (its ``owner_identity``, the maker's own
        identity when it was made); a key nobody made (``vane up``, the CLI) is itself."""
        if self.user_id:
            return f"user:{self.user_id}"
        return self.owner_identity or f"key:{self.key_id}"


hash_secret = hash_token


def kind_of(token: str) -> KeyKind | None:
    kind = shared_kind_of(token)
    return KeyKind(kind) if kind else None


def generate_token(kind: KeyKind) -> str:
    secret = "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(_SECRET_LENGTH))
    return f"{PREFIXES[kind]}live_{secret}"


def new_api_key(
    project_id: str,
    kind: KeyKind,
    *,
    environment_id: str | None = None,
    name: str = "",
    origins: list[str] | None = None,
) -> tuple[ApiKey, str]:
    """A new key row and its token; the token is shown once and never stored."""
    token = generate_token(kind)
    row = ApiKey(
        id=new_id("key"),
        project_id=project_id,
        kind=kind.value,
        environment_id=environment_id,
        name=name,
        hint=token[: len(PREFIXES[kind]) + 9] + "…",
        secret_hash=hash_secret(token),
        origins=list(origins or []),
    )
    return row, token


async def find_principal(session: AsyncSession, token: str) -> Principal | None:
    """The key's principal, in one indexed query; None if unknown or revoked, or if it is a
    personal token whose person is deactivated or no longer a member of its project."""
    if kind_of(token) is None:
        return None
    return await _key_principal(session, ApiKey.secret_hash == hash_secret(token))


async def key_principal(session: AsyncSession, key_id: str) -> Principal | None:
    """A live key's principal by its id (a console session signed in with a key)."""
    return await _key_principal(session, ApiKey.id == key_id)


async def _key_principal(session: AsyncSession, which: ColumnElement[bool]) -> Principal | None:
    row = (
        await session.execute(
            select(
                ApiKey.id,
                ApiKey.project_id,
                ApiKey.kind,
                ApiKey.environment_id,
                ApiKey.role,
                ApiKey.may_turn_off,
                ApiKey.name,
                ApiKey.user_id,
                ApiKey.private_attributes,
                ApiKey.owner_identity,
                User.email,
                User.state,
                Membership.role.label("member_role"),
                Membership.may_turn_off.label("member_may_turn_off"),
            )
            .outerjoin(User, User.id == ApiKey.user_id)
            .outerjoin(
                Membership,
                (Membership.user_id == ApiKey.user_id)
                & (Membership.project_id == ApiKey.project_id),
            )
            .where(which, ApiKey.revoked_at.is_(None))
        )
    ).first()
    if row is None:
        return None
    kind = KeyKind(row.kind)
    private = tuple(row.private_attributes or ())
    if row.user_id is None:
        name = row.name or row.id
        return Principal(
            row.id,
            row.project_id,
            kind,
            row.environment_id,
            role=Role(row.role),
            may_turn_off=row.may_turn_off,
            name=f"key {name!r}" if kind is KeyKind.MANAGEMENT else name,
            private_attributes=private,
            owner_identity=row.owner_identity,
        )
    if row.state != ACTIVE or row.member_role is None:
        return None  # the person was deactivated, or left the project: their tokens stop
    # what the token was made with, bounded by the person's role and grant as they stand now
    role, may_turn_off = of_token(
        Role(row.role), row.may_turn_off, Role(row.member_role), row.member_may_turn_off
    )
    return Principal(
        row.id,
        row.project_id,
        kind,
        None,
        role=role,
        may_turn_off=may_turn_off,
        user_id=row.user_id,
        name=row.email,
        private_attributes=private,
    )


async def person_principal(
    session: AsyncSession, user_id: str, project_id: str
) -> Principal | None:
    """A person acting in a project (their console session): None if they are deactivated or
    not a member of it. Checked on every request, as a key is."""
    row = (
        await session.execute(
            select(User.email, Membership.role, Membership.may_turn_off)
            .join(Membership, Membership.user_id == User.id)
            .where(User.id == user_id, User.state == ACTIVE, Membership.project_id == project_id)
        )
    ).first()
    if row is None:
        return None
    return Principal(
        None,
        project_id,
        KeyKind.MANAGEMENT,
        None,
        role=Role(row.role),
        may_turn_off=row.may_turn_off,
        user_id=user_id,
        name=row.email,
    )


def bearer_token(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    header = connection.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def refuse(connection: ASGIConnection[Any, Any, Any, Any], status: int, message: str) -> Exception:
    """The error to raise: JSON for HTTP; a close code of 4000 + status for a websocket."""
    if connection.scope["type"] == ScopeType.WEBSOCKET:
        return WebSocketException(detail=message, code=4000 + status)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return ApiError(status, message, headers=headers)


REQUEST_SESSION = "vane.request_session"
"""Key of the HTTP request's session in the ASGI scope's ``state``."""


def request_session(scope: Scope) -> AsyncSession | None:
    session: AsyncSession | None = scope.get("state", {}).get(REQUEST_SESSION)
    return session


class KeyAuthenticationMiddleware(AbstractAuthenticationMiddleware):
    """Resolves ``Authorization: Bearer <key>`` to a ``Principal`` (401 when missing or unknown).

    An HTTP request gets one session for its whole life, opened here: the key lookup is its first
    query and the handler's work (``deps.provide_scope``) continues in the same transaction, so a
    request checks out one connection, not two. A websocket's lookup uses a short session of its
    own, as the connection lives on.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await super().__call__(scope, receive, send)
            return
        sessionmaker: async_sessionmaker[AsyncSession] = scope["litestar_app"].state.sessionmaker
        async with sessionmaker() as session:  # connects only when first used
            scope.setdefault("state", {})[REQUEST_SESSION] = session
            await super().__call__(scope, receive, send)

    async def authenticate_request(
        self, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> AuthenticationResult:
        token = bearer_token(connection)
        if token is None:
            raise refuse(
                connection, 401, "missing API key: send the header 'Authorization: Bearer <key>'"
            )
        shared = request_session(connection.scope)
        if shared is not None:
            principal = await find_principal(shared, token)
        else:
            sessionmaker: async_sessionmaker[AsyncSession] = connection.app.state.sessionmaker
            async with sessionmaker() as session:
                principal = await find_principal(session, token)
        if principal is None:
            raise refuse(connection, 401, "unknown or revoked API key")
        if principal.kind is KeyKind.SERVER and connection.headers.get("origin") is not None:
            raise refuse(connection, 403, SERVER_KEY_FROM_PAGE)
        limiter: Limiter | None = connection.app.state.get("limiter")
        if limiter is not None and principal.kind is not KeyKind.RELAY:
            wait = await limiter.retry_after(principal.key_id or principal.identity)
            if wait:
                raise ApiError(
                    429,
                    f"rate limit of this key exceeded; retry in {wait} s",
                    headers={"Retry-After": str(wait)},
                )
        return AuthenticationResult(user=principal, auth=token)


_KIND_LABELS = {
    KeyKind.MANAGEMENT: "a management key (vsk_)",
    KeyKind.SERVER: "a server key (ssk_)",
    KeyKind.RELAY: "a relay key (rsk_)",
    KeyKind.PUBLIC: "a public key (pk_)",
}


ALSO_KEYS = "vane_also_keys"
"""A handler's ``opt`` entry naming key kinds it admits besides its controller's guard's."""


def requires(*kinds: KeyKind) -> Any:
    """A guard admitting only keys of ``kinds``, or of the kinds a handler adds in its
    ``opt={ALSO_KEYS: [...]}`` (403 otherwise)."""

    def guard(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
        if connection.scope.get("method") == "OPTIONS":
            return  # Litestar's own OPTIONS answer (204 with Allow) needs no key and reads nothing
        principal: Principal = connection.user
        allowed = (*kinds, *handler.opt.get(ALSO_KEYS, ()))
        if principal.kind not in allowed:
            wanted = " or ".join(_KIND_LABELS[kind] for kind in allowed)
            raise refuse(
                connection,
                403,
                f"this endpoint needs {wanted}; the key presented is {_KIND_LABELS[principal.kind]}",
            )

    return guard
