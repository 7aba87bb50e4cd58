"""Every clause operator, with negation, missing values, arrays and type strictness.

Expected values follow LaunchDarkly's documented semantics, written by hand here.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.engine import Reason, evaluate

from .builders import clause, environment, flag, rule

MISSING = object()


def matches(op: str, values: list[Any], attribute: Any, *, negate: bool = False) -> bool:
    env = environment(flag(rules=[rule(clause("attr", op, *values, negate=negate))]))
    context = {"key": "user-1"} if attribute is MISSING else {"key": "user-1", "attr": attribute}
    result = evaluate(env, "f", context, 0)
    assert result.reason in (Reason.RULE_MATCH, Reason.FALLTHROUGH)
    return result.reason is Reason.RULE_MATCH


CASES = [
    # in: type-strict equality
    ("in", ["a", "b"], "a", True),
    ("in", ["a"], "A", False),
    ("in", [1], 1.0, True),
    ("in", [1.0], 1, True),
    ("in", [1], "1", False),
    ("in", ["1"], 1, False),
    ("in", [True], 1, False),
    ("in", [1], True, False),
    ("in", [0], False, False),
    ("in", [False], 0, False),
    ("in", [0.0], False, False),
    ("in", [True], True, True),
    ("in", [False], False, True),
    ("in", [""], "", True),
    ("in", [{"a": 1}], {"a": 1.0}, True),
    ("in", [{"a": 1}], {"a": True}, False),
    ("in", [{"a": [1, "x"]}], {"a": [1, "x"]}, True),
    ("in", [[1, 2]], [[1, 2]], True),  # an array attribute's element that is itself an array
    ("in", [[1]], [1], False),  # the attribute array is iterated, not compared whole
    # string operators: case-sensitive, strings only
    ("startsWith", ["pre"], "prefix", True),
    ("startsWith", ["pre"], "Prefix", False),
    ("startsWith", ["x", "pre"], "prefix", True),
    ("startsWith", ["99"], 99, False),
    ("startsWith", ["true"], True, False),
    ("endsWith", ["fix"], "suffix", True),
    ("endsWith", ["fix"], "suffiX", False),
    ("endsWith", ["1"], 1, False),
    ("contains", ["sub"], "a-sub-b", True),
    ("contains", ["sub"], "a-Sub-b", False),
    ("contains", ["x", "b"], "abc", True),
    ("contains", ["null"], "nul", False),
    ("matches", ["^[A-Za-z]+"], "matchThisName", True),
    ("matches", ["^[A-Za-z]+"], "_nope", False),
    ("matches", ["b+"], "abbbc", True),  # a search, not a full match
    ("matches", ["\\d"], 5, False),
    ("matches", ["true"], True, False),
    # numeric: numbers only, booleans and numeric strings are not numbers
    ("lessThan", [100], 99, True),
    ("lessThan", [100], 100, False),
    ("lessThan", [100], 100.1, False),
    ("lessThan", [10, 100], 50, True),
    ("lessThan", [100], "99", False),
    ("lessThan", [1], False, False),
    ("lessThanOrEqual", [100], 100, True),
    ("lessThanOrEqual", [100], 100.1, False),
    ("greaterThan", [100], 100.1, True),
    ("greaterThan", [100], 100, False),
    ("greaterThan", [0], True, False),
    ("greaterThan", [100], "101", False),
    ("greaterThanOrEqual", [100], 100, True),
    ("greaterThanOrEqual", [100], 99.9, False),
    ("greaterThanOrEqual", [100], 10**30, True),
    # dates: RFC 3339 or epoch milliseconds on both sides, strict comparison
    ("before", ["2017-12-06T00:00:00.000-07:00"], "2017-12-06T06:59:59Z", True),
    ("before", ["2017-12-06T00:00:00.000-07:00"], "2017-12-06T07:00:00Z", False),
    ("before", [1512543600000], "2017-12-06T07:00:00Z", False),
    ("after", [1512543600000], "2017-12-06T07:00:00Z", False),
    ("after", ["2017-12-06T07:00:00Z"], 1512543601000, True),
    ("after", ["2017-12-06T07:00:00Z"], "2017-12-06T07:00:00.001Z", True),
    ("after", ["2017-12-06T07:00:00Z"], "2017-12-06T07:00:00.0001Z", True),
    ("before", ["2017-12-06T07:00:00Z"], "2017-12-06T08:00:00+01:01", True),
    ("before", [1512543600000], 1512543599999.5, True),
    ("after", [0], "1512543600001", False),  # a numeric string is not a date
    ("after", [0], "2017-12-07", False),  # a date without a time is not RFC 3339
    ("after", [0], "2017-12-07T00:00:00", False),  # nor one without an offset
    ("after", [0], "2017-02-30T00:00:00Z", False),  # nor an impossible day
    ("after", [0], True, False),
    ("after", [0], 1, True),
    # semantic versions, with LaunchDarkly's leniency for missing components
    ("semVerEqual", ["2.0.0"], "2", True),
    ("semVerEqual", ["2.0.0"], "2.0", True),
    ("semVerEqual", ["2.0.0"], "2.0.0+build.5", True),
    ("semVerEqual", ["2.0.0-rc"], "2-rc", True),
    ("semVerEqual", ["2.0.0"], "2.0.0-rc", False),
    ("semVerEqual", ["2.0.0"], "v2.0.0", False),
    ("semVerEqual", ["2.0.0"], "02.0.0", False),
    ("semVerEqual", ["2.0.0"], "2.0.0.0", False),
    ("semVerEqual", ["2.0.0"], 2, False),
    ("semVerLessThan", ["2.0.0"], "2.0.0-rc", True),
    ("semVerLessThan", ["2.0.0"], "1.99.99", True),
    ("semVerLessThan", ["2.0.0"], "2.0.0", False),
    ("semVerLessThan", ["2.0.0-rc.10"], "2.0.0-rc.2", True),  # numeric identifiers
    ("semVerLessThan", ["2.0.0-alpha"], "2.0.0-1", True),  # numeric below alphanumeric
    ("semVerGreaterThan", ["2.0.0-rc.2.green"], "2.0.0-rc.2.red", True),
    ("semVerGreaterThan", ["2.0.0-rc.2.green"], "2.0.0-rc.2.green.1", True),
    ("semVerGreaterThan", ["2.0.0-rc"], "2.0.0-rc.1", True),
    ("semVerGreaterThan", ["2.0.0"], "2.0.0+build", False),
    ("semVerGreaterThan", ["1.0.0", "3.0.0"], "2.0.0", True),  # any value may match
]


@pytest.mark.parametrize(("op", "values", "attribute", "expected"), CASES)
def test_operator(op: str, values: list[Any], attribute: Any, expected: bool) -> None:
    assert matches(op, values, attribute) is expected


@pytest.mark.parametrize(
    ("op", "values", "attribute", "expected"), [c for c in CASES if not isinstance(c[2], list)]
)
def test_operator_negated_inverts_a_present_scalar(
    op: str, values: list[Any], attribute: Any, expected: bool
) -> None:
    assert matches(op, values, attribute, negate=True) is (not expected)


@pytest.mark.parametrize(
    ("op", "value"),
    [
        ("in", "x"),
        ("startsWith", "x"),
        ("matches", "."),
        ("lessThan", 5),
        ("greaterThanOrEqual", 0),
        ("before", 1),
        ("after", 1),
        ("semVerLessThan", "1.0.0"),
        ("in", None),
    ],
)
@pytest.mark.parametrize("negate", [False, True])
@pytest.mark.parametrize("attribute", [MISSING, None])
def test_missing_or_null_attribute_never_matches(
    op: str, value: Any, negate: bool, attribute: Any
) -> None:
    assert matches(op, [value], attribute, negate=negate) is False


@pytest.mark.parametrize(
    ("values", "attribute", "negate", "expected"),
    [
        (["c"], ["b", "c"], False, True),
        (["x"], ["b", "c"], False, False),
        (["c"], ["b", "c"], True, False),  # negation applies to the clause, after "any element"
        (["x"], ["b", "c"], True, True),
        (["a"], [None, "a"], False, True),
        ([None], [None], False, False),  # null elements never match
        (["x"], [], False, False),
        (["x"], [], True, True),  # no element matched, negated
        ([1], (2, 1), False, True),  # a tuple is an array too
    ],
)
def test_array_attribute_matches_if_any_element_does(
    values: list[Any], attribute: Any, negate: bool, expected: bool
) -> None:
    assert matches("in", values, attribute, negate=negate) is expected


def test_values_or_and_clauses_and() -> None:
    env = environment(
        flag(
            rules=[
                rule(clause("country", "in", "US", "CA"), clause("plan", "in", "pro"), id="both"),
            ]
        )
    )

    def hit(**attributes: Any) -> bool:
        return evaluate(env, "f", {"key": "k", **attributes}, 0).reason is Reason.RULE_MATCH

    assert hit(country="CA", plan="pro")
    assert hit(country="US", plan="pro")
    assert not hit(country="CA", plan="free")
    assert not hit(country="GB", plan="pro")
    assert not hit(plan="pro")


def test_key_attribute_reads_the_context_key_or_targeting_key() -> None:
    env = environment(flag(rules=[rule(clause("key", "startsWith", "admin-"))]))
    assert evaluate(env, "f", {"key": "admin-1"}, 0).reason is Reason.RULE_MATCH
    assert evaluate(env, "f", {"targetingKey": "admin-2"}, 0).reason is Reason.RULE_MATCH
    assert evaluate(env, "f", {"key": "user-1"}, 0).reason is Reason.FALLTHROUGH


@pytest.mark.parametrize(
    ("context", "op", "value", "expected"),
    [
        ({"key": "a"}, "in", "user", True),  # kind defaults to "user"
        ({"key": "a", "kind": "user"}, "in", "user", True),
        ({"key": "a", "kind": "org"}, "in", "user", False),
        ({"key": "a", "kind": "org"}, "matches", "^[uo]", True),
        ({"key": "a", "kind": "company"}, "matches", "^[uo]", False),
    ],
)
def test_kind_attribute(context: dict[str, Any], op: str, value: str, expected: bool) -> None:
    env = environment(flag(rules=[rule(clause("kind", op, value))]))
    assert (evaluate(env, "f", context, 0).reason is Reason.RULE_MATCH) is expected


def test_rule_without_clauses_matches_everyone() -> None:
    env = environment(flag(rules=[rule(to=0)]))
    assert evaluate(env, "f", {"key": "anyone"}, 0).reason is Reason.RULE_MATCH
