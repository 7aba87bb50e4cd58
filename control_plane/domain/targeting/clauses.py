"""Checks of clauses and serves, naming the field each fails on (``rules[0].clauses[1].values``).

What each operator accepts is the engine's table (``shared/engine/operators.py``); a value's
range is the wire's (``shared/wire/body.py``). Semantic checks the engine also makes (regexes,
versions, dates) are left to its compiler, which every write runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from control_plane.domain.problems import Problems
from control_plane.domain.targeting.schemas import ClauseIn, ServeIn, WeightIn
from shared.engine.operators import DATE_OPS, NUMBER_OPS, OPERATORS, SEMVER_OPS, STRING_OPS
from shared.wire import body
from shared.wire import snapshot as w
from shared.wire.kinds import kind_problem, reference_problem

MAX_VALUES_PER_CLAUSE = 10_000


def _weight_units(problems: Problems, field: str, weight: float) -> int:
    if not math.isfinite(weight) or weight < 0 or weight > 100:
        problems.add(field, "must be a percentage from 0 to 100")
        return 0
    units = round(weight * 1000)
    if abs(units - weight * 1000) > 1e-6:
        problems.add(field, "has more than 3 decimals")
    return units


def context_kind(problems: Problems, field: str, kind: str | None) -> str | None:
    """A kind a rule names (``field`` is its ``contextKind``), checked; None: the user."""
    if kind is not None:
        problem = kind_problem(kind)
        if problem is not None:
            problems.add(field, problem)
    return kind


def bucket_by(problems: Problems, field: str, attribute: str | None, kind: str | None) -> None:
    """A rollout's ``bucketBy``: a reference where the rollout names its kind."""
    if attribute is not None and kind is not None:
        problem = reference_problem(attribute)
        if problem is not None:
            problems.add(field, problem)


def serve(problems: Problems, field: str, given: ServeIn, idxs: frozenset[int]) -> w.Serve:
    """``{variation}`` or ``{rollout}``, exactly one; rollout weights are percent summing to 100."""
    if (given.variation is None) == (given.rollout is None):
        problems.add(field, "give exactly one of variation (fixed) or rollout (percentages)")
        return w.Serve(variation=next(iter(sorted(idxs)), 0))
    if given.variation is not None:
        if given.variation not in idxs:
            problems.add(f"{field}.variation", f"no variation has idx {given.variation}")
        if given.bucket_by is not None:
            problems.add(f"{field}.bucketBy", "only a rollout is bucketed")
        if given.context_kind is not None:
            problems.add(f"{field}.contextKind", "only a rollout is bucketed")
        return w.Serve(variation=given.variation)
    assert given.rollout is not None
    kind = context_kind(problems, f"{field}.contextKind", given.context_kind)
    bucket_by(problems, f"{field}.bucketBy", given.bucket_by, kind)
    return w.Serve(
        rollout=tuple(rollout(problems, f"{field}.rollout", given.rollout, idxs)),
        bucket_by=given.bucket_by or None,
        context_kind=kind,
    )


def rollout(
    problems: Problems, field: str, items: Sequence[WeightIn], idxs: frozenset[int]
) -> list[w.WeightedVariation]:
    if not items:
        problems.add(field, "needs at least one item")
        return []
    out = []
    seen: set[int] = set()
    for i, item in enumerate(items):
        if item.idx not in idxs:
            problems.add(f"{field}[{i}].idx", f"no variation has idx {item.idx}")
        elif item.idx in seen:
            problems.add(f"{field}[{i}].idx", f"idx {item.idx} appears twice")
        seen.add(item.idx)
        out.append(
            w.WeightedVariation(
                item.idx, _weight_units(problems, f"{field}[{i}].weight", item.weight)
            )
        )
    total = sum(item.weight for item in out)
    if total != w.WEIGHT_SCALE:
        problems.add(field, f"weights must sum to 100 (they sum to {total / 1000:g})")
    return out


