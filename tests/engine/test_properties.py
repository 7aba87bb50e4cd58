"""Properties: evaluation never raises on any context or snapshot; the wire format round-trips."""

from __future__ import annotations

import string
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.engine import (
    CompiledEnvironment,
    CompileError,
    ErrorKind,
    Evaluation,
    Reason,
    compile_snapshot,
    evaluate,
    evaluate_all,
)
from shared.engine.operators import OPERATORS
from shared.wire.protocol import Access, SnapshotMessage, decode_to_relay, encode
from shared.wire.snapshot import (
    Clause,
    ContextKeys,
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

from .builders import clause, environment, flag, rule, segment, segment_clause, segment_rule

ATTRIBUTES = ["key", "kind", "country", "plan", "age", "version", "signup", "email", "tags", "org"]

# Any text, lone surrogates included: contexts arrive from JSON, which can carry them.
any_text = st.text(st.characters(exclude_categories=()), max_size=12)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | any_text
    | st.sampled_from(["US", "pro", "1.2.3", "2017-12-06T07:00:00Z", "a@b.c", "", "42"])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)
contexts = (
    st.dictionaries(
        st.sampled_from([*ATTRIBUTES, "targetingKey"]) | any_text, json_values, max_size=8
    )
    | json_values
)


def rich_environment() -> CompiledEnvironment:
    """Every operator, segments (nested, weighted), prerequisites, targets and rollouts."""
    every_op = [
        clause("country", "in", "US", 1, True, None, [1, "x"], {"a": 1}),
        clause("email", "endsWith", "@b.c"),
        clause("email", "startsWith", "a"),
        clause("email", "contains", "@"),
        clause("email", "matches", "^[a-z]+@", negate=True),
        clause("age", "lessThan", 30),
        clause("age", "lessThanOrEqual", 30),
        clause("age", "greaterThan", 18, negate=True),
        clause("age", "greaterThanOrEqual", 18),
        clause("signup", "before", "2020-01-01T00:00:00Z"),
        clause("signup", "after", 0),
        clause("version", "semVerEqual", "1.2.3"),
        clause("version", "semVerLessThan", "2"),
        clause("version", "semVerGreaterThan", "1.0.0-rc.1"),
        clause("kind", "in", "user"),
        clause("tags", "in", "beta", negate=True),
        segment_clause("outer", "missing"),
    ]
    rules = [rule(c, to=i % 3, id=f"r{i}") for i, c in enumerate(every_op)]
    rules.append(rule(clause("plan", "in", "pro"), to=[(0, 30_000), (1, 30_000), (2, 40_000)]))
    return environment(
        flag(
            "base",
            variations=("x", "y", "z"),
            fallthrough=[(0, 50_000), (2, 50_000)],
            bucket_by="org",
        ),
        flag(
            "rich",
            variations=("x", "y", "z"),
            targets=[(1, ["t1", "t2"])],
            prerequisites=[("base", 0)],
            rules=rules,
            fallthrough=[(0, 50_000), (1, 50_000)],
        ),
        flag("by-key", fallthrough=[(0, 50_000), (1, 50_000)], rules=rules[:2]),
        flag("by-version", fallthrough=[(0, 20_000), (1, 80_000)], bucket_by="version"),
        segments=[
            segment(
                "outer",
                included=["in"],
                excluded=["out"],
                rules=[segment_rule(segment_clause("inner"), clause("age", "greaterThan", 1))],
            ),
            segment(
                "inner",
                rules=[segment_rule(clause("country", "in", "US"), weight=50_000, bucket_by="org")],
            ),
        ],
    )


RICH = rich_environment()


def check(result: Any) -> None:
    assert isinstance(result, Evaluation)
    assert result.error_kind is not ErrorKind.EXCEPTION, "the engine hit an unexpected error"
    if result.reason is Reason.ERROR:
        assert result.variation is None
    else:
        assert result.variation is not None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(context=contexts, key=st.sampled_from(["rich", "base", "by-key", "by-version", "nope"]))
def test_evaluate_never_raises_on_any_context(context: Any, key: str) -> None:
    check(evaluate(RICH, key, context, 0))
    everything = evaluate_all(RICH, context, 0)
    assert set(everything) == {"rich", "base", "by-key", "by-version"}
    for result in everything.values():
        check(result)


@settings(max_examples=200, deadline=None)
@given(
    context=st.fixed_dictionaries(
        {"key": any_text.filter(bool)},
        optional={
            **dict.fromkeys(ATTRIBUTES[2:], json_values),
            "kind": st.none() | st.sampled_from(["user", "organization", "device.v2"]),
        },
    )
)
def test_valid_keys_never_error(context: dict[str, Any]) -> None:
    for result in evaluate_all(RICH, context, 0).values():
        assert result.reason is not Reason.ERROR


