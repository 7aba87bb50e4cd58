"""Database rows to the per-environment snapshot that relays evaluate (``shared.wire.snapshot``)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import msgspec
from sqlalchemy import Text, cast, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from control_plane.db.models import (
    Environment,
    Flag,
    FlagMetric,
    FlagRow,
    FlagSetting,
    Project,
    Segment,
    SettingRow,
)
from control_plane.domain.allocation import running_experiments
from shared import clock
from shared.engine import segments_named
from shared.wire import protocol as p
from shared.wire import snapshot as w

# A flag's snapshot is made of these columns of ``Flag`` and ``FlagSetting``, each its field of the
# same name, in this order (the order ``_flag_snapshot`` takes them), the JSON ones last. Read
# from rows (``flag_snapshot``) or selected with the JSON columns as text (``_flags``).
_PLAIN_COLUMNS: tuple[InstrumentedAttribute[Any], ...] = (
    Flag.key,
    FlagSetting.version,
    Flag.type,
    Flag.bucket_by,
    Flag.client_side,
    FlagSetting.enabled,
    FlagSetting.off_variation,
)
_JSON_COLUMNS: tuple[InstrumentedAttribute[Any], ...] = (
    Flag.variations,
    FlagSetting.fallthrough,
    FlagSetting.rules,
    FlagSetting.targets,
    FlagSetting.prerequisites,
)
# Each JSON column's wire type, as a decoder of its text.
_variations = msgspec.json.Decoder(tuple[w.Variation, ...])
_serve = msgspec.json.Decoder(w.Serve)
_rules = msgspec.json.Decoder(tuple[w.Rule, ...])
_targets = msgspec.json.Decoder(tuple[w.Target, ...])
_prerequisites = msgspec.json.Decoder(tuple[w.Prerequisite, ...])


def _flag_snapshot(columns: Sequence[Any], tracked: bool) -> w.FlagSnapshot:
    """A flag's snapshot from its columns selected (``_PLAIN_COLUMNS``, then ``_JSON_COLUMNS``
    as text, each decoded straight into its wire type)."""
    (
        key,
        version,
        kind,
        bucket_by,
        client_side,
        enabled,
        off_variation,
        variations,
        fallthrough,
        rules,
        targets,
        prerequisites,
    ) = columns
    return w.FlagSnapshot(
        key=key,
        version=version,
        type=kind,
        variations=_variations.decode(variations),
        enabled=enabled,
        off_variation=off_variation,
        fallthrough=_serve.decode(fallthrough),
        rules=_rules.decode(rules),
        targets=_targets.decode(targets),
        prerequisites=_prerequisites.decode(prerequisites),
        bucket_by=bucket_by,
        client_side=client_side,
        track_exposures=tracked,
    )


_WIRE_NAMES = {field.name: field.encode_name for field in msgspec.structs.fields(w.FlagSnapshot)}
_ATTRIBUTES = tuple(
    (c.class_ is Flag, c.key, _WIRE_NAMES[c.key]) for c in (*_PLAIN_COLUMNS, *_JSON_COLUMNS)
)  # each column's row (the flag's or its setting's), attribute, and field of the snapshot


def flag_snapshot(flag: FlagRow, setting: SettingRow, *, tracked: bool = False) -> w.FlagSnapshot:
    """The snapshot of a flag in one environment, from its rows (ORM objects, or new rows not
    yet written: ``NewFlag``, ``NewSetting``): the same columns as ``_flag_snapshot`` takes,
    converted in one call (a call per JSON column costs four times as much: each converts to
    a ``tuple[...]`` type msgspec reads anew every time)."""
    values = {
        wire: getattr(flag if of_flag else setting, name) for of_flag, name, wire in _ATTRIBUTES
    }
    values["trackExposures"] = tracked
    return msgspec.convert(values, w.FlagSnapshot)


def segment_snapshot(segment: Segment) -> w.SegmentSnapshot:
    return w.SegmentSnapshot(
        key=segment.key,
        version=segment.version,
        included=tuple(segment.included),
        excluded=tuple(segment.excluded),
        included_contexts=tuple(
            msgspec.convert(x, w.ContextKeys) for x in segment.included_contexts
        ),
        excluded_contexts=tuple(
            msgspec.convert(x, w.ContextKeys) for x in segment.excluded_contexts
        ),
        rules=tuple(msgspec.convert(x, w.SegmentRule) for x in segment.rules),
    )


async def segments_for(session: AsyncSession, project_id: str) -> dict[str, w.SegmentSnapshot]:
    rows = await session.scalars(select(Segment).where(Segment.project_id == project_id))
    return {row.key: segment_snapshot(row) for row in rows}


def referenced_segments(
    flags: dict[str, w.FlagSnapshot], segments: dict[str, w.SegmentSnapshot]
) -> set[str]:
    """Keys of segments the flags use, directly or through other segments."""
    pending = [key for flag in flags.values() for key in segments_named(flag.rules)]
    found: set[str] = set()
    while pending:
        key = pending.pop()
        if key in found or key not in segments:
            continue
        found.add(key)
        pending.extend(segments_named(segments[key].rules))
    return found


async def _flags(
    session: AsyncSession, environment: Environment, keys: Collection[str] | None
) -> dict[str, w.FlagSnapshot]:
    """The environment's live flags, by key (only ``keys`` when given).

    The JSON columns come as text and are decoded straight into the wire types: loading ORM
    objects (the stdlib decoding every document into dicts first) then converting them cost
    ~1.2 s for 10,000 flags, this ~0.2 s. The result equals ``flag_snapshot`` of the rows (tested).
    """
    only = () if keys is None else (Flag.key.in_(sorted(keys)),)
    rows = await session.execute(
        select(Flag.id, *_PLAIN_COLUMNS, *(cast(column, Text) for column in _JSON_COLUMNS))
        .join(FlagSetting, FlagSetting.flag_id == Flag.id)
        .where(
            Flag.project_id == environment.project_id,
            Flag.archived.is_(False),
            FlagSetting.environment_id == environment.id,
            *only,
        )
        .order_by(Flag.key)
    )
    tracked = set(
        await session.scalars(
            select(FlagMetric.flag_id)
            .join(Flag, Flag.id == FlagMetric.flag_id)
            .where(Flag.project_id == environment.project_id, *only)
        )
    )
    return {row[1]: _flag_snapshot(row[1:], row[0] in tracked) for row in rows}


async def _running_experiments(
    session: AsyncSession, project_id: str
) -> dict[str, w.ExperimentSnapshot]:
    return await running_experiments(session, project_id)


def _now_ms(now_ms: int | None) -> int:
    return now_ms if now_ms is not None else clock.now_ms()


async def compile_environment(
    session: AsyncSession, environment: Environment, *, now_ms: int | None = None
) -> w.Snapshot:
    """The environment's snapshot: every live flag and the segments they use."""
    project_key = await session.scalar(
        select(Project.key).where(Project.id == environment.project_id)
    )
    flags = await _flags(session, environment, None)
    all_segments = await segments_for(session, environment.project_id)
    used = referenced_segments(flags, all_segments)
    return w.Snapshot(
        project=project_key or environment.project_id,
        environment=environment.key,
        version=environment.snapshot_version,
        flags=flags,
        segments={key: all_segments[key] for key in sorted(used)},
        generated_at=_now_ms(now_ms),
        experiments=await _running_experiments(session, environment.project_id),
    )


