"""Request-scoped dependencies: one transaction per request, the caller's scope."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.auth import Principal, request_session
from control_plane.domain.common import CHANGED_ENVIRONMENTS, Actor, Scope


async def provide_scope(
    state: State, request: Request[Principal, Any, Any]
) -> AsyncIterator[Scope]:
    """Yield the request's unit of work; commit when the handler returns, roll back if it raises.

    Nothing is half-written: a handler that fails after some writes leaves the database as it was.
    After the commit, environments whose snapshots changed are announced to the publisher in the
    background: the committed write is answered with its success whatever publishing does.
    """
    principal = request.user
    async with AsyncExitStack() as stack:
        # the session the key was looked up in (auth.KeyAuthenticationMiddleware), which also
        # closes it; a fresh one only where there is none
        session = request_session(request.scope)
        if session is None:
            sessionmaker: async_sessionmaker[AsyncSession] = state.sessionmaker
            session = await stack.enter_async_context(sessionmaker())
        scope = Scope(
            session=session,
            project_id=principal.project_id,
            actor=Actor.of(principal),
            bayesian_prior_sd=state.settings.bayesian_prior_sd,
        )
        try:
            yield scope
        except BaseException:
            await session.rollback()
            raise
        await session.commit()
        changed: set[str] = session.info.pop(CHANGED_ENVIRONMENTS, set())
        if changed:
            state.notifier.announce(principal.project_id, changed)


Ctx = NamedDependency[Scope]
"""Handler parameter type for the request's unit of work (``ctx: Ctx``)."""
