"""What compiling refuses, and the path it names for each problem."""

from __future__ import annotations

from typing import Any

import pytest

from shared.engine import (
    CompileError,
    ErrorKind,
    Reason,
    compile_snapshot,
    evaluate,
    validate_flag,
    validate_segment,
)
from shared.wire.snapshot import Serve, Variation, WeightedVariation

from .builders import (
    clause,
    environment,
    flag,
    rule,
    segment,
    segment_clause,
    segment_rule,
    snapshot,
)

OK = clause("country", "in", "US")


def refused(*flags: Any, segments: Any = ()) -> CompileError:
    with pytest.raises(CompileError) as info:
        compile_snapshot(snapshot(*flags, segments=segments))
    return info.value


def with_clause(bad: Any) -> Any:
    return flag("my-flag", rules=[rule(OK, bad)])


@pytest.mark.parametrize(
    ("bad", "path"),
    [
        (clause("attr", "matches", "(unclosed"), "rules[0].clauses[1].values[0]"),
        (clause("attr", "matches", "ok", "[z-a]"), "rules[0].clauses[1].values[1]"),
        (clause("v", "semVerEqual", "1.0.0", "v2"), "rules[0].clauses[1].values[1]"),
        (clause("v", "semVerLessThan", "1.0.0.0"), "rules[0].clauses[1].values[0]"),
        (clause("v", "semVerGreaterThan", 2), "rules[0].clauses[1].values[0]"),
        (clause("d", "before", "2017-12-06"), "rules[0].clauses[1].values[0]"),
        (clause("d", "after", "1512543600000"), "rules[0].clauses[1].values[0]"),
        (clause("d", "after", True), "rules[0].clauses[1].values[0]"),
        (clause("d", "before", None), "rules[0].clauses[1].values[0]"),
        (clause("n", "lessThan", "5"), "rules[0].clauses[1].values[0]"),
        (clause("n", "greaterThan", 1, False), "rules[0].clauses[1].values[1]"),
        (clause("n", "lessThan", float("nan")), "rules[0].clauses[1].values[0]"),
        (clause("s", "startsWith", 5), "rules[0].clauses[1].values[0]"),
        (clause("s", "contains", None), "rules[0].clauses[1].values[0]"),
        (clause("s", "in", {1, 2}), "rules[0].clauses[1].values[0]"),
        (clause("s", "unsupportedOperator", "x"), "rules[0].clauses[1].op"),
        (clause(None, "in", "x"), "rules[0].clauses[1].attribute"),
        (clause("", "in", "x"), "rules[0].clauses[1].attribute"),
        (segment_clause("ok", 5), "rules[0].clauses[1].values[1]"),  # type: ignore[arg-type]
    ],
)
def test_bad_clauses_name_their_path(bad: Any, path: str) -> None:
    error = refused(with_clause(bad))
    assert error.path == f"flags.my-flag.{path}"
    assert str(error).startswith(f"flags.my-flag.{path}: ")
    with pytest.raises(CompileError) as relative:
        validate_flag(with_clause(bad), {}, {})
    assert (relative.value.path, relative.value.message) == (path, error.message)


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"off": 2}, "offVariation"),
        ({"off": -1}, "offVariation"),
        ({"fallthrough": 7}, "fallthrough.variation"),
        ({"targets": [(0, ["a"]), (9, ["b"])]}, "targets[1].variation"),
        ({"rules": [rule(OK, to=0), rule(OK, to=2)]}, "rules[1].serve.variation"),
        ({"fallthrough": [(0, 50_000), (2, 50_000)]}, "fallthrough.rollout[1].idx"),
        ({"fallthrough": [(0, 50_000), (1, 49_999)]}, "fallthrough.rollout"),
        ({"fallthrough": [(0, 100_001), (1, -1)]}, "fallthrough.rollout[1].weight"),
        ({"fallthrough": []}, "fallthrough.rollout"),
        ({"rules": [rule(OK, to=[(0, 1), (1, 1)])]}, "rules[0].serve.rollout"),
        ({"fallthrough": Serve()}, "fallthrough"),
        ({"rules": [rule(OK, to=Serve(variation=0, rollout=()))]}, "rules[0].serve"),
        ({"variations": (True, "x"), "type": "boolean"}, "variations[1].value"),
        ({"variations": (1, True), "type": "number"}, "variations[1].value"),
        ({"type": "colour"}, "type"),
        ({"variations": ()}, "variations"),
        ({"bucket_by": ""}, "bucketBy"),
    ],
)
def test_bad_serves_and_variations(changes: dict[str, Any], path: str) -> None:
    error = refused(flag("my-flag", **changes))
    assert error.path == f"flags.my-flag.{path}"


