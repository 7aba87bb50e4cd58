"""Request-scoped dependencies: one transaction per request, the caller's scope."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated, Any

from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import HeaderParameter
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.auth import Principal, request_session
from control_plane.db import generation
from control_plane.domain.common import Actor, Scope, serialise_project_writes
from control_plane.publishing.publisher import Publisher

logger = logging.getLogger("vane.control_plane")


async def provide_scope(
    state: State, request: Request[Principal, Any, Any]
) -> AsyncIterator[Scope]:
    """Yield the request's unit of work; commit when the handler returns, roll back if it raises.

    Nothing is half-written: a handler that fails after some writes leaves the database as it was.
    After the commit, what it changed in the snapshots goes to the publisher (once, in the
    background): the committed write is answered with its success whatever publishing does.
    """
    if_match = None if request.method in ("GET", "HEAD") else request.headers.get("if-match")
    async with unit_of_work(state, request, request.user, if_match=if_match) as scope:
        yield scope


@asynccontextmanager
async def unit_of_work(
    state: State,
    request: Request[Any, Any, Any],
    principal: Principal,
    *,
    if_match: str | None = None,
) -> AsyncIterator[Scope]:
    """One transaction for ``principal``: the API's requests and the console's forms both write
    through it, so both get the same services, audit entries, versions and publishing."""
    async with AsyncExitStack() as stack:
        # the session the key was looked up in (auth.KeyAuthenticationMiddleware, or the
        # console's session check), which also closes it; a fresh one only where there is none
        session = request_session(request.scope)
        if session is None:
            sessionmaker: async_sessionmaker[AsyncSession] = state.sessionmaker
            session = await stack.enter_async_context(sessionmaker())
        if _serialised(request):
            if session.in_transaction():  # the key lookup's, read only: the lock goes first
                await session.commit()
            await serialise_project_writes(session, principal.project_id)
        scope = Scope(
            session=session,
            project_id=principal.project_id,
            actor=Actor.of(principal),
            bayesian_prior_sd=state.settings.bayesian_prior_sd,
            if_match=if_match,
            hooks=state.hooks,
        )
        try:
            yield scope
        except BaseException:
            await session.rollback()
            raise
        await session.commit()
        if scope.change:
            publisher: Publisher = state.publisher
            publisher.publish(scope.change)
        if scope.events_written:
            try:
                await generation.advance(session)
            except Exception:  # the write is committed and answered; only the cache is behind
                logger.warning(
                    "events were written but the ingest generation did not move on: results "
                    "computed before may be shown until the next write",
                    exc_info=True,
                )


UNSERIALISED = "vane_unserialised"
"""A write handler's ``opt`` entry (``opt={UNSERIALISED: True}``, on a handler or a controller):
what it writes never goes into a snapshot nor is checked against what does (events,
exposures), so it does not wait for the project's write lock. Every other write does."""


def _serialised(request: Request[Any, Any, Any]) -> bool:
    """Whether the request's unit of work takes the project's write lock: every write
    (not GET or HEAD) unless its handler says ``UNSERIALISED``."""
    if request.method in ("GET", "HEAD"):
        return False
    return not request.route_handler.opt.get(UNSERIALISED)


IfMatch = Annotated[
    str | None,
    HeaderParameter(
        name="If-Match",
        description="The version (ETag) this write expects: 412 and nothing written if the "
        "resource has changed since. Without it the write goes through.",
    ),
]
"""Declared by every write that honours If-Match, so the OpenAPI document shows it; the check
itself is ``Scope.expect_version``, which reads the header from the request's scope."""

Ctx = NamedDependency[Scope]
"""Handler parameter type for the request's unit of work (``ctx: Ctx``): the same ``Scope`` the
services take, under another name only because Litestar gives a handler parameter called
``scope`` the ASGI scope (a reserved name), so a controller cannot call it by its own."""


def public_url(state: State, request: Request[Any, Any, Any]) -> str:
    """The console's address for links (invitations): ``VANE_PUBLIC_URL``, else the address this
    request came to."""
    configured: str | None = state.settings.public_url
    return configured or str(request.base_url)
