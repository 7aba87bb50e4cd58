"""Flags and their per-environment settings: reads, validated writes, audit, snapshot versions."""

from __future__ import annotations

import secrets
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import msgspec
from sqlalchemy import ColumnElement, Select, and_, delete, exists, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm.attributes import flag_modified

from control_plane.access import Permission
from control_plane.db.ids import new_id
from control_plane.db.models import (
    CodeReference,
    Environment,
    Flag,
    FlagMetric,
    FlagSetting,
    ScheduledChange,
    Segment,
)
from control_plane.db.types import utcnow
from control_plane.domain import problems as base
from control_plane.domain.common import Scope
from control_plane.domain.flags import canonical
from control_plane.domain.flags import schemas as s
from control_plane.domain.paging import Page, counted, paged
from control_plane.domain.protection import (
    protected,
    refuse_unapproved,
    refuse_unapproved_anywhere,
)
from control_plane.domain.rows import (
    find_flag,
    flag_setting,
    forget_exposures,
    refuse_archived,
    touch_all_settings,
    variation_indexes,
    written_once,
)
from control_plane.domain.snapshots import compile_environment, flag_snapshot, segments_for
from control_plane.domain.targeting import clauses as targeting
from control_plane.domain.targeting.schemas import ServeIn, clause_out, serve_out
from control_plane.errors import conflict, invalid, not_found
from shared.clock import now_ms
from shared.engine import (
    CompileError,
    compile_snapshot,
    evaluate,
    ofrep_error_code,
    openfeature_reason,
    prerequisite_cycle,
    validate_flag,
)
from shared.wire import snapshot as w

ArchivedFilter = Literal["false", "true", "only"]
"""``false``: live flags (the default); ``true``: live and archived; ``only``: archived ones."""

# --- stored JSON <-> wire structs <-> API output -------------------------------------------------


def _wire(value: Any, kind: type[Any]) -> Any:
    return msgspec.convert(value, kind)


def _stored(value: Any) -> Any:
    return msgspec.to_builtins(value)


def rules_out(stored: list[dict[str, Any]]) -> list[s.Rule]:
    out = []
    for item in stored:
        rule: w.Rule = _wire(item, w.Rule)
        out.append(
            s.Rule(
                id=rule.id,
                description=rule.description,
                clauses=[clause_out(c) for c in rule.clauses],
                serve=serve_out(_stored(rule.serve)),
            )
        )
    return out


def _summary(setting: FlagSetting) -> s.EnvironmentSummary:
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


def flag_out(flag: Flag, settings: Sequence[tuple[FlagSetting, str]]) -> s.Flag:
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


def settings_out(flag: Flag, env_key: str, setting: FlagSetting) -> s.EnvironmentSettings:
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


def _new_rule_id() -> str:
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


# --- writes ----------------------------------------------------------------------------------------


def _new_flag(scope: Scope, body: s.FlagCreate) -> tuple[Flag, int, int]:
    """A validated new flag (not yet added), with the variations it serves on and off."""
    problems = base.Problems()
    base.check_key(problems, "key", body.key)
    name = body.name if body.name is not None else body.key
    base.check_name(problems, "name", name)
    base.check_tags(problems, "tags", body.tags)
    if not body.bucket_by.strip():
        problems.add("bucketBy", "must not be blank")
    variations = canonical.variations(problems, body.type, body.variations)
    problems.raise_if_any()

    on_idx, off_idx = targeting.default_serving(body.type, variations)
    now = utcnow()
    flag = Flag(
        id=new_id("flg"),
        project_id=scope.project_id,
        key=body.key,
        name=name,
        description=body.description,
        type=body.type,
        variations=[_stored(x) for x in variations],
        temporary=body.temporary,
        bucket_by=body.bucket_by,
        tags=list(dict.fromkeys(body.tags)),
        client_side=body.client_side,
        archived=False,
        version=1,
        created_at=now,
        updated_at=now,
    )
    return flag, on_idx, off_idx


def _new_settings(
    scope: Scope, flag: Flag, environments: Sequence[Environment], on_idx: int, off_idx: int
) -> list[FlagSetting]:
    """A new flag's setting in every environment (off, serving its defaults), added."""
    settings = []
    for env in environments:
        setting = FlagSetting(
            flag_id=flag.id,
            environment_id=env.id,
            enabled=False,
            off_variation=off_idx,
            fallthrough=_stored(w.Serve(variation=on_idx)),
            rules=[],
            targets=[],
            prerequisites=[],
            version=1,
            updated_at=flag.created_at,
        )
        scope.session.add(setting)
        settings.append(setting)
    return settings