def _next_flags(
    before: w.Snapshot, fresh: dict[str, w.FlagSnapshot], named: Collection[str]
) -> tuple[dict[str, w.FlagSnapshot], dict[str, w.FlagSnapshot], list[str]]:
    """The flags after a commit that wrote the ``named`` ones (``fresh``: those still live):
    all of them, those that changed, and those removed (archived or deleted)."""
    removed = sorted(key for key in named if key not in fresh and key in before.flags)
    changed = {k: f for k, f in fresh.items() if before.flags.get(k) != f}
    if not changed and not removed:
        return before.flags, changed, removed
    flags = dict(before.flags)
    for key in removed:
        del flags[key]
    added = not changed.keys() <= flags.keys()
    flags.update(changed)
    if added:  # the order ``compile_environment`` gives
        flags = dict(sorted(flags.items()))
    return flags, changed, removed


def _references_moved(
    before: w.Snapshot,
    flags: dict[str, w.FlagSnapshot],
    touched_flags: Collection[str],
    fresh_segments: dict[str, w.SegmentSnapshot],
    touched_segments: Collection[str],
) -> bool:
    """Whether a changed flag or segment now names other segments than it did (then which
    segments the snapshot carries must be collected again)."""
    return any(
        segments_named(before.flags[key].rules if key in before.flags else ())
        != segments_named(flags[key].rules if key in flags else ())
        for key in touched_flags
    ) or any(
        segments_named(before.segments[key].rules if key in before.segments else ())
        != segments_named(fresh_segments[key].rules if key in fresh_segments else ())
        for key in touched_segments
    )


