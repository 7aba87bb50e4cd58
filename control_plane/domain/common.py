"""What every service needs: the caller, the transaction, audit entries and snapshot versions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.auth import Principal
from control_plane.db.ids import new_id
from control_plane.db.models import AuditEntry, Environment
from control_plane.errors import not_found

CHANGED_ENVIRONMENTS = "vane.changed_environments"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who made a change: an API key, or the CLI (``key_id`` None)."""

    key_id: str | None
    label: str

    @classmethod
    def of(cls, principal: Principal) -> Actor:
        return cls(principal.key_id, f"{principal.kind.value} key {principal.key_id}")


CLI_ACTOR = Actor(None, "cli")


@dataclass(slots=True)
class Scope:
    """One request's unit of work: the session (one transaction), the project and the actor."""

    session: AsyncSession
    project_id: str
    actor: Actor
    bayesian_prior_sd: float | None = 0.3

    def audit(
        self,
        action: str,
        resource_type: str,
        resource_key: str,
        *,
        before: Any = None,
        after: Any = None,
        environment: str | None = None,
    ) -> None:
        self.session.add(
            AuditEntry(
                id=new_id("aud"),
                project_id=self.project_id,
                actor_key_id=self.actor.key_id,
                actor=self.actor.label,
                action=action,
                resource_type=resource_type,
                resource_key=resource_key,
                environment=environment,
                before=to_json(before),
                after=to_json(after),
            )
        )

    async def environments(self) -> list[Environment]:
        result = await self.session.scalars(
            select(Environment)
            .where(Environment.project_id == self.project_id)
            .order_by(Environment.created_at, Environment.key)
        )
        return list(result)

    async def environment(self, key: str) -> Environment:
        env = await self.session.scalar(
            select(Environment).where(
                Environment.project_id == self.project_id, Environment.key == key
            )
        )
        if env is None:
            raise not_found("environment", key)
        return env

    async def changed(self, environment_ids: Iterable[str]) -> None:
        """Bump the snapshot version of environments whose served state this change alters."""
        ids = sorted(set(environment_ids))
        if not ids:
            return
        await self.session.execute(
            update(Environment)
            .where(Environment.id.in_(ids))
            .values(snapshot_version=Environment.snapshot_version + 1)
        )
        pending: set[str] = self.session.info.setdefault(CHANGED_ENVIRONMENTS, set())
        pending.update(ids)


def percent(units: int) -> float | int:
    """A weight stored out of 100000 as the percentage users write (50, or 33.333)."""
    return units // 1000 if units % 1000 == 0 else units / 1000


def to_json(value: Any) -> Any:
    """Structs and datetimes to plain JSON values (for audit before/after columns)."""
    if value is None:
        return None
    return msgspec.json.decode(msgspec.json.encode(value))
