"""The writes a plan is made of, each one call of another domain's own service (validated,
audited, versioned and published exactly as the API's), and the order they run in. A document's
many new flags and settings go through the flags' bulk writers (``Unit``): the same rules, with
the project read once and the rows flushed and published together."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import msgspec

from control_plane.domain.common import Scope
from control_plane.domain.environments import schemas as envs
from control_plane.domain.environments import services as environments
from control_plane.domain.flags import schemas as fl
from control_plane.domain.flags import services as flags
from control_plane.domain.flags import settings as flag_settings
from control_plane.domain.metrics import schemas as mt
from control_plane.domain.metrics import services as metrics
from control_plane.domain.segments import schemas as sg
from control_plane.domain.segments import services as segments


class Unit:
    """What the steps of one plan or apply share: the scope (its transaction), and the writers
    that make the many flags and settings of a document in bulk (``flags.FlagCreator``,
    ``flag_settings.SettingsWriter``: what they check against read once, every write checked and
    audited as the API's, the rows flushed and published together). A writer is opened by its phase's first
    step and closed before a step of another phase runs (``phase``), so nothing else writes
    while it holds the project's rows."""

    def __init__(self, scope: Scope, runs: Iterable[Run] = ()) -> None:
        self.scope = scope
        self._creator: flags.FlagCreator | None = None
        self._made: flags.FlagCreator | None = None  # closed, its rows not yet flushed
        self._writers: dict[str, flag_settings.SettingsWriter] = {}
        self._reads: dict[str, set[str]] = {}  # by environment: the flags its settings' steps read
        for run in runs:
            if isinstance(run, PutSetting):
                self._reads.setdefault(run.env, set()).update(run.flags())

    async def creator(self) -> flags.FlagCreator:
        if self._creator is None:
            self._creator = await flags.FlagCreator.open(self.scope)
        return self._creator

    async def writer(self, env: str) -> flag_settings.SettingsWriter:
        if env not in self._writers:
            reads = self._reads.get(env, set())
            self._writers[env] = await flag_settings.SettingsWriter.open(
                self.scope, env, reads, self._made
            )
        return self._writers[env]

    @contextmanager
    def audits_kept(self) -> Iterator[None]:
        """Meanwhile the audit entries of the unit's writes are kept and written together by
        each ``close`` (``Scope.write_audits``: a statement a phase, not a row object each)."""
        self.scope.batch = []
        try:
            yield
        finally:
            self.scope.batch = None

    async def close(self, settings_next: bool = False, *, last: bool = False) -> None:
        """Flush and publish what the open writers hold, and write the audit entries kept.
        ``settings_next``: the settings' phase follows, whose writers take the flags just
        created as they are (``flags.FlagCreator``): they are written after it, with their
        settings, in one INSERT each. ``last``: nothing reads the database after (no step,
        no change request), so a rehearsal, rolled back, writes none of them."""
        if self._creator is not None:
            await self._creator.close()
            self._made, self._creator = self._creator, None
        if self._made is not None and not settings_next:
            if not (last and self.scope.rehearsal):
                await self._made.flush()
            self._made = None
        for writer in self._writers.values():
            await writer.close()
        self._writers = {}
        await self.scope.write_audits()


Run = Callable[[Unit], Awaitable[Any]]


class Phase(IntEnum):
    """Environments first (a flag's setting there needs them), segments before the rules that
    use them, flags restored before their settings change and archived after, prerequisites
    before the flags that name them, segments deleted once no rule uses them, a new
    environment's protection last (it starts as the document says). Layers and holdouts after
    the metrics they name, experiments after their layers and before a metric they stop using
    is deleted. Webhooks, which nothing else names, at the end."""

    ENVIRONMENT = 0
    SEGMENT = 1
    METRIC = 2
    LAYER = 3
    EXPERIMENT = 4
    FLAG = 5
    SETTING = 6
    ARCHIVE = 7
    DELETE = 8
    PROTECT = 9
    WEBHOOK = 10


@dataclass(frozen=True, slots=True)
class Step:
    phase: Phase
    order: int
    where: str  # the document's path the step comes from, to name in an error
    run: Run


def _some(fields: dict[str, Any], names: set[str]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k in names}


def create_environment(key: str, after: dict[str, Any]) -> Run:
    body = envs.EnvironmentCreate(key=key, name=after["name"], critical=after["critical"])
    return lambda unit: environments.create_environment(unit.scope, body)


def patch_environment(key: str, after: dict[str, Any], names: set[str]) -> Run:
    body = msgspec.convert(_some(after, names), envs.EnvironmentPatch)
    return lambda unit: environments.patch_environment(unit.scope, key, body)


def create_segment(key: str, after: dict[str, Any]) -> Run:
    body = msgspec.convert({**after, "key": key}, sg.SegmentCreate)
    return lambda unit: segments.create_segment(unit.scope, body)


def segment_patch(after: dict[str, Any], names: set[str]) -> sg.SegmentPatch:
    return msgspec.convert(_some(after, names), sg.SegmentPatch)


def patch_segment(key: str, after: dict[str, Any], names: set[str]) -> Run:
    body = segment_patch(after, names)
    return lambda unit: segments.patch_segment(unit.scope, key, body)


def delete_segment(key: str) -> Run:
    return lambda unit: segments.delete_segment(unit.scope, key)


def create_metric(key: str, after: dict[str, Any]) -> Run:
    body = msgspec.convert({**after, "key": key}, mt.MetricCreate)
    return lambda unit: metrics.create_metric(unit.scope, body)


def update_metric(key: str, after: dict[str, Any], names: set[str]) -> Run:
    """A field left out (``capping``, ``currency``) is removed: sent as null."""
    body = msgspec.convert({name: after.get(name) for name in names}, mt.MetricPatch)
    return lambda unit: metrics.update_metric(unit.scope, key, body)


def delete_metric(key: str) -> Run:
    return lambda unit: metrics.delete_metric(unit.scope, key)


def create_flag(after: dict[str, Any]) -> Run:
    body = msgspec.convert({k: v for k, v in after.items() if k != "archived"}, fl.FlagCreate)

    async def run(unit: Unit) -> None:
        (await unit.creator()).create(body)

    return run


def flag_patch_body(after: dict[str, Any], names: set[str], idxs: set[int]) -> fl.FlagPatch:
    """``idxs``: the live variations'; a variation added is sent without its idx, which the
    flags' service takes as "add" (it is given the next free idx)."""
    fields = _some(after, names)
    if "variations" in fields:
        fields["variations"] = [
            v if v["idx"] in idxs else {k: x for k, x in v.items() if k != "idx"}
            for v in fields["variations"]
        ]
    return msgspec.convert(fields, fl.FlagPatch)


def patch_flag(key: str, after: dict[str, Any], names: set[str], idxs: set[int]) -> Run:
    body = flag_patch_body(after, names, idxs)
    return lambda unit: flags.patch_flag(unit.scope, key, body)


def archive_flag(key: str) -> Run:
    return lambda unit: flags.archive_flag(unit.scope, key)


def restore_flag(key: str) -> Run:
    return lambda unit: flags.restore_flag(unit.scope, key)


def settings_body(after: dict[str, Any], names: set[str]) -> fl.EnvironmentSettingsIn:
    return msgspec.convert(_some(after, names - {"rules"}), fl.EnvironmentSettingsIn)


def rules_body(after: dict[str, Any]) -> fl.RulesIn:
    """The rules of ``after``, converted as a struct (a ``list[...]`` type is read anew by
    msgspec at every call: that cost more than the conversion)."""
    return msgspec.convert({"rules": after["rules"]}, fl.RulesIn)


@dataclass(frozen=True, slots=True)
class PutSetting:
    """A flag's setting in one environment: its settings and rules, through the environment's
    bulk writer (``Unit.writer``)."""

    key: str
    env: str
    settings: fl.EnvironmentSettingsIn | None
    rules: fl.RulesIn | None

    def flags(self) -> set[str]:
        """The flags the write reads: its own and its prerequisites."""
        named = self.settings.prerequisites if self.settings is not None else msgspec.UNSET
        return {self.key, *(p.key for p in named or ())}

    async def __call__(self, unit: Unit) -> None:
        await (await unit.writer(self.env)).put(self.key, self.settings, self.rules)


def put_setting(key: str, env: str, after: dict[str, Any], names: set[str]) -> PutSetting:
    settings = settings_body(after, names) if names - {"rules"} else None
    rules = rules_body(after) if "rules" in names else None
    return PutSetting(key, env, settings, rules)


def topological(keys: list[str], needs: dict[str, list[str]]) -> dict[str, int]:
    """Each key's place with what it needs first (a cycle is left to the services to refuse).
    A walk with a stack of its own: however long a chain of needs, and no closure calling
    itself (a reference cycle holding ``needs`` until the cycle collector runs)."""
    placed: dict[str, int] = {}
    visiting: set[str] = set()
    for root in keys:
        stack = [(root, iter(needs.get(root, ())))] if root in needs else []
        visiting.add(root)
        while stack:
            key, pending = stack[-1]
            other = next(pending, None)
            if other is None:
                stack.pop()
                if key not in placed:
                    placed[key] = len(placed)
            elif other in needs and other not in placed and other not in visiting:
                visiting.add(other)
                stack.append((other, iter(needs[other])))
    return placed