def _created(
    scope: Scope, flag: Flag, settings: list[FlagSetting], environments: Sequence[Environment]
) -> s.Flag:
    """The new flag as the API answers it, its creation audited."""
    out = flag_out(flag, [(x, env.key) for x, env in zip(settings, environments, strict=True)])
    scope.audit("flag.create", "flag", flag.key, after=out)
    return out


async def create_flag(scope: Scope, body: s.FlagCreate) -> s.Flag:
    scope.require(Permission.EDIT)
    flag, on_idx, off_idx = _new_flag(scope, body)
    await written_once(scope, "a flag", body.key, flag)
    environments = await scope.environments()
    settings = _new_settings(scope, flag, environments, on_idx, off_idx)
    out = _created(scope, flag, settings, environments)
    await scope.session.flush()
    await scope.changed((env.id for env in environments), flags=[flag.key])
    return out


class FlagCreator:
    """Many flags created in one unit of work (a project document's apply), each validated,
    refused and audited as ``create_flag`` does: the project's flag keys and environments are
    read once, and the rows are published together by ``close``. Nothing else may create flags
    or environments between ``open`` and ``close`` (patching them is safe).

    The rows are added to the session and left there (``made``), for the bulk settings writers
    that follow to take (``SettingsWriter.open``): a new flag's settings are then written as one
    INSERT of their final values, not an INSERT and an UPDATE, and a rehearsal that is rolled
    back writes none of them. Whoever opens the creator flushes its rows before the unit of
    work ends (``flush``)."""

    def __init__(self, scope: Scope, keys: set[str], environments: list[Environment]) -> None:
        self.scope = scope
        self.keys = keys
        self.environments = environments
        self.created: list[str] = []
        self.made: dict[str, tuple[Flag, dict[str, FlagSetting]]] = {}  # by key: by env id

    @classmethod
    async def open(cls, scope: Scope) -> FlagCreator:
        scope.require(Permission.EDIT)
        keys = await scope.session.scalars(
            select(Flag.key).where(Flag.project_id == scope.project_id)
        )
        return cls(scope, set(keys), await scope.environments())

    def create(self, body: s.FlagCreate) -> None:
        self.scope.require(Permission.EDIT)
        flag, on_idx, off_idx = _new_flag(self.scope, body)
        if flag.key in self.keys:
            raise conflict(f"a flag with key {body.key!r} already exists")
        self.keys.add(flag.key)
        self.scope.session.add(flag)
        self.created.append(flag.key)
        settings = _new_settings(self.scope, flag, self.environments, on_idx, off_idx)
        if not self.scope.rehearsal:  # a rehearsal records nothing: nothing to describe
            _created(self.scope, flag, settings, self.environments)
        self.made[flag.key] = (flag, {setting.environment_id: setting for setting in settings})

    async def close(self) -> None:
        """Publish the flags created (their rows are flushed by ``flush``)."""
        if not self.created:
            return
        with self.scope.session.no_autoflush:
            ids = (env.id for env in self.environments)
            await self.scope.changed(ids, flags=self.created)
        self.created = []

    async def flush(self) -> None:
        if not self.made:
            return
        try:
            await self.scope.session.flush()
        except IntegrityError as exc:  # written meanwhile by another unit of work
            raise conflict("a flag with one of these keys already exists") from exc
        self.made = {}


