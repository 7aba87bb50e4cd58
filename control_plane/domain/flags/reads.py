"""A flag as the API shows it: its stored JSON turned into the API's output, and the reads (the
listing and its filter, one flag, its settings and rules in an environment, a preview)."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import msgspec
from sqlalchemy import ColumnElement, Select, and_, exists, func, or_, select

from control_plane.db.models import (
    CodeReference,
    Environment,
    Flag,
    FlagRow,
    FlagSetting,
    SettingRow,
)
from control_plane.db.types import utcnow
from control_plane.domain.common import Scope
from control_plane.domain.flags import schemas as s
from control_plane.domain.paging import Page, counted, paged
from control_plane.domain.rows import (
    find_flag,
    flag_setting,
)
from control_plane.domain.snapshots import compile_environment
from control_plane.domain.targeting.schemas import clause_out, serve_out
from control_plane.errors import invalid
from shared.clock import now_ms
from shared.engine import (
    CompileError,
    compile_snapshot,
    evaluate,
    ofrep_error_code,
    openfeature_reason,
)
from shared.wire import snapshot as w

ArchivedFilter = Literal["false", "true", "only"]
"""``false``: live flags (the default); ``true``: live and archived; ``only``: archived ones."""

# --- stored JSON <-> wire structs <-> API output -------------------------------------------------


def _wire(value: Any, kind: type[Any]) -> Any:
    return msgspec.convert(value, kind)


def stored(value: Any) -> Any:
    return msgspec.to_builtins(value)


def rules_out(rows: list[dict[str, Any]]) -> list[s.Rule]:
    out = []
    for item in rows:
        rule: w.Rule = _wire(item, w.Rule)
        out.append(
            s.Rule(
                id=rule.id,
                description=rule.description,
                clauses=[clause_out(c) for c in rule.clauses],
                serve=serve_out(stored(rule.serve)),
            )
        )
    return out


def _summary(setting: SettingRow) -> s.EnvironmentSummary:
    return s.EnvironmentSummary(
        enabled=setting.enabled,
        off_variation=setting.off_variation,
        fallthrough=serve_out(setting.fallthrough),
        rules_count=len(setting.rules),
        targets_count=len(setting.targets),
        prerequisites_count=len(setting.prerequisites),
        version=setting.version,
        updated_at=setting.updated_at,
    )


def flag_out(flag: FlagRow, settings: Sequence[tuple[SettingRow, str]]) -> s.Flag:
    return s.Flag(
        id=flag.id,
        key=flag.key,
        name=flag.name,
        description=flag.description,
        type=flag.type,
        variations=[
            s.Variation(idx=x["idx"], value=x["value"], name=x.get("name", ""))
            for x in flag.variations
        ],
        temporary=flag.temporary,
        bucket_by=flag.bucket_by,
        tags=list(flag.tags),
        client_side=flag.client_side,
        archived=flag.archived,
        archived_at=flag.archived_at,
        version=flag.version,
        created_at=flag.created_at,
        updated_at=flag.updated_at,
        environments={env_key: _summary(setting) for setting, env_key in settings},
    )


def settings_out(flag: FlagRow, env_key: str, setting: SettingRow) -> s.EnvironmentSettings:
    return s.EnvironmentSettings(
        flag=flag.key,
        environment=env_key,
        enabled=setting.enabled,
        off_variation=setting.off_variation,
        fallthrough=serve_out(setting.fallthrough),
        targets=[
            s.Target(
                variation=t["variation"],
                values=list(t["values"]),
                context_kind=t.get("contextKind") or msgspec.UNSET,
            )
            for t in setting.targets
        ],
        prerequisites=[
            s.Prerequisite(key=p["key"], variation=p["variation"]) for p in setting.prerequisites
        ],
        version=setting.version,
        updated_at=setting.updated_at,
    )


def new_rule_id() -> str:
    return "rule_" + secrets.token_hex(4)


# --- reads -----------------------------------------------------------------------------------------


async def _settings_of(
    scope: Scope, flag_ids: Iterable[str]
) -> dict[str, list[tuple[FlagSetting, str]]]:
    ids = list(flag_ids)
    by_flag: dict[str, list[tuple[FlagSetting, str]]] = {i: [] for i in ids}
    if not ids:
        return by_flag
    rows = await scope.session.execute(
        select(FlagSetting, Environment.key)
        .join(Environment, Environment.id == FlagSetting.environment_id)
        .where(FlagSetting.flag_id.in_(ids))
        .order_by(Environment.created_at, Environment.key)
    )
    for setting, env_key in rows:
        by_flag[setting.flag_id].append((setting, env_key))
    return by_flag


@dataclass(frozen=True, slots=True)
class FlagFilter:
    archived: ArchivedFilter = "false"
    q: str | None = None
    tag: str | None = None
    type: str | None = None
    temporary: bool | None = None
    stale_days: int | None = None


def _has_tag(dialect: str, tag: str) -> ColumnElement[bool]:
    elements = (
        func.jsonb_array_elements_text(Flag.tags)
        if dialect == "postgresql"
        else func.json_each(Flag.tags)
    ).table_valued("value")
    return exists(select(1).select_from(elements).where(elements.c.value == tag))


def _stale(days: int) -> ColumnElement[bool]:
    """Temporary, referenced by no uploaded code, and neither the flag nor any of its
    environment settings changed for ``days`` days."""
    cutoff = utcnow() - timedelta(days=days)
    referenced = exists().where(
        CodeReference.project_id == Flag.project_id, CodeReference.flag_key == Flag.key
    )
    touched = exists().where(FlagSetting.flag_id == Flag.id, FlagSetting.updated_at >= cutoff)
    return and_(Flag.temporary.is_(True), Flag.updated_at < cutoff, ~referenced, ~touched)


def _flags_query(scope: Scope, where: FlagFilter) -> Select[Flag]:
    query = select(Flag).where(Flag.project_id == scope.project_id)
    if where.archived == "false":
        query = query.where(Flag.archived.is_(False))
    elif where.archived == "only":
        query = query.where(Flag.archived.is_(True))
    if where.q:
        needle = where.q.lower()
        query = query.where(
            or_(
                Flag.key.contains(needle, autoescape=True),
                func.lower(Flag.name).contains(needle, autoescape=True),
            )
        )
    if where.tag is not None:
        query = query.where(_has_tag(scope.session.get_bind().dialect.name, where.tag))
    if where.type is not None:
        query = query.where(Flag.type == where.type)
    if where.temporary is not None:
        query = query.where(Flag.temporary.is_(where.temporary))
    if where.stale_days is not None:
        query = query.where(_stale(where.stale_days))
    return query


async def list_flags(
    scope: Scope, where: FlagFilter, *, limit: int, cursor: str | None, offset: int = 0
) -> Page[s.Flag]:
    async def convert(flags: list[Flag]) -> list[s.Flag]:
        settings = await _settings_of(scope, (f.id for f in flags))
        return [flag_out(f, settings[f.id]) for f in flags]

    return await paged(
        scope,
        _flags_query(scope, where),
        Flag.key,
        list_name="flags",
        limit=limit,
        cursor=cursor,
        convert=convert,
        offset=offset,
    )


async def count_flags(scope: Scope, where: FlagFilter) -> int:
    """How many flags ``where`` matches (the console's "1-50 of 2,003")."""
    return await counted(scope, _flags_query(scope, where))


async def get_flag(scope: Scope, key: str) -> s.Flag:
    flag = await find_flag(scope, key)
    return flag_out(flag, (await _settings_of(scope, [flag.id]))[flag.id])


async def get_settings(scope: Scope, key: str, env_key: str) -> s.EnvironmentSettings:
    flag, env, setting = await flag_setting(scope, key, env_key)
    return settings_out(flag, env.key, setting)


async def get_rules(scope: Scope, key: str, env_key: str) -> s.Rules:
    flag, env, setting = await flag_setting(scope, key, env_key)
    return s.Rules(
        flag=flag.key, environment=env.key, rules=rules_out(setting.rules), version=setting.version
    )


async def preview(scope: Scope, key: str, env_key: str, context: dict[str, Any]) -> s.Preview:
    """Evaluate ``key`` for ``context`` exactly as a relay holding the current snapshot would."""
    await find_flag(scope, key)  # 404 for an unknown flag; an archived one is FLAG_NOT_FOUND below
    env = await scope.environment(env_key)
    try:
        compiled = compile_snapshot(await compile_environment(scope.session, env))
    except CompileError as exc:  # stored behind the API's checks: relays refuse it too
        raise invalid(
            exc.path or "environment",
            f"the snapshot of {env.key} does not compile, so no relay serves it: {exc.message}",
        ) from exc
    result = evaluate(compiled, key, context, now_ms())
    return s.Preview(
        flag=key,
        environment=env.key,
        value=result.value,
        variation=result.variation,
        variation_name=result.variation_name,
        reason=result.reason.value,
        rule_index=result.rule_index,
        rule_id=result.rule_id,
        prerequisite_key=result.prerequisite_key,
        error_kind=result.error_kind.value if result.error_kind else None,
        in_rollout=result.in_rollout,
        openfeature_reason=openfeature_reason(result),
        error_code=ofrep_error_code(result),
        snapshot_version=env.snapshot_version,
    )
