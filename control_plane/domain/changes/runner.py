"""Applies approved change requests whose ``applyAt`` has come, in whichever replica gets there
first, once: the project's write lock (``serialise_project_writes``) is taken before the request
is read, so a second replica finds it applied. The apply is the API's own (``services.apply``:
approvals counted and bases checked at that moment). A request not approved by then, or whose
flags moved underneath, is not applied: it stays open without a time, with the reason recorded
and audited (``change_request.skip``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.db.models import ChangeRequest
from control_plane.db.types import utcnow
from control_plane.domain.changes import services
from control_plane.domain.common import Actor, Hooks, Scope, every, serialise_project_writes
from control_plane.errors import ApiError
from control_plane.publishing.change import Change

logger = logging.getLogger("vane.change_requests")

BATCH = 50
Publish = Callable[[Change], None]  # ``Publisher.publish``


class ChangeRequestRunner:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        publish: Publish,
        poll_s: float = 1.0,
        bayesian_prior_sd: float | None = 0.3,
        hooks: Hooks,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.publish = publish
        self.poll_s = poll_s
        self.bayesian_prior_sd = bayesian_prior_sd
        self.hooks = hooks

    async def run(self) -> None:
        """Look at once (what came due while stopped runs at start-up), then every ``poll_s``."""
        await every(self.poll_s, self.run_due, logger, "looking for due change requests")

    async def run_due(self) -> int:
        async with self.sessionmaker() as session:
            due = list(
                await session.execute(
                    select(ChangeRequest.id, ChangeRequest.project_id, ChangeRequest.author)
                    .where(ChangeRequest.status == "open", ChangeRequest.apply_at <= utcnow())
                    .order_by(ChangeRequest.apply_at, ChangeRequest.id)
                    .limit(BATCH)
                )
            )
        done = 0
        for request_id, project_id, author in due:
            done += await self.execute(request_id, project_id, author)
        return done

    def _scope(self, session: AsyncSession, project_id: str, request_id: str, author: str) -> Scope:
        actor = Actor(None, f"change request {request_id} (applyAt, by {author})"[:200])
        return Scope(session, project_id, actor, self.bayesian_prior_sd, hooks=self.hooks)

    async def execute(self, request_id: str, project_id: str, author: str) -> int:
        """1 if this replica applied the request or recorded why not, else 0."""
        async with self.sessionmaker() as session:
            scope = self._scope(session, project_id, request_id, author)
            try:
                await serialise_project_writes(session, project_id)
                row = await session.scalar(
                    select(ChangeRequest)
                    .where(ChangeRequest.id == request_id)
                    .execution_options(populate_existing=True)
                )
                if (
                    row is None
                    or row.status != "open"
                    or row.apply_at is None
                    or row.apply_at > utcnow()
                ):
                    await session.rollback()
                    return 0
                await services.apply(scope, request_id)
                await session.commit()
            except ApiError as exc:
                await session.rollback()
                await self._skip(request_id, project_id, author, exc.message)
                return 1
            except DBAPIError:
                await session.rollback()
                logger.exception("change request %s: database error, will look again", request_id)
                return 0
            except Exception as exc:  # a defect: recorded once, not retried on every look
                await session.rollback()
                logger.exception("change request %s failed unexpectedly", request_id)
                await self._skip(
                    request_id, project_id, author, f"internal error: {type(exc).__name__}"
                )
                return 1
        if scope.change:
            self.publish(scope.change)
        logger.info("change request %s applied at its applyAt", request_id)
        return 1

    async def _skip(self, request_id: str, project_id: str, author: str, why: str) -> None:
        async with self.sessionmaker() as session, session.begin():
            await serialise_project_writes(session, project_id)
            scope = self._scope(session, project_id, request_id, author)
            if await services.skip_due(scope, request_id, why):
                logger.warning("change request %s not applied at its applyAt: %s", request_id, why)