async def patch_flag(scope: Scope, key: str, body: s.FlagPatch) -> s.Flag:
    scope.require(Permission.EDIT)
    flag = await find_flag(scope, key)
    await _expect_flag(scope, flag)
    before = await get_flag(scope, key)
    problems = base.Problems()
    if body.name is not msgspec.UNSET:
        base.check_name(problems, "name", body.name)
    if body.tags is not msgspec.UNSET:
        base.check_tags(problems, "tags", body.tags)
    if body.bucket_by is not msgspec.UNSET and not body.bucket_by.strip():
        problems.add("bucketBy", "must not be blank")
    variations = (
        await _edited_variations(scope, flag, body.variations, problems)
        if body.variations is not msgspec.UNSET
        else None
    )
    problems.raise_if_any()
    served_anew = _served_anew(flag, body, variations)
    if served_anew:
        await refuse_unapproved_anywhere(scope, f"changing {served_anew} of flag {key!r}")
    served = (flag.bucket_by, flag.variations)
    if body.bucket_by is not msgspec.UNSET:
        flag.bucket_by = body.bucket_by
    if variations is not None:
        flag.variations = [_stored(x) for x in variations]
    if (flag.bucket_by, flag.variations) != served:
        await touch_all_settings(scope, flag)  # what relays serve changed: republish
    unchanged = (flag.name, flag.description, list(flag.tags), flag.temporary, flag.client_side)
    if body.name is not msgspec.UNSET:
        flag.name = body.name
    if body.description is not msgspec.UNSET:
        flag.description = body.description
    if body.tags is not msgspec.UNSET:
        flag.tags = list(dict.fromkeys(body.tags))
    if body.temporary is not msgspec.UNSET:
        flag.temporary = body.temporary
    if body.client_side is not msgspec.UNSET and body.client_side != flag.client_side:
        flag.client_side = body.client_side
        await touch_all_settings(scope, flag)  # who may see the flag changed: republish
    if (
        flag.name,
        flag.description,
        list(flag.tags),
        flag.temporary,
        flag.client_side,
    ) == unchanged and (flag.bucket_by, flag.variations) == served:
        return before  # nothing to change: no new version, no audit entry
    flag.version += 1
    flag.updated_at = utcnow()
    await scope.session.flush()
    after = await get_flag(scope, key)
    scope.audit("flag.update", "flag", key, before=before, after=after)
    return after


def _served_anew(flag: Flag, body: s.FlagPatch, variations: list[w.Variation] | None) -> str:
    """Which of the flag's own fields that every environment serves the patch changes (a
    variation's value; a new variation serves nothing yet, a removed one served nothing)."""
    changed = []
    if variations is not None:
        before = {int(x["idx"]): x["value"] for x in flag.variations}
        after = {int(x["idx"]): x["value"] for x in map(_stored, variations)}
        if any(after[idx] != value for idx, value in before.items() if idx in after):
            changed.append("the value of a variation")
    if body.bucket_by is not msgspec.UNSET and body.bucket_by != flag.bucket_by:
        changed.append("bucketBy")
    if body.client_side is not msgspec.UNSET and body.client_side != flag.client_side:
        changed.append("clientSide")
    return ", ".join(changed)


async def _variations_in_use(scope: Scope, flag: Flag) -> dict[int, str]:
    """Each variation idx something serves or names, with the first place that does."""
    used: dict[int, str] = {}
    rows = await scope.session.execute(
        select(FlagSetting, Environment.key)
        .join(Environment, Environment.id == FlagSetting.environment_id)
        .where(FlagSetting.flag_id == flag.id)
        .order_by(Environment.created_at, Environment.key)
    )
    for setting, env_key in rows:
        used.setdefault(setting.off_variation, f"{env_key} offVariation")
        for idx in _served(setting.fallthrough):
            used.setdefault(idx, f"{env_key} fallthrough")
        for i, rule in enumerate(setting.rules):
            for idx in _served(rule.get("serve", {})):
                used.setdefault(idx, f"{env_key} rules[{i}]")
        for i, target in enumerate(setting.targets):
            used.setdefault(int(target["variation"]), f"{env_key} targets[{i}]")
    for key, env_key, prerequisites in await _prerequisite_rows(scope, flag.key):
        for p in prerequisites:
            if p["key"] == flag.key:
                used.setdefault(int(p["variation"]), f"a prerequisite of {key} ({env_key})")
    return used


def _served(serve: dict[str, Any]) -> list[int]:
    if serve.get("variation") is not None:
        return [int(serve["variation"])]
    return [int(item["idx"]) for item in serve.get("rollout") or []]


async def _prerequisite_rows(scope: Scope, flag_key: str) -> list[tuple[str, str, Any]]:
    rows = await scope.session.execute(
        select(Flag.key, Environment.key, FlagSetting.prerequisites)
        .join(FlagSetting, FlagSetting.flag_id == Flag.id)
        .join(Environment, Environment.id == FlagSetting.environment_id)
        .where(Flag.project_id == scope.project_id, Flag.key != flag_key)
    )
    return [(k, e, p) for k, e, p in rows if p]


