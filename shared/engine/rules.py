"""Clauses, rules and segments compiled into matchers ``(context, key) -> bool``.

``key`` is the context key the evaluator already resolved (``key``, else ``targetingKey``), so
the attribute ``key`` never touches the context. The attribute ``kind`` reads the context's
``kind``, ``"user"`` when absent. Any other attribute is a top-level context property.

A clause never matches a missing or null attribute, negated or not; an array attribute matches
when any (non-null) element does, and ``negate`` then inverts the clause's overall result. All
clauses of a rule must match; any value of a clause may match.

Which segments rules name (``segmentMatch``), and the limits on that graph, are the business of
``shared.engine.graph``; here a ``segmentMatch`` clause only asks a resolver for the matchers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from shared.engine import operators
from shared.engine.bucketing import WEIGHT_SCALE, bucket, bucketable
from shared.engine.model import InvalidAt
from shared.engine.operators import ARRAYS
from shared.wire.snapshot import Clause, SegmentRule, SegmentSnapshot

Context = Mapping[str, Any]
Matcher = Callable[[Context, str], bool]
# Resolves a segment key met at ``path``: its matcher, or None for an unknown segment.
SegmentResolver = Callable[[str, str], Matcher | None]


def always(_context: Context, _key: str) -> bool:
    return True


def never(_context: Context, _key: str) -> bool:
    return False


def bucket_input(context: Context, key: str, attribute: str) -> str | None:
    """The string a context is bucketed by, or ``None`` when it cannot be bucketed."""
    if attribute == "key":
        return key
    if attribute == "kind":
        kind = context.get("kind")
        return "user" if kind is None else bucketable(kind)
    return bucketable(context.get(attribute))


def sequence(value: Any, path: str) -> Sequence[Any]:
    if not isinstance(value, ARRAYS):
        raise InvalidAt(path, "expected an array")
    return value


def text(value: Any, path: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        raise InvalidAt(path, "expected a string" if empty else "expected a non-empty string")
    return str(value)


def _apply(value: Any, predicate: operators.Predicate, negate: bool) -> bool:
    if value is None:
        return False
    if isinstance(value, ARRAYS):
        for item in value:
            if item is not None and predicate(item):
                return not negate
        return negate
    return predicate(value) is not negate


class StringIn(NamedTuple):
    """A clause ``attribute in [strings]`` on a context attribute (not ``key`` or ``kind``), not
    negated: its matcher, and its parts for flag shapes that inline that matcher
    (``shared.engine.closures``' rule-then-rollout closure)."""

    attribute: str
    strings: frozenset[str]
    predicate: operators.Predicate

    def holds(self, value: Any) -> bool:
        """For a value that is not a string (a string is just looked up in ``strings``)."""
        return _apply(value, self.predicate, False)

    def matcher(self) -> Matcher:
        attribute, strings, predicate = self

        # One dict lookup and one set lookup for a string attribute.
        def match_in(context: Context, key: str) -> bool:
            value = context.get(attribute)
            if value.__class__ is str:
                return value in strings
            return _apply(value, predicate, False)

        return match_in


def _attribute_matcher(attribute: str, predicate: operators.Predicate, negate: bool) -> Matcher:
    if attribute == "key":

        def match_key(context: Context, key: str) -> bool:
            return predicate(key) is not negate

        return match_key
    if attribute == "kind":

        def match_kind(context: Context, key: str) -> bool:
            kind = context.get("kind")
            return _apply("user" if kind is None else kind, predicate, negate)

        return match_kind

    def match(context: Context, key: str) -> bool:
        return _apply(context.get(attribute), predicate, negate)

    return match


def _searches_within_budget(
    attribute: str, predicate: operators.Predicate, negate: bool
) -> Matcher:
    """A ``matches`` clause on a context attribute: the page chooses the attribute, so an array's
    strings count together against ``operators.MAX_MATCHED_LENGTH`` (past it: no match), and
    no context makes one clause search more than that many characters."""
    budget = operators.MAX_MATCHED_LENGTH

    def match(context: Context, key: str) -> bool:
        value = context.get(attribute)
        if isinstance(value, ARRAYS):
            searched = sum(len(item) for item in value if isinstance(item, str))
            if searched > budget:
                return negate
        return _apply(value, predicate, negate)

    return match


def compile_clause(
    clause: Any, path: str, resolve_segment: SegmentResolver
) -> tuple[Matcher, StringIn | None]:
    """The clause's matcher, and the clause as a ``StringIn`` when it is one."""
    if not isinstance(clause, Clause):
        raise InvalidAt(path, "expected a clause")
    op = clause.op
    if not isinstance(op, str) or op not in operators.OPERATORS:
        raise InvalidAt(f"{path}.op", f"unknown operator {op!r}")
    values = sequence(clause.values, f"{path}.values")
    negate = clause.negate
    if not isinstance(negate, bool):
        raise InvalidAt(f"{path}.negate", "expected a boolean")
    if op == operators.SEGMENT_MATCH:
        found = []
        for i, value in enumerate(values):
            segment_key = text(value, f"{path}.values[{i}]")
            matcher = resolve_segment(segment_key, f"{path}.values[{i}]")
            if matcher is not None:
                found.append(matcher)
        segments = tuple(found)

        def match_segments(context: Context, key: str) -> bool:
            for segment in segments:
                if segment(context, key):
                    return not negate
            return negate

        return match_segments, None
    attribute = text(clause.attribute, f"{path}.attribute")
    predicate, strings = operators.compile_predicate(op, values, f"{path}.values")
    if op == "matches" and attribute not in ("key", "kind"):
        return _searches_within_budget(attribute, predicate, negate), None
    if strings is not None and not negate and attribute not in ("key", "kind"):
        shape = StringIn(attribute, strings, predicate)
        return shape.matcher(), shape
    return _attribute_matcher(attribute, predicate, negate), None


def compile_clauses(clauses: Any, path: str, resolve_segment: SegmentResolver) -> Matcher:
    """All of ``clauses`` must match (no clauses: everyone matches)."""
    return compile_rule_clauses(clauses, path, resolve_segment)[0]


def compile_rule_clauses(
    clauses: Any, path: str, resolve_segment: SegmentResolver
) -> tuple[Matcher, StringIn | None]:
    """``compile_clauses``, and the clauses as a ``StringIn`` when they are one such clause."""
    compiled = [
        compile_clause(clause, f"{path}[{i}]", resolve_segment)
        for i, clause in enumerate(sequence(clauses, path))
    ]
    if len(compiled) == 1:
        return compiled[0]
    return _all_of(tuple(matcher for matcher, _ in compiled)), None


def _all_of(matchers: tuple[Matcher, ...]) -> Matcher:
    if not matchers:
        return always
    if len(matchers) == 2:
        first, second = matchers
        return lambda context, key: first(context, key) and second(context, key)

    def match_all(context: Context, key: str) -> bool:
        # Plain loops here and below: a generator in all()/any() costs more per call.
        for matcher in matchers:  # noqa: SIM110
            if not matcher(context, key):
                return False
        return True

    return match_all


def _segment_rule(rule: Any, path: str, salt: str, resolve_segment: SegmentResolver) -> Matcher:
    if not isinstance(rule, SegmentRule):
        raise InvalidAt(path, "expected a segment rule")
    text(rule.id, f"{path}.id", empty=True)
    clauses = compile_clauses(rule.clauses, f"{path}.clauses", resolve_segment)
    weight = rule.weight
    if weight is None:
        return clauses
    if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= WEIGHT_SCALE:
        raise InvalidAt(f"{path}.weight", f"expected an integer from 0 to {WEIGHT_SCALE}")
    bucket_by = "key" if rule.bucket_by is None else text(rule.bucket_by, f"{path}.bucketBy")

    def match_weighted(context: Context, key: str) -> bool:
        if not clauses(context, key):
            return False
        value = bucket_input(context, key, bucket_by)
        return (0 if value is None else bucket(salt, value)) < weight

    return match_weighted


def compile_segment(segment: Any, resolve_segment: SegmentResolver) -> Matcher:
    """A segment matches its included keys, then not its excluded keys, then any rule."""
    if not isinstance(segment, SegmentSnapshot):
        raise InvalidAt("", "expected a segment")
    segment_key = text(segment.key, "key")
    if not isinstance(segment.version, int):
        raise InvalidAt("version", "expected an integer")
    included = frozenset(
        text(k, f"included[{i}]", empty=True)
        for i, k in enumerate(sequence(segment.included, "included"))
    )
    excluded = frozenset(
        text(k, f"excluded[{i}]", empty=True)
        for i, k in enumerate(sequence(segment.excluded, "excluded"))
    )
    salt = segment_key if segment.salt is None else text(segment.salt, "salt", empty=True)
    rules = tuple(
        _segment_rule(rule, f"rules[{i}]", salt, resolve_segment)
        for i, rule in enumerate(sequence(segment.rules, "rules"))
    )

    def match_segment(context: Context, key: str) -> bool:
        if key in included:
            return True
        if key in excluded:
            return False
        for rule in rules:  # noqa: SIM110
            if rule(context, key):
                return True
        return False

    return match_segment