@pytest.mark.parametrize("kind", [5, "", "multi", "kind", "has space", ["user"]])
def test_a_kind_that_cannot_be_is_a_context_without_a_key(kind: Any) -> None:
    """As in LaunchDarkly: a context whose ``kind`` names no possible kind is not a context."""
    for result in evaluate_all(RICH, {"key": "u1", "kind": kind}, 0).values():
        assert result.error_kind is ErrorKind.USER_NOT_SPECIFIED


# ----------------------------------------------------------------------------- random snapshots

KEYS = st.sampled_from(["a", "b", "c", "d"])
idx = st.integers(-1, 3)


@st.composite
def serves(draw: st.DrawFn) -> Serve:
    kind = draw(st.sampled_from(["variation", "rollout", "both", "neither"]))
    rollout = tuple(
        WeightedVariation(draw(idx), w)
        for w in draw(st.sampled_from([[100_000], [50_000, 50_000], [1, 1], [], [-5, 100_005]]))
    )
    return Serve(
        variation=draw(idx) if kind in ("variation", "both") else None,
        rollout=rollout if kind in ("rollout", "both") else None,
        bucket_by=draw(st.none() | st.sampled_from(ATTRIBUTES + REFERENCES)),
        context_kind=draw(RULE_KINDS),
    )


# Kinds a rule may read (two real ones, and two that cannot be), and attribute references.
RULE_KINDS = st.sampled_from([None, "user", "organization", "multi", ""])
REFERENCES = ["/org/plan", "/tags", "/anonymous", "/", "/a~2b", "anonymous"]
clauses = st.builds(
    Clause,
    op=st.sampled_from(sorted(OPERATORS)) | st.sampled_from(["", "nope"]),
    attribute=st.none() | st.sampled_from(ATTRIBUTES + REFERENCES),
    values=st.lists(json_values | KEYS, max_size=3).map(tuple),
    negate=st.booleans(),
    context_kind=RULE_KINDS,
)
flags = st.builds(
    FlagSnapshot,
    key=KEYS,
    version=st.integers(0, 5),
    type=st.sampled_from(["boolean", "string", "number", "json"]),
    variations=st.lists(
        st.builds(Variation, idx=st.integers(0, 3), value=json_values), max_size=3
    ).map(tuple),
    enabled=st.booleans(),
    off_variation=idx,
    fallthrough=serves(),
    rules=st.lists(
        st.builds(
            Rule,
            id=st.text(string.ascii_letters, max_size=3),
            clauses=st.lists(clauses, max_size=3).map(tuple),
            serve=serves(),
        ),
        max_size=3,
    ).map(tuple),
    targets=st.lists(
        st.builds(
            Target,
            variation=idx,
            values=st.lists(any_text | KEYS, max_size=3).map(tuple),
            context_kind=RULE_KINDS,
        ),
        max_size=2,
    ).map(tuple),
    prerequisites=st.lists(st.builds(Prerequisite, key=KEYS, variation=idx), max_size=2).map(tuple),
    bucket_by=st.sampled_from(ATTRIBUTES),
    salt=st.none() | any_text,
    client_side=st.booleans(),
)
segments = st.builds(
    SegmentSnapshot,
    key=KEYS,
    version=st.just(1),
    included=st.lists(any_text | KEYS, max_size=2).map(tuple),
    excluded=st.lists(any_text | KEYS, max_size=2).map(tuple),
    included_contexts=st.lists(
        st.builds(ContextKeys, context_kind=RULE_KINDS, values=st.lists(KEYS).map(tuple)),
        max_size=2,
    ).map(tuple),
    excluded_contexts=st.lists(
        st.builds(ContextKeys, context_kind=RULE_KINDS, values=st.lists(KEYS).map(tuple)),
        max_size=2,
    ).map(tuple),
    rules=st.lists(
        st.builds(
            SegmentRule,
            id=st.just("s"),
            clauses=st.lists(clauses, max_size=2).map(tuple),
            weight=st.none() | st.integers(-1, 100_001),
            bucket_by=st.none() | st.sampled_from(ATTRIBUTES + REFERENCES),
            context_kind=RULE_KINDS,
        ),
        max_size=2,
    ).map(tuple),
)
snapshots = st.builds(
    Snapshot,
    project=st.just("p"),
    environment=st.just("e"),
    version=st.integers(0, 10),
    flags=st.lists(flags, max_size=4).map(lambda fs: {f.key: f for f in fs}),
    segments=st.lists(segments, max_size=3).map(lambda ss: {s.key: s for s in ss}),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots, context=contexts)
