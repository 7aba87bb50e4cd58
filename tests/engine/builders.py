"""Terse constructors for snapshot structs used across the engine tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from shared.engine import CompiledEnvironment, compile_snapshot
from shared.wire.snapshot import (
    Clause,
    FlagSnapshot,
    Prerequisite,
    Rule,
    SegmentRule,
    SegmentSnapshot,
    Serve,
    Snapshot,
    Target,
    Variation,
    WeightedVariation,
)


def _infer_type(values: Sequence[Any]) -> str:
    if all(isinstance(v, bool) for v in values):
        return "boolean"
    if all(isinstance(v, str) for v in values):
        return "string"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return "number"
    return "json"


def serve(spec: int | Serve | Sequence[tuple[int, int]]) -> Serve:
    """An int is a fixed variation; a sequence of (idx, weight) pairs is a rollout."""
    if isinstance(spec, Serve):
        return spec
    if isinstance(spec, int):
        return Serve(variation=spec)
    return Serve(rollout=tuple(WeightedVariation(idx, weight) for idx, weight in spec))


def clause(attribute: str | None, op: str, *values: Any, negate: bool = False) -> Clause:
    return Clause(op=op, attribute=attribute, values=tuple(values), negate=negate)


def segment_clause(*keys: str, negate: bool = False) -> Clause:
    return Clause(op="segmentMatch", values=keys, negate=negate)


def rule(*clauses: Clause, to: int | Serve | Sequence[tuple[int, int]] = 0, id: str = "r") -> Rule:
    return Rule(id=id, clauses=clauses, serve=serve(to))


def flag(
    key: str = "f",
    *,
    variations: Sequence[Any] = (True, False),
    names: Sequence[str] | None = None,
    enabled: bool = True,
    off: int = 1,
    fallthrough: int | Serve | Sequence[tuple[int, int]] = 1,
    rules: Iterable[Rule] = (),
    targets: Iterable[tuple[int, Sequence[str]]] = (),
    prerequisites: Iterable[tuple[str, int]] = (),
    bucket_by: str = "key",
    salt: str | None = None,
    client_side: bool = True,
    type: str | None = None,
) -> FlagSnapshot:
    return FlagSnapshot(
        key=key,
        version=1,
        type=type or _infer_type(variations),
        variations=tuple(
            Variation(i, v, names[i] if names else "") for i, v in enumerate(variations)
        ),
        enabled=enabled,
        off_variation=off,
        fallthrough=serve(fallthrough),
        rules=tuple(rules),
        targets=tuple(Target(variation=v, values=tuple(keys)) for v, keys in targets),
        prerequisites=tuple(Prerequisite(key=k, variation=v) for k, v in prerequisites),
        bucket_by=bucket_by,
        salt=salt,
        client_side=client_side,
    )


def segment(
    key: str,
    *,
    included: Sequence[str] = (),
    excluded: Sequence[str] = (),
    rules: Iterable[SegmentRule] = (),
    salt: str | None = None,
) -> SegmentSnapshot:
    return SegmentSnapshot(
        key=key,
        version=1,
        included=tuple(included),
        excluded=tuple(excluded),
        rules=tuple(rules),
        salt=salt,
    )


def segment_rule(
    *clauses: Clause, weight: int | None = None, bucket_by: str | None = None, id: str = "s"
) -> SegmentRule:
    return SegmentRule(id=id, clauses=clauses, weight=weight, bucket_by=bucket_by)


def snapshot(*flags: FlagSnapshot, segments: Iterable[SegmentSnapshot] = ()) -> Snapshot:
    return Snapshot(
        project="p",
        environment="production",
        version=7,
        flags={f.key: f for f in flags},
        segments={s.key: s for s in segments},
    )


def environment(
    *flags: FlagSnapshot, segments: Iterable[SegmentSnapshot] = (), strict: bool = True
) -> CompiledEnvironment:
    return compile_snapshot(snapshot(*flags, segments=segments), strict=strict)
