"""Every operator's work is bounded before a rule is saved and when it runs (issue #33).

Found from outside: a semVer attribute of 500 KB took seconds a request (the version pattern
backtracks), and one of 200,000 digits answered 500 (Python's integer conversion limit). Past the
operator's length cap an attribute is no match, never an error.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import re2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.engine import CompileError, Reason, compile_snapshot, evaluate
from shared.engine.operators import (
    MAX_CLAUSE_PROGRAM_SIZE,
    MAX_DATE_LENGTH,
    MAX_MATCHED_LENGTH,
    MAX_PROGRAM_SIZE,
    MAX_RULES_PROGRAM_SIZE,
    MAX_VERSION_LENGTH,
    regex_options,
)
from shared.engine.rules import any_searches
from shared.wire.body import MAX_BODY_BYTES

from .builders import clause, flag, rule, segment, segment_rule, snapshot
from .test_operators import matches

HUGE_VERSION = "1.0.0-" + "a1" * 250_000  # 500 KB
DIGITS = "9" * 200_000


@pytest.mark.parametrize("op", ["semVerEqual", "semVerLessThan", "semVerGreaterThan"])
@pytest.mark.parametrize("attribute", [HUGE_VERSION, DIGITS, "1.0.0-" + DIGITS, "1." + DIGITS])
def test_a_version_past_the_cap_is_no_match_not_an_error(op: str, attribute: str) -> None:
    assert matches(op, ["1.0.0"], attribute) is False
    assert matches(op, ["1.0.0"], [attribute, attribute]) is False
    assert matches(op, ["1.0.0"], attribute, negate=True) is True


def test_the_version_cap_is_the_same_at_save_time_and_at_run_time() -> None:
    longest = "1.0.0-" + "a" * (MAX_VERSION_LENGTH - 6)
    assert matches("semVerEqual", [longest], longest) is True
    assert matches("semVerEqual", ["1.0.0"], longest + "a") is False
    with pytest.raises(CompileError) as info:
        compile_snapshot(snapshot(flag(rules=[rule(clause("v", "semVerEqual", longest + "a"))])))
    assert info.value.path == "flags.f.rules[0].clauses[0].values[0]"
    assert f"{MAX_VERSION_LENGTH} characters" in info.value.message


@pytest.mark.parametrize("op", ["before", "after"])
def test_a_date_past_the_cap_is_no_match_not_an_error(op: str) -> None:
    long_fraction = "2020-01-01T00:00:00." + "1" * 500_000 + "Z"
    assert matches(op, ["2000-01-01T00:00:00Z"], long_fraction) is False
    assert matches(op, ["2000-01-01T00:00:00Z"], "1" * MAX_DATE_LENGTH) is False
    with pytest.raises(CompileError):
        compile_snapshot(snapshot(flag(rules=[rule(clause("d", op, long_fraction))])))


# ------------------------------------------------------------------ generated regexes, inputs

atoms = st.sampled_from(["a", "b", "[ab]", ".", "\\d", "[^c]", "c", "(a|b)", "\\w", "x"])


@st.composite
def patterns(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 6))):
        atom = draw(atoms)
        repeat = draw(
            st.sampled_from(["", "*", "+", "?"])
            | st.integers(1, 600).map(lambda n: f"{{{n}}}")
            | st.tuples(st.integers(0, 50), st.integers(0, 300)).map(
                lambda mn: f"{{{min(mn)},{max(mn)}}}"
            )
        )
        parts.append(atom + repeat)
    return "".join(parts)


@st.composite
def attributes(draw: st.DrawFn) -> Any:
    unit = draw(st.text(alphabet="abcx1.-", min_size=1, max_size=8))
    length = draw(st.integers(0, MAX_BODY_BYTES // 8))
    text = (unit * (length // len(unit) + 1))[:length]
    return draw(st.sampled_from([text, [text], [text[: len(text) // 2]] * 2]))


def program_size(pattern: str) -> int:
    """Measured here with RE2 itself, not with the engine's helper."""
    return int(re2.compile(pattern, regex_options()).programsize)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    clauses=st.lists(st.lists(patterns(), min_size=1, max_size=8), min_size=1, max_size=6),
    attribute=attributes(),
)
def test_accepted_regexes_stay_within_the_budget_and_never_raise(
    clauses: list[list[str]], attribute: Any
) -> None:
    data = flag(rules=[rule(clause("a", "matches", *values)) for values in clauses])
    try:
        env = compile_snapshot(snapshot(data))
    except CompileError:
        return  # refused at save time: nothing runs
    # the deterministic cost of one evaluation: instructions of every pattern times characters read
    sizes = [[program_size(p) for p in values] for values in clauses]
    assert all(size <= MAX_PROGRAM_SIZE for values in sizes for size in values)
    assert all(sum(values) <= MAX_CLAUSE_PROGRAM_SIZE for values in sizes)
    assert sum(map(sum, sizes)) <= MAX_RULES_PROGRAM_SIZE
    result = evaluate(env, "f", {"key": "u", "a": attribute}, 0)
    assert result.reason in (Reason.RULE_MATCH, Reason.FALLTHROUGH)
    searched = attribute if isinstance(attribute, str) else "".join(attribute)
    if len(searched) > MAX_MATCHED_LENGTH:
        assert result.reason is Reason.FALLTHROUGH