def test_duplicate_variation_index() -> None:
    bad = flag("my-flag")
    bad = type(bad)(
        **{
            **{f: getattr(bad, f) for f in bad.__struct_fields__},
            "variations": (Variation(0, True), Variation(0, False)),
        }
    )
    assert refused(bad).path == "flags.my-flag.variations[1].idx"


def test_variations_are_looked_up_by_idx_not_position() -> None:
    base = flag("sparse", off=5, fallthrough=[(5, 50_000), (9, 50_000)])
    sparse = type(base)(
        **{
            **{f: getattr(base, f) for f in base.__struct_fields__},
            "variations": (Variation(9, "nine"), Variation(5, "five")),
            "type": "string",
        }
    )
    env = compile_snapshot(snapshot(sparse))
    values = {evaluate(env, "sparse", {"key": f"u{i}"}, 0).variation for i in range(40)}
    assert values == {5, 9}


def test_map_key_must_match_flag_key() -> None:
    snap = snapshot(flag("a"))
    snap = type(snap)(project="p", environment="e", version=1, flags={"b": flag("a")}, segments={})
    assert refused_snapshot(snap).path == "flags.b.key"


def refused_snapshot(snap: Any) -> CompileError:
    with pytest.raises(CompileError) as info:
        compile_snapshot(snap)
    return info.value


def test_checks_do_not_depend_on_enabled() -> None:
    assert refused(flag("my-flag", enabled=False, rules=[rule(clause("a", "matches", "("))]))


# ------------------------------------------------------------------------------ prerequisites


def test_prerequisite_variation_must_exist_on_the_prerequisite() -> None:
    error = refused(flag("parent"), flag("child", prerequisites=[("parent", 2)]))
    assert error.path == "flags.child.prerequisites[0].variation"


def test_prerequisite_self_reference() -> None:
    error = refused(flag("a", prerequisites=[("a", 0)]))
    assert (error.path, error.message) == (
        "flags.a.prerequisites[0].key",
        "prerequisite cycle: a -> a",
    )


def test_prerequisite_cycle_is_refused() -> None:
    error = refused(
        flag("a", prerequisites=[("b", 0)]),
        flag("b", prerequisites=[("x", 0), ("c", 0)]),
        flag("c", prerequisites=[("a", 0)]),
        flag("x"),
    )
    assert error.path == "flags.c.prerequisites[0].key"
    assert error.message == "prerequisite cycle: a -> b -> c -> a"


def test_prerequisite_chains_are_limited_to_32() -> None:
    def chain(n: int) -> list[Any]:
        return [
            flag(f"f{i}", prerequisites=[(f"f{i + 1}", 0)] if i < n - 1 else []) for i in range(n)
        ]

    env = compile_snapshot(snapshot(*chain(32)))
    assert evaluate(env, "f0", {"key": "k"}, 0).reason is Reason.PREREQUISITE_FAILED
    error = refused(*reversed(chain(33)))  # order of the map does not matter
    assert error.path == "flags.f0.prerequisites[0].key"
    assert "nested more than 32 deep" in error.message


