"""Clauses, rules and segments compiled into matchers ``(context, key) -> bool``.

``key`` is the context's user key the evaluator already resolved (``key``, else
``targetingKey``; ``""`` for a context without a user part), so the attribute ``key`` never
touches the context. Each clause reads one context kind (``user`` by default) and an attribute
or an attribute reference into nested objects (``shared.engine.contexts``); the attribute
``kind`` reads the kinds the context holds, whatever the clause's kind.

A clause never matches a missing or null attribute, negated or not; an array attribute matches
when any (non-null) element does, and ``negate`` then inverts the clause's overall result. All
clauses of a rule must match; any value of a clause may match.

Which segments rules name (``segmentMatch``), and the limits on that graph, are the business of
``shared.engine.graph``; here a ``segmentMatch`` clause only asks a resolver for the matchers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from shared.engine import operators
from shared.engine.bucketing import WEIGHT_SCALE, bucket, bucketable
from shared.engine.contexts import (
    Context,
    check_kind,
    kinds_of,
    part_of,
    reader,
    reference,
)
from shared.engine.model import InvalidAt
from shared.engine.operators import ARRAYS
from shared.wire.kinds import USER
from shared.wire.snapshot import Clause, ContextKeys, SegmentRule, SegmentSnapshot

Matcher = Callable[[Context, str], bool]
# Resolves a segment key met at ``path``: its matcher, or None for an unknown segment.
SegmentResolver = Callable[[str, str], Matcher | None]


def always(_context: Context, _key: str) -> bool:
    return True


def never(_context: Context, _key: str) -> bool:
    return False


BucketInput = Callable[[Context, str], str | None]


def bucket_input(kind: str | None, attribute: str, path: str) -> BucketInput:
    """What a rollout on ``kind`` (``None``: the user's, ``attribute`` a literal name) by
    ``attribute`` hashes for a context: the string, or ``None`` when it cannot be bucketed (the
    attribute or the whole kind is missing, or not a string or an integer)."""
    names = reference(attribute, path, literal=kind is None)
    kind = check_kind(kind, path)
    if names == ("key",):
        if kind == USER:
            return lambda context, key: key or None

        def part_key(context: Context, key: str) -> str | None:
            part = part_of(context, key, kind)
            return None if part is None else part[1]

        return part_key
    if names == ("kind",):  # the rollout's own kind, when the context has it
        return lambda context, key: None if part_of(context, key, kind) is None else kind
    read = reader(names)

    def by_attribute(context: Context, key: str) -> str | None:
        part = part_of(context, key, kind)
        return None if part is None else bucketable(read(part[0]))

    return by_attribute


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


def _attribute_matcher(
    names: tuple[str, ...], predicate: operators.Predicate, negate: bool
) -> Matcher:
    """A clause on a user's attribute (or the context's kinds); ``_of_kind`` moves it to another
    kind's part."""
    if names == ("key",):

        def match_key(context: Context, key: str) -> bool:
            return bool(key) and predicate(key) is not negate

        return match_key
    if names == ("kind",):

        def match_kind(context: Context, key: str) -> bool:
            return _apply(kinds_of(context), predicate, negate)

        return match_kind
    if len(names) == 1 and names[0] != "anonymous":
        (attribute,) = names

        def match(context: Context, key: str) -> bool:
            return _apply(context.get(attribute), predicate, negate)

        return match
    read = reader(names)

    def match_read(context: Context, key: str) -> bool:
        # ``anonymous`` reads false when absent, so the part itself must be there
        return bool(key) and _apply(read(context), predicate, negate)

    return match_read


def _reads_within_budget(
    names: tuple[str, ...], predicate: operators.Predicate, negate: bool
) -> Matcher:
    """A string-operator clause on a context attribute: the page chooses the attribute, so an
    array's strings (and its elements) count together against ``operators.MAX_MATCHED_LENGTH``
    (past it: no match, so a negated clause holds), and no context makes one clause read more
    than that many characters."""
    budget = operators.MAX_MATCHED_LENGTH
    read = reader(names)

    def match(context: Context, key: str) -> bool:
        value = read(context)
        if isinstance(value, ARRAYS) and operators.read_length(value) > budget:
            return negate
        return _apply(value, predicate, negate)

    return match