def test_whether_rules_run_regexes_is_read_from_flags_and_segments() -> None:
    plain = flag(rules=[rule(clause("a", "in", "x"))])
    assert not any_searches([plain, segment("s", rules=[segment_rule(clause("a", "in", "x"))])])
    assert any_searches([plain, flag("g", rules=[rule(clause("a", "matches", "x"))])])
    assert any_searches([segment("s", rules=[segment_rule(clause("a", "matches", "x"))])])
    assert not any_searches([None, "not a flag"])


# ------------------------------------------- every string operator at its caps, and past them


class CountingStr(str):
    """An attribute that counts the characters the string operators read from it: the
    deterministic cost of an evaluation (no clock)."""

    read = 0

    def _count(self) -> None:
        CountingStr.read += len(self)

    def __contains__(self, part: object) -> bool:
        self._count()
        return super().__contains__(part)  # type: ignore[operator]

    def startswith(self, *args: Any) -> bool:
        self._count()
        return super().startswith(*args)

    def endswith(self, *args: Any) -> bool:
        self._count()
        return super().endswith(*args)

    def encode(self, *args: Any, **kwargs: Any) -> bytes:  # what RE2 is given to search
        self._count()
        return super().encode(*args, **kwargs)


def _holds(op: str, literals: list[str], text: str) -> bool:
    """What the operator means, written with Python's own string methods (``matches`` is given
    the literals escaped, so it means ``contains``)."""
    if op == "startsWith":
        return any(text.startswith(lit) for lit in literals)
    if op == "endsWith":
        return any(text.endswith(lit) for lit in literals)
    return any(lit in text for lit in literals)


@st.composite
def string_attributes(draw: st.DrawFn) -> str | list[str]:
    """Strings and arrays at, just under and past ``MAX_MATCHED_LENGTH``, or anywhere below."""
    cap = MAX_MATCHED_LENGTH
    length = draw(st.sampled_from([cap - 1, cap, cap + 1, 2 * cap]) | st.integers(0, cap + 64))
    unit = draw(st.text(alphabet="abc", min_size=1, max_size=4))
    text = (unit * (length // len(unit) + 1))[:length]
    shape = draw(st.sampled_from(["string", "array", "halves", "empties"]))
    if shape == "string":
        return text
    if shape == "array":
        return [text]
    if shape == "halves":
        return [text[: length // 2], text[length // 2 :]]
    return [""] * draw(st.sampled_from([cap // 2, cap, cap + 1]))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    op=st.sampled_from(["startsWith", "endsWith", "contains", "matches"]),
    literals=st.lists(st.text(alphabet="abcd", min_size=1, max_size=6), min_size=1, max_size=4),
    copies=st.sampled_from([1, 100, 512, 513]),
    negate=st.booleans(),
    attribute=string_attributes(),
)
def test_every_string_operator_reads_at_most_the_cap_and_past_it_is_no_match(
    op: str, literals: list[str], copies: int, negate: bool, attribute: str | list[str]
) -> None:
    values = [re.escape(lit) if op == "matches" else lit for lit in literals]
    values = (values * copies)[: max(copies, len(values))]
    data = flag(rules=[rule(clause("a", op, *values, negate=negate))])
    units = (
        sum(program_size(v) for v in values)
        if op == "matches"
        else len(values)
        if op == "contains"
        else 0
    )
    if units > MAX_CLAUSE_PROGRAM_SIZE:
        with pytest.raises(CompileError) as refused:
            compile_snapshot(snapshot(data))
        assert refused.value.path.startswith("flags.f.rules[0].clauses[0].values[")
        return
    env = compile_snapshot(snapshot(data))
    counted = (
        CountingStr(attribute)
        if isinstance(attribute, str)
        else [CountingStr(item) for item in attribute]
    )
    CountingStr.read = 0
    result = evaluate(env, "f", {"key": "u", "a": counted}, 0)
    assert result.reason in (Reason.RULE_MATCH, Reason.FALLTHROUGH)
    items = [attribute] if isinstance(attribute, str) else attribute
    read = len(attribute) if isinstance(attribute, str) else len(items) + sum(map(len, items))
    if read > MAX_MATCHED_LENGTH:
        assert CountingStr.read == 0  # not read at all
        assert (result.reason is Reason.RULE_MATCH) is negate  # no match, then negated
        return
    # the deterministic cost: characters read, each distinct value reading the attribute once
    assert CountingStr.read <= len(set(values)) * MAX_MATCHED_LENGTH
    expected = any(_holds(op, literals, item) for item in items)
    assert (result.reason is Reason.RULE_MATCH) is (expected is not negate)