def test_random_snapshots_compile_or_refuse_and_never_raise(
    snapshot: Snapshot, context: Any
) -> None:
    try:
        strict = compile_snapshot(snapshot)
    except CompileError:
        strict = None
    lenient = compile_snapshot(snapshot, strict=False)
    if strict is not None:
        assert lenient.errors == ()
    else:
        assert lenient.errors
    for env in filter(None, (strict, lenient)):
        for key in [*snapshot.flags, "zz"]:
            check(evaluate(env, key, context, 0))
        for result in evaluate_all(env, context, 0, client_side_only=True).values():
            check(result)


# Valid flags whose rules often match: every clause, target, rollout and segment reads a kind.
A_KIND = st.sampled_from([None, "user", "organization"])  # None: a rule written before kinds
kinded_clauses = st.builds(
    Clause,
    op=st.just("in"),
    attribute=st.sampled_from(["key", "plan", "/org/plan", "anonymous", "kind"]),
    values=st.lists(KEYS | st.booleans() | st.just("organization"), min_size=1, max_size=3).map(
        tuple
    ),
    negate=st.booleans(),
    context_kind=A_KIND,
)
segment_match = st.builds(
    Clause, op=st.just("segmentMatch"), values=st.lists(KEYS, min_size=1).map(tuple)
)
kinded_serves = st.builds(Serve, variation=st.integers(0, 1)) | st.builds(
    Serve,
    rollout=st.just((WeightedVariation(0, 50_000), WeightedVariation(1, 50_000))),
    bucket_by=st.sampled_from([None, "plan", "/org/plan"]),
    context_kind=A_KIND,
)
kinded_flags = st.builds(
    FlagSnapshot,
    key=KEYS,
    version=st.just(1),
    type=st.just("boolean"),
    variations=st.just((Variation(0, False), Variation(1, True))),
    enabled=st.just(True),
    off_variation=st.just(0),
    fallthrough=kinded_serves,
    rules=st.lists(
        st.builds(
            Rule,
            id=st.just("r"),
            clauses=st.lists(kinded_clauses | segment_match, min_size=1, max_size=2).map(tuple),
            serve=kinded_serves,
        ),
        max_size=3,
    ).map(tuple),
    targets=st.lists(
        st.builds(
            Target,
            variation=st.integers(0, 1),
            values=st.lists(KEYS, min_size=1, max_size=2).map(tuple),
            context_kind=A_KIND,
        ),
        max_size=2,
    ).map(tuple),
)
kinded_segments = st.builds(
    SegmentSnapshot,
    key=KEYS,
    version=st.just(1),
    included=st.lists(KEYS, max_size=1).map(tuple),
    excluded=st.lists(KEYS, max_size=1).map(tuple),
    included_contexts=st.lists(
        st.builds(ContextKeys, context_kind=A_KIND, values=st.lists(KEYS).map(tuple)),
        max_size=1,
    ).map(tuple),
    excluded_contexts=st.lists(
        st.builds(ContextKeys, context_kind=A_KIND, values=st.lists(KEYS).map(tuple)),
        max_size=1,
    ).map(tuple),
    rules=st.lists(
        st.builds(
            SegmentRule,
            id=st.just("s"),
            clauses=st.lists(kinded_clauses, min_size=1, max_size=2).map(tuple),
            weight=st.none() | st.just(50_000),
            bucket_by=st.sampled_from([None, "plan"]),
            context_kind=A_KIND,
        ),
        max_size=2,
    ).map(tuple),
)
kinded_snapshots = st.builds(
    Snapshot,
    project=st.just("p"),
    environment=st.just("e"),
    version=st.just(1),
    flags=st.lists(kinded_flags, min_size=1, max_size=4).map(lambda fs: {f.key: f for f in fs}),
    segments=st.lists(kinded_segments, max_size=3).map(lambda ss: {s.key: s for s in ss}),
)
# A part of one kind: a key rules may target, and the attributes rules read.
parts = st.fixed_dictionaries(
    {"key": KEYS},
    optional={
        "plan": KEYS,
        "anonymous": st.booleans(),
        "org": st.fixed_dictionaries({}, optional={"plan": KEYS}),
    },
)


def _same(env: Any, first: Any, second: Any) -> None:
    assert evaluate_all(env, first, 0) == evaluate_all(env, second, 0)
    for key in env.runs:
        assert evaluate(env, key, first, 0) == evaluate(env, key, second, 0)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=kinded_snapshots, user=parts, organization=parts, unrelated=parts)