async def _edited_variations(
    scope: Scope, flag: Flag, given: list[s.VariationIn], problems: base.Problems
) -> list[w.Variation]:
    """The flag's variations after an edit: given idxs kept (renamed or re-valued), new items
    on the next free idxs, and a variation left out only if nothing uses it."""
    existing = variation_indexes(flag)
    next_idx = max([*existing, *(x.idx for x in given if x.idx is not None)], default=-1) + 1
    numbered: list[s.VariationIn] = []
    for position, item in enumerate(given):
        if item.idx is None:
            item = s.VariationIn(value=item.value, idx=next_idx, name=item.name)
            next_idx += 1
        elif item.idx not in existing:
            problems.add(
                f"variations[{position}].idx",
                f"no variation has idx {item.idx}: leave idx out to add one",
            )
        numbered.append(item)
    kept = {x.idx for x in numbered}
    removed = sorted(existing - kept)
    if removed:
        used = await _variations_in_use(scope, flag)
        for idx in removed:
            if idx in used:
                problems.add("variations", f"variation {idx} is in use ({used[idx]}): keep it")
    return canonical.variations(problems, flag.type, numbered)


async def delete_flag(scope: Scope, key: str) -> s.FlagDeleted:
    """Delete an archived flag for good (its settings, attached metrics and exposures too)."""
    scope.require(Permission.EDIT)
    flag = await find_flag(scope, key)
    await _expect_flag(scope, flag)
    if not flag.archived:
        raise conflict(f"flag {key!r} is not archived: archive it before deleting it")
    users = await _prerequisite_rows(scope, key)
    names = sorted({f"{f} ({e})" for f, e, p in users if any(x["key"] == key for x in p)})
    if names:
        raise conflict(f"flag {key!r} is a prerequisite of {', '.join(names)}: remove it there")
    before = await get_flag(scope, key)
    environment_ids = [
        x.environment_id
        for x in await scope.session.scalars(
            select(FlagSetting).where(FlagSetting.flag_id == flag.id)
        )
    ]
    await scope.session.execute(delete(FlagMetric).where(FlagMetric.flag_id == flag.id))
    await scope.session.execute(delete(FlagSetting).where(FlagSetting.flag_id == flag.id))
    await forget_exposures(scope, "flag", key)
    await scope.session.delete(flag)
    await scope.session.flush()
    await scope.changed(environment_ids, flags=[key])
    scope.audit("flag.delete", "flag", key, before=before)
    return s.FlagDeleted(key=key, deleted=True)


async def _dependents(scope: Scope, flag_key: str) -> list[tuple[str, str]]:
    """(flag key, environment key) of live flags that name ``flag_key`` as a prerequisite."""
    rows = await scope.session.execute(
        select(Flag.key, Environment.key, FlagSetting.prerequisites)
        .join(FlagSetting, FlagSetting.flag_id == Flag.id)
        .join(Environment, Environment.id == FlagSetting.environment_id)
        .where(Flag.project_id == scope.project_id, Flag.archived.is_(False), Flag.key != flag_key)
    )
    return [
        (fkey, ekey) for fkey, ekey, prereqs in rows if any(p["key"] == flag_key for p in prereqs)
    ]


async def archive_flag(scope: Scope, key: str) -> s.Flag:
    scope.require(Permission.EDIT)
    flag = await find_flag(scope, key)
    await _expect_flag(scope, flag)
    if flag.archived:
        raise conflict(f"flag {key!r} is already archived")
    await refuse_unapproved_anywhere(scope, f"archiving flag {key!r}")
    dependents = await _dependents(scope, key)
    if dependents:
        names = ", ".join(sorted({f"{f} ({e})" for f, e in dependents}))
        raise conflict(f"flag {key!r} is a prerequisite of {names}: remove it there first")
    before = await get_flag(scope, key)
    flag.archived = True
    flag.archived_at = flag.updated_at = utcnow()
    flag.version += 1
    await touch_all_settings(scope, flag)
    await scope.session.flush()
    after = await get_flag(scope, key)
    scope.audit("flag.archive", "flag", key, before=before, after=after)
    return after


async def restore_flag(scope: Scope, key: str) -> s.Flag:
    scope.require(Permission.EDIT)
    flag = await find_flag(scope, key)
    await _expect_flag(scope, flag)
    if not flag.archived:
        raise conflict(f"flag {key!r} is not archived")
    await refuse_unapproved_anywhere(scope, f"restoring flag {key!r}")
    before = await get_flag(scope, key)
    flag.archived = False
    flag.archived_at = None
    flag.updated_at = utcnow()
    flag.version += 1
    await touch_all_settings(scope, flag)
    await scope.session.flush()
    after = await get_flag(scope, key)
    scope.audit("flag.restore", "flag", key, before=before, after=after)
    return after


