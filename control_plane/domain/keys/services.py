"""API keys: issued (token shown once), listed (never the secret), changed (a management key's
role and "may turn off" grant, any key's name), revoked (at once)."""

from __future__ import annotations

import re

import msgspec
from sqlalchemy import select

from control_plane.access import Permission, Role
from control_plane.auth import KeyKind, new_api_key
from control_plane.db.models import ApiKey, Environment
from control_plane.db.types import utcnow
from control_plane.domain.common import Scope
from control_plane.domain.keys import schemas as s
from control_plane.domain.paging import Page, paged
from control_plane.domain.problems import Problems
from control_plane.domain.rows import take_given
from control_plane.errors import conflict, invalid, not_found
from shared.wire.kinds import reference_problem

MAX_PRIVATE = 100
_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.\-]+(:\d{1,5})?$")


MANAGEMENT_ONLY = {
    "role": "only a management key (a service account) has a role",
    "mayTurnOff": "only a management key (a service account) is granted 'may turn off'",
}
"""What only a management key carries, each refusal naming its field (create and edit)."""


def refuse_management_only(problems: Problems, given: dict[str, bool]) -> None:
    """A key of another kind given what only a management key carries (``given``: by field,
    whether it was)."""
    for field, was_given in given.items():
        if was_given:
            problems.add(field, MANAGEMENT_ONLY[field])


def key_out(row: ApiKey, env_key: str | None) -> s.Key:
    return s.Key(
        id=row.id,
        kind=row.kind,
        name=row.name,
        hint=row.hint,
        environment=env_key,
        origins=list(row.origins),
        private_attributes=list(row.private_attributes or ()),
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        role=row.role if row.kind == KeyKind.MANAGEMENT.value else None,
        may_turn_off=row.may_turn_off,
    )


async def create_key(scope: Scope, body: s.KeyCreate) -> s.CreatedKey:
    scope.require(Permission.ADMIN)
    kind = KeyKind(body.kind)
    problems = Problems()
    env = None
    if body.environment is not None:
        env = await scope.session.scalar(
            select(Environment).where(
                Environment.project_id == scope.project_id, Environment.key == body.environment
            )
        )
        if env is None:
            problems.add("environment", f"unknown environment {body.environment!r}")
        elif kind is KeyKind.MANAGEMENT:
            problems.add("environment", "a management key is not bound to an environment")
    elif kind is KeyKind.PUBLIC:
        problems.add("environment", "a public key is bound to one environment: name it")
    if body.origins and kind is not KeyKind.PUBLIC:
        problems.add("origins", "only public keys (browsers) have allowed origins")
    for i, origin in enumerate(body.origins):
        if origin != "*" and not _ORIGIN.match(origin):
            problems.add(
                f"origins[{i}]",
                "an origin is '*' or scheme://host[:port], e.g. https://shop.example",
            )
    if len(body.name) > 200:
        problems.add("name", "must be at most 200 characters")
    if kind is not KeyKind.MANAGEMENT:
        given = {"role": body.role != "admin", "mayTurnOff": body.may_turn_off}
        refuse_management_only(problems, given)
    if kind is KeyKind.RELAY and body.private_attributes:
        problems.add("privateAttributes", "a relay forwards others' events: it sends none")
    if len(body.private_attributes) > MAX_PRIVATE:
        problems.add("privateAttributes", f"at most {MAX_PRIVATE} attributes")
    for i, attribute in enumerate(body.private_attributes):
        if (problem := reference_problem(attribute)) is not None:
            problems.add(f"privateAttributes[{i}]", problem)
        elif not attribute or len(attribute) > 200:
            problems.add(f"privateAttributes[{i}]", "1 to 200 characters")
    problems.raise_if_any()
    row, token = new_api_key(
        scope.project_id,
        kind,
        environment_id=env.id if env else None,
        name=body.name,
        origins=body.origins,
    )
    row.created_at = utcnow()
    row.role = body.role
    row.may_turn_off = body.may_turn_off
    row.owner_identity = scope.actor.maker  # nobody reviews their own work with it
    row.private_attributes = list(dict.fromkeys(body.private_attributes))
    scope.session.add(row)
    await scope.session.flush()
    await _access_changed(scope, row)
    out = key_out(row, env.key if env else None)
    scope.audit("key.create", "key", row.id, after=out)
    return s.CreatedKey(**{f: getattr(out, f) for f in out.__struct_fields__}, key=token)


