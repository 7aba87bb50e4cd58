"""One flag or one segment checked for the control plane, as ``compile_snapshot`` would check
it, before it is saved: the same closures (``shared.engine.closures``), rules and graph checks
(``shared.engine.graph``), without compiling the rest of the environment.

``CompileError`` paths are relative to the flag or segment checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.engine.closures import Prereq, build_flag, constant_run
from shared.engine.graph import check_graph, prerequisite_keys, segment_references
from shared.engine.model import MALFORMED_FLAG, CompileError, InvalidAt
from shared.engine.operators import ARRAYS
from shared.engine.rules import Matcher, compile_segment, never, text
from shared.wire.snapshot import FlagSnapshot, SegmentSnapshot


def _placeholder_prereq(flag: Any) -> Prereq:
    """Another flag as a prerequisite: its variations and ``enabled``, never evaluated."""
    variations = getattr(flag, "variations", ())
    indexes = frozenset(
        v.idx
        for v in (variations if isinstance(variations, ARRAYS) else ())
        if isinstance(getattr(v, "idx", None), int)
    )
    return Prereq(constant_run(MALFORMED_FLAG), getattr(flag, "enabled", False) is True, indexes)


def validate_flag(
    flag: FlagSnapshot,
    segments: Mapping[str, SegmentSnapshot],
    flags: Mapping[str, FlagSnapshot],
) -> None:
    """Check one flag as ``compile_snapshot`` would; ``CompileError`` paths are relative to it.

    ``flags`` are the environment's other flags (a stale copy of this one is ignored) and
    ``segments`` its segments; their own contents are not checked, only the flag's use of them.
    Pass every flag of the environment: a prerequisite cycle can only be seen through the
    flags given (a flag missing from ``flags`` counts as unknown, which is allowed).
    """
    try:
        key = text(getattr(flag, "key", None), "key")
        others = {**flags, key: flag}
        edges = [
            (f"prerequisites[{i}].key", k)
            for i, k in enumerate(prerequisite_keys(flag))
            if k != key
        ]
        check_graph(key, edges, lambda k: prerequisite_keys(others.get(k)), "prerequisite")

        def resolve_prereq(prereq_key: str, path: str) -> Prereq | None:
            other = others.get(prereq_key)
            return None if other is None else _placeholder_prereq(other)

        def resolve_segment(segment_key: str, path: str) -> Matcher | None:
            return never if segment_key in segments else None

        build_flag(flag, resolve_prereq, resolve_segment)
    except InvalidAt as exc:
        raise CompileError(exc.path, exc.message) from None


def validate_segment(segment: SegmentSnapshot, segments: Mapping[str, SegmentSnapshot]) -> None:
    """Check one segment as ``compile_snapshot`` would; paths are relative to the segment."""
    try:
        key = text(getattr(segment, "key", None), "key")
        others = {**segments, key: segment}
        edges = [(p, k) for p, k in segment_references(segment)]
        check_graph(
            key,
            edges,
            lambda k: [ref for _, ref in segment_references(others.get(k))],
            "segment",
        )

        def resolve_segment(segment_key: str, path: str) -> Matcher | None:
            return never if segment_key in others else None

        compile_segment(segment, resolve_segment)
    except InvalidAt as exc:
        raise CompileError(exc.path, exc.message) from None
