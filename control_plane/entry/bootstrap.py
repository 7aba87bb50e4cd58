"""First start on an empty database: project ``default``, two environments, one key of each kind
(the server and public keys bound to ``production``, so the README's examples work with them)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.access import Role
from control_plane.auth import KeyKind, new_api_key
from control_plane.db.ids import new_id
from control_plane.db.models import Environment, Membership, Project, User
from control_plane.domain.people.services import SIGN_IN_LINK_TTL, create_person, new_invitation

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


FIRST_ADMIN_EMAIL = "admin@localhost"
"""The first person's email when ``VANE_ADMIN_EMAIL`` does not name one (changeable later)."""


@dataclass(frozen=True, slots=True)
class SignInLink:
    email: str
    token: str  # the link's, shown once: {console}/console/welcome/<token>


async def first_admin(
    sessionmaker: async_sessionmaker[AsyncSession], email: str, project_key: str = DEFAULT_PROJECT
) -> SignInLink | None:
    """On a project with nobody in it yet, its first admin (``email``) and a one-time sign-in
    link with which they set a password. While no person of the project has signed in (set a
    password or come through SSO), each start gives a fresh link, so a link lost is not a
    locked door; once someone has, nothing."""
    async with sessionmaker() as session:
        project_id = await session.scalar(select(Project.id).where(Project.key == project_key))
        if project_id is None:
            return None
        people = list(
            await session.execute(
                select(User.id, User.email, User.password_hash, User.sso_subject)
                .join(Membership, Membership.user_id == User.id)
                .where(Membership.project_id == project_id, Membership.role == Role.ADMIN.value)
            )
        )
        if any(row.password_hash or row.sso_subject for row in people):
            return None
        if people:
            user_id, email = people[0].id, people[0].email
            row, token = new_invitation(
                project_id, email, Role.ADMIN, "vane up", SIGN_IN_LINK_TTL, user_id=user_id
            )
            session.add(row)
        else:
            user, token = await create_person(
                session, project_id, email, Role.ADMIN, invited_by="vane up"
            )
            email = user.email
        await session.commit()
        return SignInLink(email, token)