async def _access_changed(scope: Scope, row: ApiKey) -> None:
    """Relays check keys themselves (see ``Hub._access``): republish who may call them."""
    if row.environment_id and row.kind in {KeyKind.PUBLIC.value, KeyKind.SERVER.value}:
        await scope.changed([row.environment_id], reason="access")
    else:
        await scope.changed((env.id for env in await scope.environments()), reason="access")


async def list_keys(
    scope: Scope,
    *,
    include_revoked: bool,
    kind: s.KindName | None,
    environment: str | None,
    limit: int,
    cursor: str | None,
) -> Page[s.Key]:
    """Keys in issue order (ids sort by time)."""
    query = (
        select(ApiKey, Environment.key)
        .outerjoin(Environment, Environment.id == ApiKey.environment_id)
        .where(ApiKey.project_id == scope.project_id, ApiKey.user_id.is_(None))
    )
    if not include_revoked:
        query = query.where(ApiKey.revoked_at.is_(None))
    if kind is not None:
        query = query.where(ApiKey.kind == kind)
    if environment is not None:
        env_id = await scope.session.scalar(
            select(Environment.id).where(
                Environment.project_id == scope.project_id, Environment.key == environment
            )
        )
        if env_id is None:
            raise invalid("environment", f"no environment {environment!r} in this project")
        query = query.where(ApiKey.environment_id == env_id)

    async def convert(rows: list[tuple[ApiKey, str | None]]) -> list[s.Key]:
        return [key_out(row, env_key) for row, env_key in rows]

    return await paged(
        scope, query, ApiKey.id, list_name="keys", limit=limit, cursor=cursor, convert=convert
    )


async def _found(scope: Scope, key_id: str) -> tuple[ApiKey, str | None]:
    """The project's key (not a person's token) and its environment's key; 404 if none."""
    row = await scope.session.scalar(
        select(ApiKey).where(
            ApiKey.project_id == scope.project_id, ApiKey.id == key_id, ApiKey.user_id.is_(None)
        )
    )
    if row is None:
        raise not_found("key", key_id)
    env_key = None
    if row.environment_id:
        env_key = await scope.session.scalar(
            select(Environment.key).where(Environment.id == row.environment_id)
        )
    return row, env_key


async def patch_key(scope: Scope, key_id: str, body: s.KeyPatch) -> s.Key:
    """Change a key's name, or a management key's role or "may turn off" grant (a service
    account's, checked at its next request). A key does not demote itself: another admin does."""
    scope.require(Permission.ADMIN)
    row, env_key = await _found(scope, key_id)
    if row.revoked_at is not None:
        raise conflict(f"key {key_id!r} is revoked: it stays as it was")
    problems = Problems()
    if body.name is not msgspec.UNSET and len(body.name) > 200:
        problems.add("name", "must be at most 200 characters")
    if row.kind != KeyKind.MANAGEMENT.value:
        given = {"role": body.role, "mayTurnOff": body.may_turn_off}
        refuse_management_only(problems, {k: v is not msgspec.UNSET for k, v in given.items()})
    problems.raise_if_any()
    demoted = body.role is not msgspec.UNSET and body.role != Role.ADMIN.value
    if demoted and scope.actor.key_id == row.id and row.role == Role.ADMIN.value:
        raise conflict("a key cannot demote itself: ask another admin")
    before = key_out(row, env_key)
    take_given(row, body, "name", "role", "may_turn_off")
    await scope.session.flush()
    after = key_out(row, env_key)
    if after != before:
        scope.audit("key.update", "key", row.id, before=before, after=after)
    return after


async def revoke_key(scope: Scope, key_id: str) -> s.Key:
    scope.require(Permission.ADMIN)
    row, env_key = await _found(scope, key_id)
    if row.revoked_at is not None:
        raise conflict(f"key {key_id!r} is already revoked")
    before = key_out(row, env_key)
    row.revoked_at = utcnow()
    await scope.session.flush()
    await _access_changed(scope, row)
    after = key_out(row, env_key)
    scope.audit("key.revoke", "key", row.id, before=before, after=after)
    return after
