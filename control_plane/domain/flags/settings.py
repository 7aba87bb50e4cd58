"""A flag's setting in one environment: the writer of its settings and rules (one write, the
API's, or many in one unit of work, a project document's), the kill switch, and the scheduled
changes carried out when due."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import msgspec
from sqlalchemy import Select, select
from sqlalchemy.orm.attributes import flag_modified

from control_plane.access import Permission
from control_plane.db.models import (
    Environment,
    Flag,
    FlagRow,
    FlagSetting,
    ScheduledChange,
    Segment,
    SettingRow,
)
from control_plane.db.types import utcnow
from control_plane.domain import problems as base
from control_plane.domain.common import Scope
from control_plane.domain.flags import canonical
from control_plane.domain.flags import schemas as s
from control_plane.domain.flags.reads import new_rule_id, rules_out, settings_out, stored
from control_plane.domain.protection import protected, refuse_unapproved
from control_plane.domain.rows import flag_setting, refuse_archived, variation_indexes
from control_plane.domain.snapshots import flag_snapshot, segments_for
from control_plane.domain.targeting import clauses as targeting
from control_plane.domain.targeting.schemas import ServeIn
from control_plane.errors import invalid, not_found
from shared.engine import Chains, CompileError, validate_flag
from shared.wire import snapshot as w

if TYPE_CHECKING:
    from control_plane.domain.flags.services import FlagCreator


async def _expect_setting(scope: Scope, setting: SettingRow) -> None:
    if scope.if_match is None:
        return  # no If-Match: nothing to compare (and no clauses to build, many times over)
    await scope.expect_version(
        FlagSetting,
        FlagSetting.version,
        setting.version,
        FlagSetting.flag_id == setting.flag_id,
        FlagSetting.environment_id == setting.environment_id,
    )


async def _chains_of(scope: Scope, env: Environment) -> Chains:
    """The environment's prerequisites, as the engine orders them: its live flags' (an archived
    flag is in no snapshot, and naming it is no edge)."""
    rows = await scope.session.execute(
        select(Flag.key, FlagSetting.prerequisites)
        .join(FlagSetting, FlagSetting.flag_id == Flag.id)
        .where(
            Flag.project_id == scope.project_id,
            Flag.archived.is_(False),
            FlagSetting.environment_id == env.id,
        )
    )
    return Chains({key: [p["key"] for p in prereqs] for key, prereqs in rows})


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
        self.flags: dict[str, FlagRow] = {}  # the flags read (or made), by key
        self.settings: dict[str, SettingRow] = {}  # their settings here, by flag id
        self.chains = Chains({})  # bulk: every flag's prerequisites here
        self.segments: dict[str, w.SegmentSnapshot] = {}  # bulk: the project's
        self.written: list[str] = []  # flag keys written, published by ``close``
        self.missing: set[str] = set()  # bulk: keys read and not found

    @classmethod
    async def open(
        cls, scope: Scope, env_key: str, keys: Collection[str], creator: FlagCreator | None = None
    ) -> SettingsWriter:
        """A bulk writer of the environment ``env_key``, the flags ``keys`` read at once (any
        other flag a write names is read when named), and the flags ``creator`` made in this
        unit of work taken as they are, not yet written: their rows are written once, with
        what this writer puts in them (``FlagCreator.flush``)."""
        scope.require(Permission.EDIT)
        with scope.session.no_autoflush:
            writer = cls(scope, await scope.environment(env_key), bulk=True)
            writer.chains = await _chains_of(scope, writer.env)
            writer.segments = await segments_for(scope.session, scope.project_id)
        for flag, settings in (creator.made if creator is not None else {}).values():
            if writer.env.id in settings:
                writer.flags[flag.key] = flag
                writer.settings[flag.id] = settings[writer.env.id]
                writer.chains.set(flag.key, ())  # there from the start, naming nothing yet
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

    async def _flag_setting(self, key: str) -> tuple[FlagRow, SettingRow]:
        if self.bulk:
            await self._load([key])
        flag = self.flags.get(key)
        if flag is None:
            raise not_found("flag", key)
        setting = self.settings.get(flag.id)
        if setting is None:  # every flag has a row per environment; this guards a broken database
            raise not_found("flag setting", f"{key}/{self.env.key}")
        return flag, setting

    async def _others(self, keys: Collection[str]) -> dict[str, FlagRow]:
        if self.bulk:
            await self._load(keys)
            return {k: self.flags[k] for k in keys if k in self.flags}
        return {
            f.key: f
            for f in await self.scope.session.scalars(
                select(Flag).where(Flag.project_id == self.scope.project_id, Flag.key.in_(keys))
            )
        }

    async def _chains(self) -> Chains:
        return self.chains if self.bulk else await _chains_of(self.scope, self.env)

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
        self, flag: FlagRow, given: Sequence[s.PrerequisiteIn], problems: base.Problems
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
            chains = await self._chains()  # the engine's rules, on the would-be graph
            refusal = chains.refusal(flag.key, [p.key for p in out])
            if refusal is not None:
                problems.add("prerequisites", Chains.message(refusal, "prerequisites"))
        return out

    async def _check_with_engine(self, flag: FlagRow, setting: SettingRow) -> None:
        """Refuse what the evaluation engine could not compile (regexes, versions, dates,
        cycles)."""
        segments = await self._segments()
        others = await self._others_here([p["key"] for p in setting.prerequisites])
        try:
            validate_flag(flag_snapshot(flag, setting), segments, others)
        except CompileError as exc:
            raise invalid(exc.path or "body", exc.message) from exc

    async def _save(self, flag: FlagRow, setting: SettingRow) -> None:
        if not self.bulk:
            assert isinstance(setting, FlagSetting)  # one write's rows are read (``_writer``)
            await _save_setting(self.scope, flag.key, self.env, setting)
            return
        setting.version += 1
        self.chains.set(flag.key, [p["key"] for p in setting.prerequisites])
        self.written.append(flag.key)
        if self.scope.rehearsal:
            return  # never flushed (``close``)
        setting.updated_at = utcnow()
        if isinstance(setting, FlagSetting):  # a new row is written whole (``FlagCreator``)
            for column in WRITTEN:  # every setting's UPDATE alike: one executemany at ``close``
                flag_modified(setting, column)

    async def put(
        self, key: str, settings: s.EnvironmentSettingsIn | None, rules: s.RulesIn | None
    ) -> None:
        """A flag's settings and rules here written together (each as its own write, audited
        alike), the engine's check made once, on the flag as it will be served."""
        described = not self.scope.rehearsal  # a rehearsal records nothing: nothing to describe
        if settings is not None:
            await self._put_settings(key, settings, check=rules is None, described=described)
        if rules is not None:
            await self._put_rules(key, rules, described=described)

    async def _writable(self, key: str, doing: str) -> tuple[FlagRow, SettingRow]:
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
        after = await self._put_settings(key, body, check=check, described=True)
        assert after is not None  # described
        return after

    async def _put_settings(
        self, key: str, body: s.EnvironmentSettingsIn, *, check: bool, described: bool
    ) -> s.EnvironmentSettings | None:
        """The write; ``described``: its audit entry's before and after are made (and the
        after answered), which a rehearsal, recording nothing, spares."""
        scope, env = self.scope, self.env
        flag, setting = await self._writable(key, f"changing the settings of flag {key!r}")
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
            setting.fallthrough = stored(fallthrough)
        if targets is not None:
            setting.targets = [stored(t) for t in targets]
        if prerequisites is not None:
            setting.prerequisites = [stored(p) for p in prerequisites]
        if check:
            await self._check_with_engine(flag, setting)
        await self._save(flag, setting)
        if not described:
            return None
        after = settings_out(flag, env.key, setting)
        scope.audit(
            "flag.settings.update", "flag", key, before=before, after=after, environment=env.key
        )
        return after

    def _rules_out(self, flag: FlagRow, setting: SettingRow) -> s.Rules:
        return s.Rules(
            flag=flag.key,
            environment=self.env.key,
            rules=rules_out(setting.rules),
            version=setting.version,
        )

    async def put_rules(self, key: str, body: s.RulesIn) -> s.Rules:
        after = await self._put_rules(key, body, described=True)
        assert after is not None  # described
        return after

    async def _put_rules(self, key: str, body: s.RulesIn, *, described: bool) -> s.Rules | None:
        """As ``_put_settings``, of the rules."""
        scope, env = self.scope, self.env
        flag, setting = await self._writable(key, f"changing the rules of flag {key!r}")
        before = self._rules_out(flag, setting) if described else None
        segment_keys = await self._segment_keys()
        problems = base.Problems()
        rules = canonical.rules(
            problems, body.rules, variation_indexes(flag), segment_keys, new_rule_id
        )
        problems.raise_if_any()
        setting.rules = [stored(r) for r in rules]
        await self._check_with_engine(flag, setting)
        await self._save(flag, setting)
        if not described:
            return None
        after = self._rules_out(flag, setting)
        scope.audit(
            "flag.rules.update", "flag", key, before=before, after=after, environment=env.key
        )
        return after


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
        await _save_setting(scope, flag.key, env, setting)
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


async def _save_setting(scope: Scope, key: str, env: Environment, setting: FlagSetting) -> None:
    setting.version += 1
    setting.updated_at = utcnow()
    await scope.session.flush()
    await scope.changed([env.id], flags=[key])


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
