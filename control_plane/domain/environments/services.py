"""Environments: a new one starts with every flag disabled in it."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from control_plane.db.ids import new_id
from control_plane.db.models import Environment, Flag, FlagSetting
from control_plane.domain.common import Scope
from control_plane.domain.environments import schemas as s
from control_plane.domain.flags import validation as v
from control_plane.errors import conflict
from shared.wire import snapshot as w


def environment_out(env: Environment) -> s.Environment:
    return s.Environment(
        id=env.id,
        key=env.key,
        name=env.name,
        snapshot_version=env.snapshot_version,
        created_at=env.created_at,
    )


async def list_environments(scope: Scope) -> list[s.Environment]:
    return [environment_out(e) for e in await scope.environments()]


async def create_environment(scope: Scope, body: s.EnvironmentCreate) -> s.Environment:
    problems = v.Problems()
    v.check_key(problems, "key", body.key)
    name = body.name if body.name is not None else body.key.title()
    v.check_name(problems, "name", name)
    problems.raise_if_any()
    env = Environment(
        id=new_id("env"), project_id=scope.project_id, key=body.key, name=name, snapshot_version=0
    )
    scope.session.add(env)
    try:
        await scope.session.flush()
    except IntegrityError as exc:
        raise conflict(f"an environment with key {body.key!r} already exists") from exc
    flags = await scope.session.scalars(select(Flag).where(Flag.project_id == scope.project_id))
    for flag in flags:
        variations = [w.Variation(x["idx"], x["value"], x.get("name", "")) for x in flag.variations]
        on_idx, off_idx = v.default_serving(flag.type, variations)
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
    await scope.session.flush()
    await scope.changed([env.id])
    await scope.session.refresh(env)
    out = environment_out(env)
    scope.audit("environment.create", "environment", env.key, after=out)
    return out