def test_validate_flag_sees_cycles_through_other_flags() -> None:
    others = {"b": flag("b", prerequisites=[("c", 0)]), "c": flag("c", prerequisites=[("a", 0)])}
    with pytest.raises(CompileError) as info:
        validate_flag(flag("a", prerequisites=[("x", 0), ("b", 0)]), {}, others)
    assert (info.value.path, info.value.message) == (
        "prerequisites[1].key",
        "prerequisite cycle: a -> b -> c -> a",
    )
    # A stale copy of the flag itself in ``flags`` is replaced by the one being validated.
    validate_flag(flag("c"), {}, {**others, "a": flag("a", prerequisites=[("b", 0)])})


def test_validate_flag_accepts_a_good_flag_and_unknown_references() -> None:
    good = flag(
        "g",
        prerequisites=[("elsewhere", 0)],
        rules=[rule(segment_clause("missing-segment")), rule(OK, to=[(0, 50_000), (1, 50_000)])],
    )
    validate_flag(good, {}, {})


# ----------------------------------------------------------------------------------- segments


def test_segment_cycle_is_refused() -> None:
    error = refused(
        flag("f", rules=[rule(segment_clause("a"))]),
        segments=[
            segment("a", rules=[segment_rule(segment_clause("b"))]),
            segment("b", rules=[segment_rule(clause("x", "in", 1), segment_clause("a"))]),
        ],
    )
    assert (error.path, error.message) == (
        "segments.b.rules[0].clauses[1].values[0]",
        "segment cycle: a -> b -> a",
    )


def test_bad_segment_clause_path() -> None:
    error = refused(
        segments=[segment("s", rules=[segment_rule(OK, clause("v", "semVerEqual", "x"))])]
    )
    assert error.path == "segments.s.rules[0].clauses[1].values[0]"
    with pytest.raises(CompileError) as info:
        validate_segment(
            segment("s", rules=[segment_rule(OK, clause("v", "semVerEqual", "x"))]), {}
        )
    assert info.value.path == "rules[0].clauses[1].values[0]"


@pytest.mark.parametrize(
    ("weight", "ok"), [(0, True), (100_000, True), (100_001, False), (-1, False)]
)
def test_segment_rule_weight_range(weight: int, ok: bool) -> None:
    seg = segment("s", rules=[segment_rule(weight=weight)])
    if ok:
        validate_segment(seg, {})
    else:
        with pytest.raises(CompileError) as info:
            validate_segment(seg, {})
        assert info.value.path == "rules[0].weight"


def test_validate_segment_sees_cycles() -> None:
    others = {"b": segment("b", rules=[segment_rule(segment_clause("a"))])}
    with pytest.raises(CompileError) as info:
        validate_segment(segment("a", rules=[segment_rule(segment_clause("b"))]), others)
    assert (info.value.path, info.value.message) == (
        "rules[0].clauses[0].values[0]",
        "segment cycle: a -> b -> a",
    )


# ------------------------------------------------------------------------------ lenient mode


def test_lenient_compile_isolates_malformed_flags() -> None:
    env = environment(
        flag("good", fallthrough=0),
        flag("bad", rules=[rule(clause("a", "matches", "("))]),
        flag("needs-bad", prerequisites=[("bad", 0)]),
        flag("uses-bad-segment", rules=[rule(segment_clause("broken"))]),
        segments=[segment("broken", rules=[segment_rule(clause("d", "before", "yesterday"))])],
        strict=False,
    )
    context = {"key": "k"}
    assert evaluate(env, "good", context, 0).value is True
    for key in ("bad", "needs-bad", "uses-bad-segment"):
        result = evaluate(env, key, context, 0)
        assert (result.reason, result.error_kind) == (Reason.ERROR, ErrorKind.MALFORMED_FLAG)
        assert env.flags[key].error is not None
    assert sorted(e.path for e in env.errors) == [
        "flags.bad.rules[0].clauses[0].values[0]",
        "segments.broken.rules[0].clauses[0].values[0]",
    ]


def test_rollout_serve_must_be_weighted_variations() -> None:
    bad = Serve(rollout=(WeightedVariation(0, 100_000), "x"))  # type: ignore[arg-type]
    assert refused(flag("my-flag", fallthrough=bad)).path == "flags.my-flag.fallthrough.rollout[1]"
