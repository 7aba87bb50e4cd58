"""Environments: a new one starts with every flag disabled in it."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable

import msgspec
from sqlalchemy import delete, select

from control_plane.access import Permission
from control_plane.db.ids import new_id
from control_plane.db.models import ApiKey, Environment, Flag, FlagSetting
from control_plane.db.types import utcnow
from control_plane.domain import problems as base
from control_plane.domain.common import Scope, to_json
from control_plane.domain.environments import schemas as s
from control_plane.domain.paging import Page, paged
from control_plane.domain.rows import take_given, written_once
from control_plane.domain.targeting.clauses import default_serving
from control_plane.errors import conflict
from shared.wire import snapshot as w

CRITICAL_BY_DEFAULT = "production"
"""An environment by this key is critical unless created otherwise: toggles there ask first."""


def environment_out(env: Environment) -> s.Environment:
    return s.Environment(
        id=env.id,
        key=env.key,
        name=env.name,
        snapshot_version=env.snapshot_version,
        version=env.version,
        created_at=env.created_at,
        critical=env.critical,
        required_approvals=env.required_approvals,
    )


def _check_approvals(problems: base.Problems, value: int) -> None:
    if not 0 <= value <= s.MAX_APPROVALS:
        problems.add("requiredApprovals", f"from 0 (not protected) to {s.MAX_APPROVALS}")


async def list_environments(scope: Scope, *, limit: int, cursor: str | None) -> Page[s.Environment]:
    """Environments in creation order (ids sort by time)."""

    async def convert(rows: list[Environment]) -> list[s.Environment]:
        return [environment_out(e) for e in rows]

    query = select(Environment).where(Environment.project_id == scope.project_id)
    return await paged(
        scope,
        query,
        Environment.id,
        list_name="environments",
        limit=limit,
        cursor=cursor,
        convert=convert,
    )


async def create_environment(scope: Scope, body: s.EnvironmentCreate) -> s.Environment:
    scope.require(Permission.ADMIN)
    problems = base.Problems()
    base.check_key(problems, "key", body.key)
    name = body.name if body.name is not None else body.key.title()
    base.check_name(problems, "name", name)
    _check_approvals(problems, body.required_approvals)
    source = await scope.environment(body.copy_from) if body.copy_from is not None else None
    problems.raise_if_any()
    env = Environment(
        id=new_id("env"),
        project_id=scope.project_id,
        key=body.key,
        name=name,
        snapshot_version=0,
        version=1,
        critical=body.key == CRITICAL_BY_DEFAULT if body.critical is None else body.critical,
        required_approvals=body.required_approvals,
    )
    await written_once(scope, "an environment", body.key, env)
    if source is not None:
        await _copy_settings(scope, source, env)
    else:
        await _default_settings(scope, env)
    await scope.session.flush()
    await scope.changed([env.id])
    await scope.session.refresh(env)
    out = environment_out(env)
    scope.audit(
        "environment.create",
        "environment",
        env.key,
        after={**to_json(out), "copyFrom": source.key if source else None},
    )
    return out


async def _copy_settings(scope: Scope, source: Environment, env: Environment) -> None:
    """Every flag's settings, rules, targets and prerequisites as ``source`` has them (rule ids
    too: a rule is the same rule in both), so the new environment serves exactly what ``source``
    serves."""
    now = utcnow()
    for setting in await scope.session.scalars(
        select(FlagSetting).where(FlagSetting.environment_id == source.id)
    ):
        scope.session.add(
            FlagSetting(
                flag_id=setting.flag_id,
                environment_id=env.id,
                enabled=setting.enabled,
                off_variation=setting.off_variation,
                fallthrough=copy.deepcopy(setting.fallthrough),
                rules=copy.deepcopy(setting.rules),
                targets=copy.deepcopy(setting.targets),
                prerequisites=copy.deepcopy(setting.prerequisites),
                version=1,
                updated_at=now,
            )
        )


async def _default_settings(scope: Scope, env: Environment) -> None:
    flags = await scope.session.scalars(select(Flag).where(Flag.project_id == scope.project_id))
    for flag in flags:
        variations = [w.Variation(x["idx"], x["value"], x.get("name", "")) for x in flag.variations]
        on_idx, off_idx = default_serving(flag.type, variations)
        scope.session.add(
            FlagSetting(
                flag_id=flag.id,
                environment_id=env.id,
                enabled=False,
                off_variation=off_idx,
                fallthrough={"variation": on_idx},
                rules=[],
                targets=[],
                prerequisites=[],
                version=1,
            )
        )


async def get_environment(scope: Scope, key: str) -> s.Environment:
    return environment_out(await scope.environment(key))


async def _expect(scope: Scope, env: Environment) -> None:
    await scope.expect_version(
        Environment, Environment.version, env.version, Environment.id == env.id
    )


async def patch_environment(scope: Scope, key: str, body: s.EnvironmentPatch) -> s.Environment:
    scope.require(Permission.ADMIN)
    env = await scope.environment(key)
    await _expect(scope, env)
    problems = base.Problems()
    if body.key is not msgspec.UNSET:
        base.check_key(problems, "key", body.key)
    if body.name is not msgspec.UNSET:
        base.check_name(problems, "name", body.name)
    if body.required_approvals is not msgspec.UNSET:
        _check_approvals(problems, body.required_approvals)
    problems.raise_if_any()
    before = environment_out(env)
    renamed = body.key is not msgspec.UNSET and body.key != env.key
    take_given(env, body, "key", "name", "critical", "required_approvals")
    if (env.key, env.name, env.critical, env.required_approvals) == (
        before.key,
        before.name,
        before.critical,
        before.required_approvals,
    ):
        return before
    env.version += 1
    wanted = env.key
    await written_once(scope, "an environment", wanted)
    if renamed:
        await scope.changed([env.id])  # the snapshot names its environment
        await scope.session.refresh(env)
    after = environment_out(env)
    action = "environment.rename" if renamed else "environment.update"
    scope.audit(action, "environment", env.key, before=before, after=after)
    return after


RevokeKey = Callable[[Scope, str], Awaitable[object]]
"""Revokes one key (by id) as ``POST /keys/:id/revoke`` does: the keys' ``revoke_key``, which the
app provides (the dependency ``revoke_key``), so that environments do not import keys."""


async def delete_environment(
    scope: Scope, key: str, *, revoke: RevokeKey | None
) -> s.EnvironmentDeleted:
    """Delete an environment and its flag settings: 409 while live keys are bound to it, unless
    given ``revoke`` (each is revoked with it, then removed with it), and for the project's last
    one."""
    scope.require(Permission.ADMIN)
    env = await scope.environment(key)
    await _expect(scope, env)
    bound = list(
        await scope.session.scalars(
            select(ApiKey)
            .where(ApiKey.environment_id == env.id, ApiKey.revoked_at.is_(None))
            .order_by(ApiKey.id)
        )
    )
    if bound and revoke is None:
        raise conflict(
            f"{len(bound)} key(s) are bound to environment {key!r} "
            f"({', '.join(k.id for k in bound)}): revoke them, or delete with ?revokeKeys=true"
        )
    if len(await scope.environments()) == 1:
        raise conflict(f"environment {key!r} is the project's last one")
    before = environment_out(env)
    for api_key in bound:
        assert revoke is not None
        await revoke(scope, api_key.id)
    await scope.session.execute(delete(FlagSetting).where(FlagSetting.environment_id == env.id))
    await scope.session.execute(delete(ApiKey).where(ApiKey.environment_id == env.id))
    await scope.session.delete(env)
    await scope.session.flush()
    scope.change.remove(env.id)  # relays and providers drop it and the keys bound to it
    scope.audit("environment.delete", "environment", key, before=before)
    return s.EnvironmentDeleted(key=key, deleted=True, revoked_keys=[k.id for k in bound])
