"""First start on an empty database: project ``default``, two environments, one key of each kind
(the server and public keys bound to ``production``, so the README's examples work with them)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.auth import KeyKind, new_api_key
from control_plane.db.ids import new_id
from control_plane.db.models import Environment, Project

DEFAULT_PROJECT = "default"
DEFAULT_ENVIRONMENTS = ("production", "staging")


@dataclass(frozen=True, slots=True)
class IssuedKey:
    kind: KeyKind
    environment: str | None
    key_id: str
    token: str


async def bootstrap(sessionmaker: async_sessionmaker[AsyncSession]) -> list[IssuedKey]:
    """Create the default project and first keys if there is no project yet; else do nothing."""
    async with sessionmaker() as session:
        if await session.scalar(select(func.count()).select_from(Project)):
            return []
        project = Project(id=new_id("prj"), key=DEFAULT_PROJECT, name="Default project")
        session.add(project)
        try:
            await session.flush()
        except IntegrityError:  # another replica bootstrapped at the same moment
            await session.rollback()
            return []
        envs = {
            key: Environment(
                id=new_id("env"),
                project_id=project.id,
                key=key,
                name=key.title(),
                critical=key == "production",
            )
            for key in DEFAULT_ENVIRONMENTS
        }
        session.add_all(envs.values())
        await session.flush()
        issued: list[IssuedKey] = []
        plan: list[tuple[KeyKind, str | None]] = [
            (KeyKind.MANAGEMENT, None),
            (KeyKind.SERVER, "production"),  # a backend's: evaluates flags, not only events
            (KeyKind.RELAY, None),
            (KeyKind.PUBLIC, "production"),
        ]
        for kind, env_key in plan:
            row, token = new_api_key(
                project.id,
                kind,
                environment_id=envs[env_key].id if env_key else None,
                name=f"first {kind.value} key",
            )
            session.add(row)
            issued.append(IssuedKey(kind, env_key, row.id, token))
        try:
            await session.commit()
        except IntegrityError:  # another replica bootstrapped at the same moment
            await session.rollback()
            return []
        return issued