def _of_kind(kind: str, matcher: Matcher) -> Matcher:
    """``matcher`` (written for a user's attributes and key) applied to the part of ``kind``; a
    context without that kind never matches, negated or not."""

    def match_kind_part(context: Context, key: str) -> bool:
        part = part_of(context, key, kind)
        return part is not None and matcher(part[0], part[1])

    return match_kind_part


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
    names = reference(attribute, f"{path}.attribute", literal=clause.context_kind is None)
    kind = check_kind(clause.context_kind, f"{path}.contextKind")
    predicate, strings = operators.compile_predicate(op, values, f"{path}.values")
    plain = len(names) == 1 and names[0] not in ("key", "kind", "anonymous")
    if names == ("kind",):  # the context's kinds, whichever kind the clause names
        return _attribute_matcher(names, predicate, negate), None
    if op in operators.STRING_OPS and names not in (("key",), ("anonymous",)):
        matcher = _reads_within_budget(names, predicate, negate)
    elif strings is not None and not negate and plain and kind == USER:
        shape = StringIn(names[0], strings, predicate)
        return shape.matcher(), shape
    else:
        matcher = _attribute_matcher(names, predicate, negate)
    return (matcher if kind == USER else _of_kind(kind, matcher)), None


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
    check_kind(rule.context_kind, f"{path}.contextKind")
    hashed = bucket_input(rule.context_kind, bucket_by, f"{path}.bucketBy")

    def match_weighted(context: Context, key: str) -> bool:
        if not clauses(context, key):
            return False
        value = hashed(context, key)
        return (0 if value is None else bucket(salt, value)) < weight

    return match_weighted


def _searches(rules: Any) -> list[tuple[str, int]]:
    """The search units of ``rules`` (a flag's or a segment's), with their paths: each ``matches``
    pattern its RE2 instructions, each ``contains`` value one (``operators``' search budget)."""
    found: list[tuple[str, int]] = []
    for i, rule in enumerate(rules if isinstance(rules, ARRAYS) else ()):
        clauses = getattr(rule, "clauses", ())
        for j, clause in enumerate(clauses if isinstance(clauses, ARRAYS) else ()):
            values = getattr(clause, "values", ())
            op = getattr(clause, "op", None)
            if op not in ("matches", "contains") or not isinstance(values, ARRAYS):
                continue
            path = f"rules[{i}].clauses[{j}].values"
            found.extend(
                (f"{path}[{k}]", operators.program_size(v) if op == "matches" else 1)
                for k, v in enumerate(values)
                if isinstance(v, str)
            )
    return found


def check_search_budget(rules: Any, what: str) -> None:
    """``InvalidAt`` (at the value that crosses it) when the search units of a flag's or a
    segment's compiled ``rules`` add up to more than ``operators.MAX_RULES_PROGRAM_SIZE``."""
    found = _searches(rules)
    sizes = [units for _, units in found]
    crossing = operators.over_budget(sizes, operators.MAX_RULES_PROGRAM_SIZE)
    if crossing is not None:
        raise InvalidAt(
            found[crossing][0],
            operators.too_large(sum(sizes), operators.MAX_RULES_PROGRAM_SIZE, what),
        )


def search_units(flags: Iterable[Any], segments: Iterable[Any]) -> int:
    """What a bulk evaluation of these flags (as the wire has them) may search, in the budget's
    units: their own, and for any segment that searches, more than
    ``operators.INLINE_SEARCH_UNITS`` (a segment runs once for every clause that names it, so
    its units are not simply added). The relay evaluates past that off its event loop."""
    if any(_searches(getattr(item, "rules", ())) for item in segments):
        return operators.INLINE_SEARCH_UNITS + 1
    return sum(units for item in flags for _, units in _searches(getattr(item, "rules", ())))


def any_searches(items: Iterable[Any]) -> bool:
    """Whether any of ``items`` (flags or segments as the wire has them) runs a ``matches`` or
    ``contains`` clause."""
    return any(_searches(getattr(item, "rules", ())) for item in items)


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
    check_search_budget(segment.rules, "this segment's patterns and contains values together")
    included_of = _listed(segment.included_contexts, "includedContexts")
    excluded_of = _listed(segment.excluded_contexts, "excludedContexts")

    def match_segment(context: Context, key: str) -> bool:
        if key and key in included:
            return True
        if included_of and _listed_in(included_of, context, key):
            return True
        if key and key in excluded:
            return False
        if excluded_of and _listed_in(excluded_of, context, key):
            return False
        for rule in rules:  # noqa: SIM110
            if rule(context, key):
                return True
        return False

    return match_segment


def _listed(lists: Any, path: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """A segment's keys listed by kind: (kind, keys) in order."""
    out = []
    for i, listed in enumerate(sequence(lists, path)):
        if not isinstance(listed, ContextKeys):
            raise InvalidAt(f"{path}[{i}]", "expected {contextKind, values}")
        kind = check_kind(listed.context_kind, f"{path}[{i}].contextKind")
        keys = frozenset(
            text(k, f"{path}[{i}].values[{j}]", empty=True)
            for j, k in enumerate(sequence(listed.values, f"{path}[{i}].values"))
        )
        out.append((kind, keys))
    return tuple(out)


def _listed_in(lists: tuple[tuple[str, frozenset[str]], ...], context: Context, key: str) -> bool:
    for kind, keys in lists:
        part = part_of(context, key, kind)
        if part is not None and part[1] in keys:
            return True
    return False
