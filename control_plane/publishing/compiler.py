"""Database rows to the per-environment snapshot that relays evaluate (``shared.wire.snapshot``)."""

from __future__ import annotations

import time

import msgspec
from sqlalchemy import Text, cast, select
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.db.models import (
    Environment,
    Experiment,
    Flag,
    FlagMetric,
    FlagSetting,
    Project,
    Segment,
)
from shared.wire import snapshot as w


def flag_snapshot(flag: Flag, setting: FlagSetting, *, tracked: bool = False) -> w.FlagSnapshot:
    return w.FlagSnapshot(
        key=flag.key,
        version=setting.version,
        type=flag.type,
        variations=tuple(msgspec.convert(x, w.Variation) for x in flag.variations),
        enabled=setting.enabled,
        off_variation=setting.off_variation,
        fallthrough=msgspec.convert(setting.fallthrough, w.Serve),
        rules=tuple(msgspec.convert(x, w.Rule) for x in setting.rules),
        targets=tuple(msgspec.convert(x, w.Target) for x in setting.targets),
        prerequisites=tuple(msgspec.convert(x, w.Prerequisite) for x in setting.prerequisites),
        bucket_by=flag.bucket_by,
        client_side=flag.client_side,
        track_exposures=tracked,
    )


def experiment_snapshot(row: Experiment) -> w.ExperimentSnapshot:
    return w.ExperimentSnapshot(
        key=row.key,
        type=row.type,
        url=row.url,
        goal=row.goal,
        selector=row.selector,
        version=row.version,
        variants=tuple(msgspec.convert(x, w.ExperimentVariant) for x in row.variants),
    )


def segment_snapshot(segment: Segment) -> w.SegmentSnapshot:
    return w.SegmentSnapshot(
        key=segment.key,
        version=segment.version,
        included=tuple(segment.included),
        excluded=tuple(segment.excluded),
        rules=tuple(msgspec.convert(x, w.SegmentRule) for x in segment.rules),
    )


async def segments_for(session: AsyncSession, project_id: str) -> dict[str, w.SegmentSnapshot]:
    rows = await session.scalars(select(Segment).where(Segment.project_id == project_id))
    return {row.key: segment_snapshot(row) for row in rows}


def referenced_segments(
    flags: dict[str, w.FlagSnapshot], segments: dict[str, w.SegmentSnapshot]
) -> set[str]:
    """Keys of segments the flags use, directly or through other segments."""
    pending = [
        key
        for flag in flags.values()
        for rule in flag.rules
        for clause in rule.clauses
        if clause.op == "segmentMatch"
        for key in clause.values
    ]
    found: set[str] = set()
    while pending:
        key = pending.pop()
        if key in found or key not in segments:
            continue
        found.add(key)
        pending.extend(
            nested
            for rule in segments[key].rules
            for clause in rule.clauses
            if clause.op == "segmentMatch"
            for nested in clause.values
        )
    return found


# The JSON columns of a flag come as text and are decoded straight into the wire types: loading
# ORM objects (the stdlib decoding every document into dicts first) then converting them cost
# ~1.2 s for 10,000 flags, this ~0.2 s. The result equals ``flag_snapshot`` of the rows (tested).
_JSON_COLUMNS = (
    Flag.variations,
    FlagSetting.fallthrough,
    FlagSetting.rules,
    FlagSetting.targets,
    FlagSetting.prerequisites,
)
_variations = msgspec.json.Decoder(tuple[w.Variation, ...])
_serve = msgspec.json.Decoder(w.Serve)
_rules = msgspec.json.Decoder(tuple[w.Rule, ...])
_targets = msgspec.json.Decoder(tuple[w.Target, ...])
_prerequisites = msgspec.json.Decoder(tuple[w.Prerequisite, ...])


async def compile_environment(
    session: AsyncSession, environment: Environment, *, now_ms: int | None = None
) -> w.Snapshot:
    """The environment's snapshot: every live flag and the segments they use."""
    project_key = await session.scalar(
        select(Project.key).where(Project.id == environment.project_id)
    )
    rows = await session.execute(
        select(
            Flag.id,
            Flag.key,
            Flag.type,
            Flag.bucket_by,
            Flag.client_side,
            FlagSetting.version,
            FlagSetting.enabled,
            FlagSetting.off_variation,
            *(cast(column, Text) for column in _JSON_COLUMNS),
        )
        .join(FlagSetting, FlagSetting.flag_id == Flag.id)
        .where(
            Flag.project_id == environment.project_id,
            Flag.archived.is_(False),
            FlagSetting.environment_id == environment.id,
        )
        .order_by(Flag.key)
    )
    tracked = set(
        await session.scalars(
            select(FlagMetric.flag_id)
            .join(Flag, Flag.id == FlagMetric.flag_id)
            .where(Flag.project_id == environment.project_id)
        )
    )
    flags = {
        key: w.FlagSnapshot(
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
            track_exposures=flag_id in tracked,
        )
        for (
            flag_id,
            key,
            kind,
            bucket_by,
            client_side,
            version,
            enabled,
            off_variation,
            variations,
            fallthrough,
            rules,
            targets,
            prerequisites,
        ) in rows
    }
    all_segments = await segments_for(session, environment.project_id)
    used = referenced_segments(flags, all_segments)
    running = await session.scalars(
        select(Experiment)
        .where(Experiment.project_id == environment.project_id, Experiment.status == "running")
        .order_by(Experiment.key)
    )
    return w.Snapshot(
        project=project_key or environment.project_id,
        environment=environment.key,
        version=environment.snapshot_version,
        flags=flags,
        segments={key: all_segments[key] for key in sorted(used)},
        generated_at=now_ms if now_ms is not None else time.time_ns() // 1_000_000,
        experiments={row.key: experiment_snapshot(row) for row in running},
    )