def clause(
    problems: Problems, field: str, given: ClauseIn, segment_keys: frozenset[str]
) -> w.Clause:
    op = given.op or ("segmentMatch" if given.segment is not None else "in")
    if op not in OPERATORS:
        problems.add(
            f"{field}.op", f"unknown operator {op!r}; one of: {', '.join(sorted(OPERATORS))}"
        )
        return w.Clause(op=op)
    if op == "segmentMatch":
        return _segment_clause(problems, field, given, segment_keys)
    if given.segment is not None:
        problems.add(f"{field}.segment", "only a segmentMatch clause names a segment")
    kind = context_kind(problems, f"{field}.contextKind", given.context_kind)
    if not given.attribute:
        problems.add(f"{field}.attribute", "is required for this operator")
    elif kind is not None and (problem := reference_problem(given.attribute)) is not None:
        problems.add(f"{field}.attribute", problem)
    values = given.values or []
    if not values:
        problems.add(f"{field}.values", "needs at least one value")
    if len(values) > MAX_VALUES_PER_CLAUSE:
        problems.add(f"{field}.values", f"at most {MAX_VALUES_PER_CLAUSE} values")
    for i, value in enumerate(values):
        if not _value_ok(op, value):
            problems.add(f"{field}.values[{i}]", _VALUE_RULES[_op_family(op)])
    return w.Clause(
        op=op,
        attribute=given.attribute,
        values=tuple(values),
        negate=given.negate,
        context_kind=kind,
    )


def _segment_clause(
    problems: Problems, field: str, given: ClauseIn, segment_keys: frozenset[str]
) -> w.Clause:
    if given.attribute is not None:
        problems.add(f"{field}.attribute", "a segmentMatch clause has no attribute")
    if given.context_kind is not None:
        problems.add(f"{field}.contextKind", "a segmentMatch clause reads no kind of its own")
    keys: list[Any] = []
    if given.segment is not None:
        keys.append(given.segment)
    keys.extend(given.values or [])
    if not keys:
        problems.add(f"{field}.segment", "name the segment")
    for i, key in enumerate(keys):
        where = (
            f"{field}.segment" if given.segment is not None and i == 0 else f"{field}.values[{i}]"
        )
        if not isinstance(key, str):
            problems.add(where, "a segment key is a string")
        elif key not in segment_keys:
            problems.add(where, f"unknown segment {key!r}")
    return w.Clause(op="segmentMatch", values=tuple(keys), negate=given.negate)


def _op_family(op: str) -> str:
    if op in STRING_OPS:
        return "string"
    if op in NUMBER_OPS:
        return "number"
    if op in SEMVER_OPS:
        return "semver"
    if op in DATE_OPS:
        return "date"
    return "any"


_VALUE_RULES = {
    "string": "this operator compares strings: give a string",
    "number": f"this operator compares numbers: give a number within ±{body.MAX_SAFE_INTEGER}",
    "semver": "this operator compares versions: give a semantic version string such as '2.1.0'",
    "date": "this operator compares dates: give an RFC 3339 string or epoch milliseconds",
    "any": f"give a string, boolean or number within ±{body.MAX_SAFE_INTEGER}",
}


def _value_ok(op: str, value: Any) -> bool:
    family = _op_family(op)
    if family in {"string", "semver"}:
        return isinstance(value, str)
    if family == "number":
        return body.number_in_range(value)
    if family == "date":
        return isinstance(value, str) or body.number_in_range(value)
    return isinstance(value, str | bool) or body.number_in_range(value)


def default_serving(flag_type: str, vs: Sequence[w.Variation]) -> tuple[int, int]:
    """(fallthrough idx, off idx) for a new flag, or a flag in a new environment: true/false for booleans, first/last otherwise."""
    if flag_type == "boolean":
        on = next(v.idx for v in vs if v.value is True)
        off = next(v.idx for v in vs if v.value is False)
        return on, off
    return vs[0].idx, vs[-1].idx