async def _expect_flag(scope: Scope, flag: Flag) -> None:
    await scope.expect_version(Flag, Flag.version, flag.version, Flag.id == flag.id)


async def _expect_setting(scope: Scope, setting: FlagSetting) -> None:
    if scope.if_match is None:
        return  # no If-Match: nothing to compare (and no clauses to build, many times over)
    await scope.expect_version(
        FlagSetting,
        FlagSetting.version,
        setting.version,
        FlagSetting.flag_id == setting.flag_id,
        FlagSetting.environment_id == setting.environment_id,
    )


CHUNK = 500  # keys per ``IN (...)`` of a bulk read
WRITTEN = ("enabled", "off_variation", "fallthrough", "rules", "targets", "prerequisites")
"""A setting's columns a bulk write sends, changed or not: the ORM makes one UPDATE of the rows
that change the same columns, so many settings changing different ones would each be a statement."""


class SettingsWriter:
    """The rules of a write of flags' settings in one environment (``put_settings``,
    ``put_rules``), and the rows they are checked against: the flags, their settings there, the
    segments and the prerequisites' graph.

    One write (the API's) reads what it needs of them per call and is saved at once
    (``bulk=False``). Many writes in one unit of work (a project document's apply: ``open``)
    read the environment's graph, the segments and the flags they write once, keep them current
    as they write, and are flushed and published together by ``close``; nothing else may write flags, segments or this
    environment's settings between ``open`` and ``close``. Either way each write is checked,
    refused and audited alike."""

    def __init__(self, scope: Scope, env: Environment, *, bulk: bool) -> None:
        self.scope = scope
        self.env = env
        self.bulk = bulk
        self.flags: dict[str, Flag] = {}  # the flags read, by key
        self.settings: dict[str, FlagSetting] = {}  # their settings here, by flag id
        self.graph: dict[str, list[str]] = {}  # bulk: every flag's prerequisites here
        self.segments: dict[str, w.SegmentSnapshot] = {}  # bulk: the project's
        self.written: list[str] = []  # flag keys written, published by ``close``
        self.missing: set[str] = set()  # bulk: keys read and not found

    @classmethod
    async def open(
        cls, scope: Scope, env_key: str, keys: Collection[str], creator: FlagCreator | None = None
    ) -> SettingsWriter:
        """A bulk writer of the environment ``env_key``, the flags ``keys`` read at once (any
        other flag a write names is read when named), and the flags ``creator`` made in this
        unit of work taken as they are, not yet flushed: their rows are written once, with
        what this writer puts in them. Its reads do not flush them (the writer holds them)."""
        scope.require(Permission.EDIT)
        with scope.session.no_autoflush:
            writer = cls(scope, await scope.environment(env_key), bulk=True)
            rows = await scope.session.execute(
                select(Flag.key, FlagSetting.prerequisites)
                .join(FlagSetting, FlagSetting.flag_id == Flag.id)
                .where(
                    Flag.project_id == scope.project_id, FlagSetting.environment_id == writer.env.id
                )
            )
            writer.graph = {key: [p["key"] for p in prereqs] for key, prereqs in rows}
            writer.segments = await segments_for(scope.session, scope.project_id)
        for flag, settings in (creator.made if creator is not None else {}).values():
            if writer.env.id in settings:
                writer.flags[flag.key] = flag
                writer.settings[flag.id] = settings[writer.env.id]
        await writer._load(keys)
        return writer

    def _with_settings(self, keys: Collection[str]) -> Select[Flag, FlagSetting]:
        """The project's flags ``keys`` with their setting in this environment."""
        return (
            select(Flag, FlagSetting)
            .join(FlagSetting, FlagSetting.flag_id == Flag.id)
            .where(
                Flag.project_id == self.scope.project_id,
                Flag.key.in_(sorted(keys)),
                FlagSetting.environment_id == self.env.id,
            )
        )

    async def _load(self, keys: Collection[str]) -> None:
        """Read the flags ``keys`` and their settings here, those not read yet (bulk)."""
        wanted = sorted(k for k in keys if k not in self.flags and k not in self.missing)
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            with self.scope.session.no_autoflush:
                rows = await self.scope.session.execute(self._with_settings(chunk))
            for flag, setting in rows:
                self.flags[flag.key] = flag
                self.settings[flag.id] = setting
            self.missing.update(k for k in chunk if k not in self.flags)

    async def close(self) -> None:
        """Flush and publish what was written (bulk; a single write is saved as it is made). A
        rehearsal, rolled back after, flushes nothing: its writes were checked as they were
        made, and the database would only be told what it is about to forget."""
        if self.written:
            if not self.scope.rehearsal:
                await self.scope.session.flush()
            with self.scope.session.no_autoflush:
                await self.scope.changed([self.env.id], flags=self.written)
            self.written = []

    async def _flag_setting(self, key: str) -> tuple[Flag, FlagSetting]:
        if self.bulk:
            await self._load([key])
        flag = self.flags.get(key)
        if flag is None:
            raise not_found("flag", key)
        setting = self.settings.get(flag.id)
        if setting is None:  # every flag has a row per environment; this guards a broken database
            raise not_found("flag setting", f"{key}/{self.env.key}")
        return flag, setting

    async def _others(self, keys: Collection[str]) -> dict[str, Flag]:
        if self.bulk:
            await self._load(keys)
            return {k: self.flags[k] for k in keys if k in self.flags}
        return {
            f.key: f
            for f in await self.scope.session.scalars(
                select(Flag).where(Flag.project_id == self.scope.project_id, Flag.key.in_(keys))
            )
        }

    async def _graph(self) -> dict[str, list[str]]:
        if self.bulk:
            return self.graph
        rows = await self.scope.session.execute(
            select(Flag.key, FlagSetting.prerequisites)
            .join(FlagSetting, FlagSetting.flag_id == Flag.id)
            .where(
                Flag.project_id == self.scope.project_id, FlagSetting.environment_id == self.env.id
            )
        )
        return {key: [p["key"] for p in prereqs] for key, prereqs in rows}

    async def _segments(self) -> dict[str, w.SegmentSnapshot]:
        if self.bulk:
            return self.segments
        return await segments_for(self.scope.session, self.scope.project_id)

    async def _segment_keys(self) -> frozenset[str]:
        if self.bulk:
            return frozenset(self.segments)
        return frozenset(
            await self.scope.session.scalars(
                select(Segment.key).where(Segment.project_id == self.scope.project_id)
            )
        )

    async def _others_here(self, keys: Collection[str]) -> dict[str, w.FlagSnapshot]:
        """The snapshots of flags ``keys`` in this environment (a flag's prerequisites)."""
        if self.bulk:
            await self._load(keys)
            return {
                k: flag_snapshot(self.flags[k], self.settings[self.flags[k].id])
                for k in keys
                if k in self.flags and self.flags[k].id in self.settings
            }
        rows = await self.scope.session.execute(self._with_settings(keys))
        return {other.key: flag_snapshot(other, other_setting) for other, other_setting in rows}

    async def _prerequisites(
        self, flag: Flag, given: Sequence[s.PrerequisiteIn], problems: base.Problems
    ) -> list[w.Prerequisite]:
        out: list[w.Prerequisite] = []
        others = await self._others({p.key for p in given})
        seen: set[str] = set()
        for i, item in enumerate(given):
            field = f"prerequisites[{i}]"
            other = others.get(item.key)
            if item.key == flag.key:
                problems.add(f"{field}.key", "a flag cannot be its own prerequisite")
            elif other is None:
                problems.add(f"{field}.key", f"unknown flag {item.key!r}")
            elif other.archived:
                problems.add(f"{field}.key", f"flag {item.key!r} is archived")
            elif item.variation not in variation_indexes(other):
                problems.add(
                    f"{field}.variation",
                    f"flag {item.key!r} has no variation with idx {item.variation}",
                )
            if item.key in seen:
                problems.add(f"{field}.key", f"{item.key!r} is listed twice")
            seen.add(item.key)
            out.append(w.Prerequisite(key=item.key, variation=item.variation))
        if not problems.items and out:
            graph = await self._graph()
            held = graph.get(flag.key)
            graph[flag.key] = [p.key for p in out]
            try:
                cycle = prerequisite_cycle(flag.key, graph)  # the engine's rule, would-be graph
            finally:
                if held is None:
                    del graph[flag.key]
                else:
                    graph[flag.key] = held
            if cycle:
                problems.add("prerequisites", "would make a cycle: " + " -> ".join(cycle))
        return out

    async def _check_with_engine(self, flag: Flag, setting: FlagSetting) -> None:
        """Refuse what the evaluation engine could not compile (regexes, versions, dates,
        cycles)."""
        segments = await self._segments()
        others = await self._others_here([p["key"] for p in setting.prerequisites])
        try:
            validate_flag(flag_snapshot(flag, setting), segments, others)
        except CompileError as exc:
            raise invalid(exc.path or "body", exc.message) from exc

    async def _save(self, flag: Flag, setting: FlagSetting) -> None:
        if not self.bulk:
            await _save_setting(self.scope, flag, self.env, setting)
            return
        setting.version += 1
        self.graph[flag.key] = [p["key"] for p in setting.prerequisites]
        self.written.append(flag.key)
        if self.scope.rehearsal:
            return  # never flushed (``close``)
        setting.updated_at = utcnow()
        for column in WRITTEN:  # every setting's UPDATE alike: one executemany at ``close``
            flag_modified(setting, column)

    async def put(
        self, key: str, settings: s.EnvironmentSettingsIn | None, rules: s.RulesIn | None
    ) -> None:
        """A flag's settings and rules here written together (each as its own write, audited
        alike), the engine's check made once, on the flag as it will be served."""
        if settings is not None:
            await self._put_settings(key, settings, check=rules is None)
        if rules is not None:
            await self._put_rules(key, rules)

    async def _writable(self, key: str, doing: str) -> tuple[Flag, FlagSetting]:
        """The flag ``key`` and its setting here, once the write may go ahead: the permission,
        the environment's approval rule, the flag not archived, the If-Match version."""
        self.scope.require(Permission.EDIT)
        flag, setting = await self._flag_setting(key)
        refuse_unapproved(self.scope, self.env, doing)
        refuse_archived(flag)
        await _expect_setting(self.scope, setting)
        return flag, setting

    async def put_settings(
        self, key: str, body: s.EnvironmentSettingsIn, *, check: bool = True
    ) -> s.EnvironmentSettings:
        """``check=False``: the engine's check is left to a write of the rules that follows in
        the same unit of work (``put``)."""
        flag, setting = await self._put_settings(key, body, check=check)
        return settings_out(flag, self.env.key, setting)

    async def _put_settings(
        self, key: str, body: s.EnvironmentSettingsIn, *, check: bool
    ) -> tuple[Flag, FlagSetting]:
        scope, env = self.scope, self.env
        flag, setting = await self._writable(key, f"changing the settings of flag {key!r}")
        described = not scope.rehearsal  # a rehearsal records nothing: nothing to describe
        before = settings_out(flag, env.key, setting) if described else None
        idxs = variation_indexes(flag)
        problems = base.Problems()
        if body.off_variation is not msgspec.UNSET and body.off_variation not in idxs:
            problems.add("offVariation", f"no variation has idx {body.off_variation}")
        fallthrough = (
            targeting.serve(problems, "fallthrough", body.fallthrough, idxs)
            if body.fallthrough is not msgspec.UNSET
            else None
        )
        targets = (
            canonical.targets(problems, body.targets, idxs)
            if body.targets is not msgspec.UNSET
            else None
        )
        prerequisites = (
            await self._prerequisites(flag, body.prerequisites, problems)
            if body.prerequisites is not msgspec.UNSET
            else None
        )
        problems.raise_if_any()
        if body.enabled is not msgspec.UNSET:
            setting.enabled = body.enabled
        if body.off_variation is not msgspec.UNSET:
            setting.off_variation = body.off_variation
        if fallthrough is not None:
            setting.fallthrough = _stored(fallthrough)
        if targets is not None:
            setting.targets = [_stored(t) for t in targets]
        if prerequisites is not None:
            setting.prerequisites = [_stored(p) for p in prerequisites]
        if check:
            await self._check_with_engine(flag, setting)
        await self._save(flag, setting)
        if described:
            after = settings_out(flag, env.key, setting)
            scope.audit(
                "flag.settings.update", "flag", key, before=before, after=after, environment=env.key
            )
        return flag, setting

    def _rules_out(self, flag: Flag, setting: FlagSetting) -> s.Rules:
        return s.Rules(
            flag=flag.key,
            environment=self.env.key,
            rules=rules_out(setting.rules),
            version=setting.version,
        )

    async def put_rules(self, key: str, body: s.RulesIn) -> s.Rules:
        flag, setting = await self._put_rules(key, body)
        return self._rules_out(flag, setting)

    async def _put_rules(self, key: str, body: s.RulesIn) -> tuple[Flag, FlagSetting]:
        scope, env = self.scope, self.env
        flag, setting = await self._writable(key, f"changing the rules of flag {key!r}")
        described = not scope.rehearsal  # a rehearsal records nothing: nothing to describe
        before = self._rules_out(flag, setting) if described else None
        segment_keys = await self._segment_keys()
        problems = base.Problems()
        rules = canonical.rules(
            problems, body.rules, variation_indexes(flag), segment_keys, _new_rule_id
        )
        problems.raise_if_any()
        setting.rules = [_stored(r) for r in rules]
        await self._check_with_engine(flag, setting)
        await self._save(flag, setting)
        if described:
            after = self._rules_out(flag, setting)
            scope.audit(
                "flag.rules.update", "flag", key, before=before, after=after, environment=env.key
            )
        return flag, setting


