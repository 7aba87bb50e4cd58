"""Segments: reusable groups of contexts; a change republishes every environment that uses one."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import msgspec
from sqlalchemy import select

from control_plane.access import Permission
from control_plane.db.ids import new_id
from control_plane.db.models import Flag, FlagSetting, Segment
from control_plane.db.types import utcnow
from control_plane.domain import problems as base
from control_plane.domain.common import Scope, percent
from control_plane.domain.paging import Page, paged
from control_plane.domain.protection import refuse_unapproved_in
from control_plane.domain.rows import find_by_key, take_given, written_once
from control_plane.domain.segments import schemas as s
from control_plane.domain.snapshots import segment_snapshot
from control_plane.domain.targeting import clauses as targeting
from control_plane.domain.targeting.schemas import clause_out
from control_plane.errors import conflict, invalid
from shared.engine import Chains, CompileError, segments_named, validate_segment
from shared.wire import snapshot as w
from shared.wire.kinds import USER

MAX_MEMBERS = 100_000


def _listed_out(stored: list[dict[str, object]]) -> list[s.ContextKeys]:
    return [
        s.ContextKeys(context_kind=listed.context_kind or USER, values=list(listed.values))
        for listed in (msgspec.convert(x, w.ContextKeys) for x in stored)
    ]


def segment_out(row: Segment) -> s.Segment:
    rules = [msgspec.convert(x, w.SegmentRule) for x in row.rules]
    return s.Segment(
        id=row.id,
        key=row.key,
        name=row.name,
        description=row.description,
        included=list(row.included),
        excluded=list(row.excluded),
        included_contexts=_listed_out(row.included_contexts),
        excluded_contexts=_listed_out(row.excluded_contexts),
        rules=[
            s.SegmentRule(
                id=r.id,
                clauses=[clause_out(c) for c in r.clauses],
                weight=None if r.weight is None else percent(r.weight),
                bucket_by=r.bucket_by,
                context_kind=r.context_kind,
            )
            for r in rules
        ],
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _members(problems: base.Problems, field: str, keys: Sequence[str]) -> list[str]:
    if len(keys) > MAX_MEMBERS:
        problems.add(field, f"at most {MAX_MEMBERS} keys")
    for i, key in enumerate(keys):
        if not key:
            problems.add(f"{field}[{i}]", "a context key is not empty")
    return list(dict.fromkeys(keys))


def _contexts(
    problems: base.Problems, field: str, given: Sequence[s.ContextKeysIn]
) -> list[dict[str, object]]:
    """Keys of other kinds, one item per kind, each key once: stored as the wire's
    ``ContextKeys`` (``includedContexts[0].values[1]`` names a bad key)."""
    out = []
    first: dict[str, int] = {}  # kind -> the item listing it
    for i, listed in enumerate(given):
        kind = targeting.context_kind(problems, f"{field}[{i}].contextKind", listed.context_kind)
        if kind in first:
            problems.add(
                f"{field}[{i}].contextKind",
                f"kind {kind!r} is listed twice: list its keys once, in {field}[{first[kind]}]",
            )
        first.setdefault(str(kind), i)
        values = _members(problems, f"{field}[{i}].values", listed.values)
        out.append(msgspec.to_builtins(w.ContextKeys(context_kind=kind, values=tuple(values))))
    if sum(len(listed.values) for listed in given) > MAX_MEMBERS:
        problems.add(field, f"at most {MAX_MEMBERS} keys")
    return out


def _rules(
    problems: base.Problems, given: Sequence[s.SegmentRuleIn], segment_keys: frozenset[str]
) -> list[w.SegmentRule]:
    out = []
    for i, rule in enumerate(given):
        field = f"rules[{i}]"
        if not rule.clauses:
            problems.add(f"{field}.clauses", "a rule needs at least one clause")
        clauses = tuple(
            targeting.clause(problems, f"{field}.clauses[{j}]", c, segment_keys)
            for j, c in enumerate(rule.clauses)
        )
        weight = None
        if rule.weight is not None:
            if not 0 <= rule.weight <= 100:
                problems.add(f"{field}.weight", "must be a percentage from 0 to 100")
            weight = round(rule.weight * 1000)
        kind = targeting.context_kind(problems, f"{field}.contextKind", rule.context_kind)
        targeting.bucket_by(problems, f"{field}.bucketBy", rule.bucket_by, kind)
        out.append(
            w.SegmentRule(
                id=rule.id or "rule_" + secrets.token_hex(4),
                clauses=clauses,
                weight=weight,
                bucket_by=rule.bucket_by,
                context_kind=kind,
            )
        )
    return out


async def _row(scope: Scope, key: str) -> Segment:
    return await find_by_key(scope, Segment, "segment", key)


async def _all(scope: Scope) -> list[Segment]:
    return list(
        await scope.session.scalars(
            select(Segment).where(Segment.project_id == scope.project_id).order_by(Segment.key)
        )
    )


async def list_segments(scope: Scope, *, limit: int, cursor: str | None) -> Page[s.Segment]:
    async def convert(rows: list[Segment]) -> list[s.Segment]:
        return [segment_out(r) for r in rows]

    query = select(Segment).where(Segment.project_id == scope.project_id)
    return await paged(
        scope, query, Segment.key, list_name="segments", limit=limit, cursor=cursor, convert=convert
    )


async def get_segment(scope: Scope, key: str) -> s.Segment:
    return segment_out(await _row(scope, key))


def _check_with_engine(row: Segment, others: list[Segment]) -> None:
    """Refuse what the evaluation engine could not compile (regexes, versions, dates)."""
    try:
        validate_segment(segment_snapshot(row), {o.key: segment_snapshot(o) for o in others})
    except CompileError as exc:
        raise invalid(exc.path or "body", exc.message) from exc


def _check_chains(key: str, rules: list[w.SegmentRule], others: list[Segment]) -> None:
    """Refuse rules that would make segments name each other in a cycle, or in a chain longer
    than the engine compiles, through this one (the engine's rules, on the whole graph)."""
    chains = Chains({row.key: segments_named(row.rules) for row in others if row.key != key})
    refusal = chains.refusal(key, segments_named(rules))
    if refusal is not None:
        raise invalid("rules", Chains.message(refusal, "segments"))


async def _users(scope: Scope, key: str) -> tuple[list[str], set[str]]:
    """Flags (as 'flag (env)') and environment ids that use segment ``key``, directly or nested."""
    segments = await _all(scope)
    graph = {row.key: segments_named(row.rules) for row in segments}
    rows = await scope.session.execute(
        select(Flag.key, Flag.archived, FlagSetting.environment_id, FlagSetting.rules)
        .join(FlagSetting, FlagSetting.flag_id == Flag.id)
        .where(Flag.project_id == scope.project_id)
    )
    flags: list[str] = []
    environments: set[str] = set()
    for flag_key, archived, env_id, rules in rows:
        reach: set[str] = set()
        pending = list(segments_named(rules))
        while pending:
            item = pending.pop()
            if item not in reach:
                reach.add(item)
                pending.extend(graph.get(item, ()))
        if key in reach:
            flags.append(flag_key)
            if not archived:
                environments.add(env_id)
    return sorted(set(flags)), environments


async def flags_using(scope: Scope, key: str) -> list[str]:
    """The keys of the flags whose rules use segment ``key``, directly or through others."""
    return (await _users(scope, key))[0]


async def environments_using(scope: Scope, key: str) -> set[str]:
    """The ids of the environments where a live flag's rules use segment ``key`` (directly or
    through others): where a change to it takes effect (change requests count their approvals)."""
    return (await _users(scope, key))[1]


async def create_segment(scope: Scope, body: s.SegmentCreate) -> s.Segment:
    scope.require(Permission.EDIT)
    problems = base.Problems()
    base.check_key(problems, "key", body.key)
    name = body.name if body.name is not None else body.key
    base.check_name(problems, "name", name)
    included = _members(problems, "included", body.included)
    excluded = _members(problems, "excluded", body.excluded)
    included_contexts = _contexts(problems, "includedContexts", body.included_contexts)
    excluded_contexts = _contexts(problems, "excludedContexts", body.excluded_contexts)
    others = await _all(scope)
    rules = _rules(problems, body.rules, frozenset(r.key for r in others))
    problems.raise_if_any()
    _check_chains(body.key, rules, others)
    now = utcnow()
    row = Segment(
        id=new_id("seg"),
        project_id=scope.project_id,
        key=body.key,
        name=name,
        description=body.description,
        included=included,
        excluded=excluded,
        included_contexts=included_contexts,
        excluded_contexts=excluded_contexts,
        rules=[msgspec.to_builtins(r) for r in rules],
        version=1,
        created_at=now,
        updated_at=now,
    )
    _check_with_engine(row, others)
    await written_once(scope, "a segment", body.key, row)
    out = segment_out(row)
    scope.audit("segment.create", "segment", row.key, after=out)
    return out


async def patch_segment(scope: Scope, key: str, body: s.SegmentPatch) -> s.Segment:
    scope.require(Permission.EDIT)
    row = await _row(scope, key)
    await refuse_unapproved_in(
        scope, (await _users(scope, key))[1], f"changing segment {key!r}, which flags use"
    )
    await scope.expect_version(Segment, Segment.version, row.version, Segment.id == row.id)
    before = segment_out(row)
    problems = base.Problems()
    if body.name is not msgspec.UNSET:
        base.check_name(problems, "name", body.name)
    included = (
        _members(problems, "included", body.included)
        if body.included is not msgspec.UNSET
        else None
    )
    excluded = (
        _members(problems, "excluded", body.excluded)
        if body.excluded is not msgspec.UNSET
        else None
    )
    listed = {
        name: _contexts(problems, field, given)
        for name, field, given in (
            ("included_contexts", "includedContexts", body.included_contexts),
            ("excluded_contexts", "excludedContexts", body.excluded_contexts),
        )
        if given is not msgspec.UNSET
    }
    others = [r for r in await _all(scope) if r.key != key]
    rules = (
        _rules(problems, body.rules, frozenset(r.key for r in others))
        if body.rules is not msgspec.UNSET
        else None
    )
    problems.raise_if_any()
    if rules is not None:
        _check_chains(key, rules, others)
        row.rules = [msgspec.to_builtins(r) for r in rules]
    take_given(row, body, "name", "description")
    if included is not None:
        row.included = included
    if excluded is not None:
        row.excluded = excluded
    for name, value in listed.items():
        setattr(row, name, value)
    row.version += 1
    row.updated_at = utcnow()
    _check_with_engine(row, others)
    await scope.session.flush()
    _, environments = await _users(scope, key)
    await scope.changed(environments, segments=[key])
    out = segment_out(row)
    scope.audit("segment.update", "segment", key, before=before, after=out)
    return out


async def delete_segment(scope: Scope, key: str) -> s.Deleted:
    scope.require(Permission.EDIT)
    row = await _row(scope, key)
    flags, environments = await _users(scope, key)
    await refuse_unapproved_in(scope, environments, f"deleting segment {key!r}, which flags use")
    await scope.expect_version(Segment, Segment.version, row.version, Segment.id == row.id)
    if flags:
        raise conflict(f"segment {key!r} is used by the rules of flag(s) {', '.join(flags)}")
    users = sorted(
        r.key for r in await _all(scope) if key in segments_named(r.rules) and r.key != key
    )
    if users:
        raise conflict(f"segment {key!r} is used by segment(s) {', '.join(users)}")
    before = segment_out(row)
    await scope.session.delete(row)
    await scope.session.flush()
    scope.audit("segment.delete", "segment", key, before=before)
    return s.Deleted(key=key, deleted=True)