async def _next_segments(
    session: AsyncSession,
    environment: Environment,
    before: w.Snapshot,
    flags: dict[str, w.FlagSnapshot],
    touched_flags: Collection[str],
    named: Collection[str],
) -> dict[str, w.SegmentSnapshot]:
    """The segments the snapshot carries after a commit that wrote the ``named`` ones and the
    ``touched_flags``: those it carried, brought up to date; collected again only when the
    references moved (rare: a rule or segment now names other segments)."""
    fresh: dict[str, w.SegmentSnapshot] = {}
    if named:
        rows = await session.scalars(
            select(Segment).where(
                Segment.project_id == environment.project_id, Segment.key.in_(sorted(named))
            )
        )
        fresh = {row.key: segment_snapshot(row) for row in rows}
    if _references_moved(before, flags, touched_flags, fresh, named):
        known = await segments_for(session, environment.project_id)
        return {key: known[key] for key in sorted(referenced_segments(flags, known))}
    segments = dict(before.segments)
    segments.update({k: s for k, s in fresh.items() if k in before.segments})
    for key in named:
        if key not in fresh:
            segments.pop(key, None)
    return segments


def _patch(
    before: w.Snapshot,
    after: w.Snapshot,
    changed_flags: dict[str, w.FlagSnapshot],
    removed_flags: list[str],
    experiments: bool,
) -> p.Patch:
    """What changed from ``before`` to ``after``, as relays apply it."""
    return p.Patch(
        environment=after.environment,
        from_version=before.version,
        version=after.version,
        generated_at=after.generated_at,
        flags=changed_flags,
        removed_flags=tuple(removed_flags),
        segments={k: s for k, s in after.segments.items() if before.segments.get(k) != s},
        removed_segments=tuple(sorted(k for k in before.segments if k not in after.segments)),
        experiments=(
            {k: e for k, e in after.experiments.items() if before.experiments.get(k) != e}
            if experiments
            else {}
        ),
        removed_experiments=(
            tuple(sorted(k for k in before.experiments if k not in after.experiments))
            if experiments
            else ()
        ),
    )


async def compile_change(
    session: AsyncSession,
    environment: Environment,
    before: w.Snapshot,
    *,
    flags: Collection[str] = (),
    segments: Collection[str] = (),
    experiments: bool = False,
    now_ms: int | None = None,
    version: int | None = None,
) -> tuple[w.Snapshot, p.Patch]:
    """The environment's next snapshot from ``before`` (its previous version, one commit ago)
    and the patch between them, reading only what the commit changed: the named flags and
    segments (and experiments when they changed). Equals ``compile_environment`` (tested).
    ``version``: the one the commit took the environment to (default: the environment's now).

    Three steps: the flags (``_next_flags``), the segments they and the commit name
    (``_next_segments``), then the patch between the two snapshots (``_patch``)."""
    fresh_flags = await _flags(session, environment, flags) if flags else {}
    next_flags, changed_flags, removed_flags = _next_flags(before, fresh_flags, flags)
    next_segments = await _next_segments(
        session, environment, before, next_flags, {*changed_flags, *removed_flags}, segments
    )
    after = w.Snapshot(
        project=before.project,
        environment=before.environment,
        version=environment.snapshot_version if version is None else version,
        flags=next_flags,
        segments=next_segments,
        schema_version=before.schema_version,
        generated_at=_now_ms(now_ms),
        experiments=(
            await _running_experiments(session, environment.project_id)
            if experiments
            else before.experiments
        ),
    )
    return after, _patch(before, after, changed_flags, removed_flags, experiments)