async def _writer(scope: Scope, key: str, env_key: str) -> SettingsWriter:
    """One write's: the flag ``key`` and its setting in ``env_key`` read as ``flag_setting``
    reads them (404 for either)."""
    flag, env, setting = await flag_setting(scope, key, env_key)
    writer = SettingsWriter(scope, env, bulk=False)
    writer.flags[flag.key] = flag
    writer.settings[flag.id] = setting
    return writer


async def put_settings(
    scope: Scope, key: str, env_key: str, body: s.EnvironmentSettingsIn
) -> s.EnvironmentSettings:
    scope.require(Permission.EDIT)
    writer = await _writer(scope, key, env_key)
    return await writer.put_settings(key, body)


async def toggle(scope: Scope, key: str, env_key: str, enabled: bool) -> s.Toggled:
    """The kill switch. In a protected environment turning a flag off is never gated: it needs
    the permission ``turn-off`` (an admin, or a person or key granted "may turn off"), applies
    at once and is audited as an emergency change; turning it on there needs a change request.
    Elsewhere either needs ``edit`` (or, to turn off, ``turn-off``)."""
    if enabled or scope.holds(Permission.EDIT):
        scope.require(Permission.EDIT)
    else:
        scope.require(Permission.TURN_OFF)  # on call without edit: may still turn off
    flag, env, setting = await flag_setting(scope, key, env_key)
    emergency = not enabled and protected(env) and scope.applying is None
    if emergency:
        scope.require(Permission.TURN_OFF)
    else:
        refuse_unapproved(scope, env, f"turning flag {key!r} on")
    refuse_archived(flag)
    await _expect_setting(scope, setting)
    if setting.enabled != enabled:
        setting.enabled = enabled
        await _save_setting(scope, flag, env, setting)
        scope.audit(
            "flag.toggle",
            "flag",
            key,
            before={"enabled": not enabled},
            after={"enabled": enabled, "emergency": True} if emergency else {"enabled": enabled},
            environment=env.key,
        )
    return s.Toggled(
        flag=flag.key, environment=env.key, enabled=setting.enabled, version=setting.version
    )


