"""``matches`` runs in time linear in the attribute whatever the pattern (found from outside: a
page stalled a relay's event loop with ``^(a+)+$`` and an email of many ``a`` then ``!``)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.engine import CompileError, compile_snapshot
from shared.engine.operators import (
    MAX_CLAUSE_PROGRAM_SIZE,
    MAX_MATCHED_LENGTH,
    MAX_RULES_PROGRAM_SIZE,
    program_size,
)

from .builders import clause, flag, rule, segment, segment_rule, snapshot
from .test_operators import matches


def test_a_catastrophic_pattern_answers_at_once() -> None:
    # with a backtracking engine this input takes hours (each more "a" doubles it); the suite's
    # timeout fails the test long before — RE2 answers in microseconds
    assert matches("matches", ["^(a+)+$"], "a" * 40 + "!") is False
    assert matches("matches", ["^(a+)+$"], "a" * 40) is True
    assert matches("matches", ["(x+x+)+y"], "x" * 5000) is False


@pytest.mark.parametrize("pattern", ["(a)\\1", "(?=a)b", "(?<=a)b", "(?!a)", "a(?P=n)"])
def test_patterns_re2_cannot_run_are_refused_naming_the_value(pattern: str) -> None:
    with pytest.raises(CompileError) as info:
        compile_snapshot(
            snapshot(flag("f", rules=[rule(clause("email", "matches", "ok", pattern))]))
        )
    assert info.value.path == "flags.f.rules[0].clauses[0].values[1]"
    assert "RE2" in info.value.message


def test_an_attribute_past_the_bound_never_matches() -> None:
    assert matches("matches", ["b"], "a" * (MAX_MATCHED_LENGTH - 1) + "b") is True
    assert matches("matches", ["b"], "a" * MAX_MATCHED_LENGTH + "b") is False
    assert matches("matches", ["b"], "a" * MAX_MATCHED_LENGTH + "b", negate=True) is True


def test_a_string_utf8_cannot_carry_is_searched_not_an_error() -> None:
    # a surrogate-escaped file name (os.fsdecode) holds lone surrogates, which UTF-8 cannot carry:
    # each is one character, as for Python's re (the binding's own encoding raised, so a server
    # client evaluating locally got an ERROR; the ``matches`` helper fails on one)
    assert matches("matches", ["b$"], "a\udcffb") is True
    assert matches("matches", ["^a.b$"], "a\udcffb") is True
    assert matches("matches", ["^a$"], "\udcff") is False
    assert matches("matches", ["^a$"], "\udcff", negate=True) is True


@pytest.mark.parametrize("pattern", [".{1000}x", "(.{0,200}){5}x", "\\pL{2,50}x"])
def test_patterns_too_large_to_run_in_a_few_milliseconds_are_refused(pattern: str) -> None:
    """Found from outside: RE2 accepts these, and a 16 KiB attribute took 20 to 60 ms each."""
    with pytest.raises(CompileError) as info:
        compile_snapshot(snapshot(flag("f", rules=[rule(clause("email", "matches", pattern))])))
    assert info.value.path == "flags.f.rules[0].clauses[0].values[0]"
    assert "RE2 instructions" in info.value.message


def test_an_arrays_strings_count_together_against_the_bound() -> None:
    """An array attribute is searched element by element: without a shared budget, a 1 MiB body
    of 16 KiB strings would make one clause search all of it."""
    element = "a" * (MAX_MATCHED_LENGTH // 4)
    assert matches("matches", ["b"], [element, element, element, "b"]) is True
    assert matches("matches", ["b"], [element] * 4 + ["b"]) is False
    assert matches("matches", ["b"], [element] * 4 + ["b"], negate=True) is True
    assert matches("matches", ["^a+$"], [element] * 100) is False


# Found from outside (issue #33): RE2 accepted these, and a 16 KiB a/b attribute took seconds: the
# pattern's DFA has 2^400 states, so RE2 runs out of DFA memory and falls back to its NFA, whose
# time is the attribute's length times the program's size, once per pattern of the clause.
BLOWUP = "[ab]*a[ab]{400}c"
SMALL_BLOWUP = "[ab]*a[ab]{40}c"


def _refused(*rules: Any) -> CompileError:
    with pytest.raises(CompileError) as info:
        compile_snapshot(snapshot(flag("f", rules=list(rules))))
    return info.value


def test_a_pattern_whose_dfa_cannot_fit_is_refused_naming_the_value() -> None:
    error = _refused(rule(clause("email", "matches", "ok", BLOWUP)))
    assert error.path == "flags.f.rules[0].clauses[0].values[1]"
    assert "RE2 instructions" in error.message


def test_a_clause_whose_patterns_add_up_past_the_budget_is_refused() -> None:
    error = _refused(rule(clause("email", "matches", *[SMALL_BLOWUP] * 50)))
    assert error.path.startswith("flags.f.rules[0].clauses[0].values[")
    assert f"at most {MAX_CLAUSE_PROGRAM_SIZE}" in error.message


def test_a_flag_whose_patterns_add_up_past_the_budget_is_refused() -> None:
    per_clause = MAX_CLAUSE_PROGRAM_SIZE // program_size(SMALL_BLOWUP)
    clauses = [clause(f"a{i}", "matches", *[SMALL_BLOWUP] * per_clause) for i in range(40)]
    error = _refused(*(rule(c, id=f"r{i}") for i, c in enumerate(clauses)))
    assert error.path.startswith("flags.f.rules[")
    assert f"at most {MAX_RULES_PROGRAM_SIZE}" in error.message


def test_a_segment_whose_patterns_add_up_past_the_budget_is_refused() -> None:
    per_clause = MAX_CLAUSE_PROGRAM_SIZE // program_size(SMALL_BLOWUP)
    rules = [
        segment_rule(clause(f"a{i}", "matches", *[SMALL_BLOWUP] * per_clause), id=f"s{i}")
        for i in range(40)
    ]
    with pytest.raises(CompileError) as info:
        compile_snapshot(snapshot(segments=[segment("s", rules=rules)]))
    assert info.value.path.startswith("segments.s.rules[")
    assert f"at most {MAX_RULES_PROGRAM_SIZE}" in info.value.message
