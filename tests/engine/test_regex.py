"""``matches`` runs in time linear in the attribute whatever the pattern (found from outside: a
page stalled a relay's event loop with ``^(a+)+$`` and an email of many ``a`` then ``!``)."""

from __future__ import annotations

import pytest

from shared.engine import CompileError, compile_snapshot
from shared.engine.operators import MAX_MATCHED_LENGTH

from .builders import clause, flag, rule, snapshot
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
