"""A flag's definition written: created (one, or many in one unit of work), patched, archived,
restored and deleted, each validated, audited and published; its settings per environment are
``flags.settings``, its reads ``flags.reads``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from sqlalchemy import delete, insert, select

from control_plane.access import Permission
from control_plane.db.ids import new_id
from control_plane.db.models import (
    Environment,
    Flag,
    FlagMetric,
    FlagRow,
    FlagSetting,
    NewFlag,
    NewSetting,
    SettingRow,
    insert_values,
)
from control_plane.db.types import utcnow
from control_plane.domain import problems as base
from control_plane.domain.common import Scope
from control_plane.domain.flags import canonical
from control_plane.domain.flags import schemas as s
from control_plane.domain.flags.reads import flag_out, get_flag, stored
from control_plane.domain.protection import (
    refuse_unapproved_anywhere,
)
from control_plane.domain.rows import (
    find_flag,
    forget_exposures,
    inserted_once,
    key_taken,
    touch_all_settings,
    variation_indexes,
    written_once,
)
from control_plane.domain.targeting import clauses as targeting
from control_plane.errors import conflict
from shared.wire import snapshot as w

# --- writes ----------------------------------------------------------------------------------------


def _new_flag(scope: Scope, body: s.FlagCreate) -> tuple[NewFlag, int, int]:
    """A validated new flag (not yet written), with the variations it serves on and off."""
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
    flag = NewFlag(
        id=new_id("flg"),
        project_id=scope.project_id,
        key=body.key,
        name=name,
        description=body.description,
        type=body.type,
        variations=[stored(x) for x in variations],
        temporary=body.temporary,
        bucket_by=body.bucket_by,
        tags=list(dict.fromkeys(body.tags)),
        client_side=body.client_side,
        archived=False,
        archived_at=None,
        version=1,
        created_at=now,
        updated_at=now,
    )
    return flag, on_idx, off_idx


def _new_settings(
    flag: NewFlag, environments: Sequence[Environment], on_idx: int, off_idx: int
) -> list[NewSetting]:
    """A new flag's setting in every environment (off, serving its defaults), not yet written."""
    return [
        NewSetting(
            flag_id=flag.id,
            environment_id=env.id,
            enabled=False,
            off_variation=off_idx,
            fallthrough=stored(w.Serve(variation=on_idx)),
            rules=[],
            targets=[],
            prerequisites=[],
            version=1,
            updated_at=flag.created_at,
        )
        for env in environments
    ]


def _created(
    scope: Scope,
    flag: FlagRow,
    settings: Sequence[SettingRow],
    environments: Sequence[Environment],
) -> s.Flag:
    """The new flag as the API answers it, its creation audited."""
    out = flag_out(flag, [(x, env.key) for x, env in zip(settings, environments, strict=True)])
    scope.audit("flag.create", "flag", flag.key, after=out)
    return out


async def create_flag(scope: Scope, body: s.FlagCreate) -> s.Flag:
    scope.require(Permission.EDIT)
    made, on_idx, off_idx = _new_flag(scope, body)
    flag = Flag(**insert_values(made))
    await written_once(scope, "a flag", body.key, flag)
    environments = await scope.environments()
    settings = [
        FlagSetting(**insert_values(x)) for x in _new_settings(made, environments, on_idx, off_idx)
    ]
    scope.session.add_all(settings)
    out = _created(scope, flag, settings, environments)
    await scope.session.flush()
    await scope.changed((env.id for env in environments), flags=[flag.key])
    return out


class FlagCreator:
    """Many flags created in one unit of work (a project document's apply), each validated,
    refused and audited as ``create_flag`` does: the project's flag keys and environments are
    read once, and the rows are published together by ``close``. Nothing else may create flags
    or environments between ``open`` and ``close`` (patching them is safe).

    The rows are made as plain objects (``NewFlag``, ``NewSetting``) and kept (``made``), for
    the bulk settings writers that follow to take (``SettingsWriter.open``) and write their
    settings into: each row is then written once, with its final values, by one INSERT of
    them all (``flush``), and a rehearsal that writes nothing makes no ORM object at all.
    Whoever opens the creator flushes its rows before anything reads them from the database."""

    def __init__(self, scope: Scope, keys: set[str], environments: list[Environment]) -> None:
        self.scope = scope
        self.keys = keys
        self.environments = environments
        self.created: list[str] = []
        self.made: dict[str, tuple[NewFlag, dict[str, NewSetting]]] = {}  # by key: by env id

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
        if flag.key in self.keys:  # read at ``open``, under the project's write lock
            raise key_taken("a flag", body.key)
        self.keys.add(flag.key)
        self.created.append(flag.key)
        settings = _new_settings(flag, self.environments, on_idx, off_idx)
        if not self.scope.rehearsal:  # a rehearsal records nothing: nothing to describe
            _created(self.scope, flag, settings, self.environments)
        self.made[flag.key] = (flag, {setting.environment_id: setting for setting in settings})

    async def close(self) -> None:
        """Publish the flags created (their rows are written by ``flush``)."""
        if not self.created:
            return
        ids = (env.id for env in self.environments)
        await self.scope.changed(ids, flags=self.created)
        self.created = []

    async def flush(self) -> None:
        """Write the rows made: the flags, then their settings, each table one INSERT."""
        if not self.made:
            return
        flags = [insert_values(flag) for flag, _ in self.made.values()]
        settings = [insert_values(x) for _, made in self.made.values() for x in made.values()]
        self.made = {}
        await inserted_once(self.scope, "a flag", insert(Flag), flags)
        await inserted_once(self.scope, "a flag", insert(FlagSetting), settings)


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
        flag.variations = [stored(x) for x in variations]
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
        after = {int(x["idx"]): x["value"] for x in map(stored, variations)}
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