async def put_rules(scope: Scope, key: str, env_key: str, body: s.RulesIn) -> s.Rules:
    scope.require(Permission.EDIT)
    writer = await _writer(scope, key, env_key)
    return await writer.put_rules(key, body)


async def _save_setting(
    scope: Scope, flag: Flag, env: Environment, setting: FlagSetting
) -> s.EnvironmentSettings:
    setting.version += 1
    setting.updated_at = utcnow()
    await scope.session.flush()
    await scope.changed([env.id], flags=[flag.key])
    return settings_out(flag, env.key, setting)


async def apply_scheduled(scope: Scope, row: ScheduledChange, flag_key: str, env_key: str) -> str:
    """Carry out a due scheduled change with the same service call as ``POST .../toggle`` or
    ``PUT .../environments/:env`` (the schedule runner is handed this by the app); answers what
    it did, for the schedule's record. A schedule made before its environment became
    protected is refused when due (even a turn-off: the kill switch is a person's act, not a
    schedule's); one in a protected environment is made as a change request with ``applyAt``."""
    scope.require(Permission.EDIT)
    _, env, _ = await flag_setting(scope, flag_key, env_key)
    refuse_unapproved(scope, env, f"the scheduled change {row.id} of flag {flag_key!r}")
    if row.kind == "toggle":
        assert row.enabled is not None
        toggled = await toggle(scope, flag_key, env_key, row.enabled)
        return f"{'on' if toggled.enabled else 'off'} (setting version {toggled.version})"
    serve = msgspec.convert(row.fallthrough, ServeIn)
    done = await put_settings(scope, flag_key, env_key, s.EnvironmentSettingsIn(fallthrough=serve))
    return f"fallthrough changed (setting version {done.version})"