def test_a_context_and_the_multi_kind_context_holding_it_evaluate_alike(
    snapshot: Snapshot, user: dict[str, Any], organization: dict[str, Any], unrelated: Any
) -> None:
    """Issue #23: a single-kind context evaluates as the multi-kind context holding only it, for
    every generated flag (rules, targets, rollouts and segments on either kind), and adding a
    kind no rule reads changes nothing."""
    env = compile_snapshot(snapshot, strict=False)
    _same(env, user, {"kind": "multi", "user": user})
    org = {**organization, "kind": "organization"}
    _same(env, org, {"kind": "multi", "organization": organization})
    clauses_ = [c for f in snapshot.flags.values() for r in f.rules for c in r.clauses]
    clauses_ += [c for s in snapshot.segments.values() for r in s.rules for c in r.clauses]
    if any(c.attribute == "kind" for c in clauses_):
        return  # a clause on ``kind`` reads every kind the context holds, related or not
    other = "unrelated"  # a kind no generated rule reads
    _same(env, {**user, "kind": "user"}, {"kind": "multi", "user": user, other: unrelated})
    both = {"kind": "multi", "user": user, "organization": organization}
    _same(env, both, {**both, other: unrelated})


# --------------------------------------------------------------------------------- wire format

wire_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)  # JSON has neither
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots, value=wire_json)
def test_snapshot_round_trips_through_msgpack(snapshot: Snapshot, value: Any) -> None:
    # Variation values and clause values are arbitrary JSON: use wire-safe ones.
    snapshot = msgspec.structs.replace(
        snapshot,
        flags={
            k: msgspec.structs.replace(
                f,
                variations=tuple(msgspec.structs.replace(v, value=value) for v in f.variations),
                rules=tuple(
                    msgspec.structs.replace(
                        r,
                        clauses=tuple(
                            msgspec.structs.replace(c, values=(value,)) for c in r.clauses
                        ),
                    )
                    for r in f.rules
                ),
                targets=tuple(msgspec.structs.replace(t, values=("k",)) for t in f.targets),
                salt=None,
            )
            for k, f in snapshot.flags.items()
        },
        segments={
            k: msgspec.structs.replace(s, included=("i",), excluded=(), rules=())
            for k, s in snapshot.segments.items()
        },
    )
    received = decode_to_relay(encode(SnapshotMessage(snapshot=snapshot, access=Access())))
    assert isinstance(received, SnapshotMessage)
    assert received.snapshot == snapshot
    assert msgspec.json.decode(msgspec.json.encode(snapshot), type=Snapshot) == snapshot


def test_wire_names_are_camel_case() -> None:
    encoded = msgspec.json.decode(
        msgspec.json.encode(flag("f", client_side=False, bucket_by="org"))
    )
    assert {"offVariation", "bucketBy", "clientSide"} <= set(encoded)


# The commonest targeted flag (one ``in`` rule, a percentage rollout for the rest) compiles to
# one closure; the same flag in shapes that are not fused (the clause twice, a rollout of three
# with an empty third) runs through the general closures. Both must answer alike.
_SAME_RULE = clause("country", "in", "US", "CA", "")
FUSED = environment(
    flag(
        "fused", salt="s", rules=[rule(_SAME_RULE, id="r")], fallthrough=[(0, 30_000), (1, 70_000)]
    ),
    flag(
        "plain",
        salt="s",
        rules=[rule(_SAME_RULE, _SAME_RULE, id="r")],
        fallthrough=[(0, 30_000), (1, 70_000), (1, 0)],
    ),
)


def test_the_fused_shape_is_the_one_compiled() -> None:
    assert FUSED.runs["fused"].__name__ == "in_rule_then_split_by_key"
    assert FUSED.runs["plain"].__name__ == "one_rule"


@settings(max_examples=400, deadline=None)
@given(
    context=st.fixed_dictionaries(
        {"key": any_text.filter(bool)},
        optional={"country": st.sampled_from(["US", "CA", "", "DE", 1]) | json_values},
    )
)
def test_the_fused_shape_answers_as_the_general_one(context: dict[str, Any]) -> None:
    fused = evaluate(FUSED, "fused", context, 0)
    plain = evaluate(FUSED, "plain", context, 0)
    fields = ("value", "variation", "reason", "rule_index", "rule_id", "in_rollout", "error_kind")
    assert [getattr(fused, f) for f in fields] == [getattr(plain, f) for f in fields]
