"""One transaction of a project outside a request: what the CLI commands run their work in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.db.engine import make_async_engine
from control_plane.db.models import Project
from control_plane.domain.common import CLI_ACTOR, Scope, serialise_project_writes
from control_plane.domain.webhooks.outbox import OUTBOX
from control_plane.errors import ApiError
from control_plane.settings import Settings

T = TypeVar("T")


def database_url() -> str:
    return Settings.from_env().database_url


async def in_project(
    project_key: str, work: Callable[[Scope], Awaitable[T]], *, url: str | None = None
) -> T:
    """Run ``work`` in one transaction of ``project_key`` as the CLI actor, on ``url`` (by
    default the configured database)."""
    engine = make_async_engine(url or database_url())
    try:
        sessionmaker: async_sessionmaker[AsyncSession] = async_sessionmaker(
            engine, expire_on_commit=False
        )
        async with sessionmaker() as session:
            project_id = await session.scalar(select(Project.id).where(Project.key == project_key))
            if project_id is None:
                raise ApiError(
                    404,
                    f"project {project_key!r} not found (start the control plane once to create 'default')",
                )
            await serialise_project_writes(session, project_id)
            scope = Scope(session=session, project_id=project_id, actor=CLI_ACTOR, hooks=OUTBOX)
            result = await work(scope)
            await session.commit()
            return result
    finally:
        await engine.dispose()
