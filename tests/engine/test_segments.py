"""Segments: included, then excluded, then rules; nesting; weighted rules."""

from __future__ import annotations

from typing import Any

from shared.engine import Reason, bucket, evaluate

from .builders import clause, environment, flag, rule, segment, segment_clause, segment_rule


def in_segment(env: Any, key: str, flag_key: str = "f", **attributes: Any) -> bool:
    result = evaluate(env, flag_key, {"key": key, **attributes}, 0)
    assert result.reason in (Reason.RULE_MATCH, Reason.FALLTHROUGH), result
    return result.reason is Reason.RULE_MATCH


def one_segment_env(*segments: Any, negate: bool = False, keys: tuple[str, ...] = ("s",)) -> Any:
    return environment(flag(rules=[rule(segment_clause(*keys, negate=negate))]), segments=segments)


BETA = segment(
    "s",
    included=["in", "both"],
    excluded=["out", "both"],
    rules=[segment_rule(clause("beta", "in", True))],
)


def test_included_then_excluded_then_rules() -> None:
    env = one_segment_env(BETA)
    assert in_segment(env, "in")
    assert in_segment(env, "both")  # included is checked first
    assert not in_segment(env, "out", beta=True)  # excluded beats the rules
    assert in_segment(env, "someone", beta=True)
    assert not in_segment(env, "someone", beta=False)
    assert not in_segment(env, "someone")


def test_negated_segment_match() -> None:
    env = one_segment_env(BETA, negate=True)
    assert not in_segment(env, "in")
    assert in_segment(env, "someone")


def test_any_listed_segment_may_match() -> None:
    env = one_segment_env(BETA, segment("t", included=["t-member"]), keys=("s", "t"))
    assert in_segment(env, "t-member")
    assert in_segment(env, "in")
    assert not in_segment(env, "nobody")


def test_unknown_segment_does_not_match_and_is_not_an_error() -> None:
    env = one_segment_env(keys=("deleted",))
    assert not in_segment(env, "anyone")
    assert in_segment(one_segment_env(keys=("deleted",), negate=True), "anyone")


def test_segment_rules_all_clauses_and_any_rule() -> None:
    env = one_segment_env(
        segment(
            "s",
            rules=[
                segment_rule(clause("country", "in", "US"), clause("plan", "in", "pro")),
                segment_rule(clause("staff", "in", True)),
            ],
        )
    )
    assert in_segment(env, "k", country="US", plan="pro")
    assert not in_segment(env, "k", country="US", plan="free")
    assert in_segment(env, "k", staff=True)


def test_segments_can_reference_segments() -> None:
    env = one_segment_env(
        segment("s", rules=[segment_rule(segment_clause("inner"), clause("plan", "in", "pro"))]),
        segment("inner", included=["vip"], rules=[segment_rule(segment_clause("innermost"))]),
        segment("innermost", rules=[segment_rule(clause("country", "in", "FR"))]),
    )
    assert in_segment(env, "vip", plan="pro")
    assert not in_segment(env, "vip", plan="free")
    assert in_segment(env, "k", plan="pro", country="FR")
    assert not in_segment(env, "k", plan="pro", country="US")


def test_weighted_segment_rule_buckets_by_segment_key() -> None:
    env = one_segment_env(
        segment("s", rules=[segment_rule(clause("beta", "in", True), weight=30_000)])
    )
    keys = [f"user-{i}" for i in range(5_000)]
    inside = {k for k in keys if in_segment(env, k, beta=True)}
    assert inside == {k for k in keys if bucket("s", k) < 30_000}
    assert 1350 < len(inside) < 1650
    assert not any(in_segment(env, k, beta=False) for k in list(inside)[:50])


def test_weighted_segment_rule_salt_and_bucket_by() -> None:
    env = one_segment_env(
        segment(
            "s",
            salt="pepper",
            rules=[segment_rule(weight=50_000, bucket_by="org")],
        )
    )
    orgs = [f"org-{i}" for i in range(200)]
    expected = {o for o in orgs if bucket("pepper", o) < 50_000}
    assert {o for o in orgs if in_segment(env, "same-user", org=o)} == expected
    assert 70 < len(expected) < 130
    assert in_segment(env, "k")  # no org: bucket 0, which is inside any positive weight


def test_weight_zero_and_full() -> None:
    none = one_segment_env(segment("s", rules=[segment_rule(weight=0)]))
    everyone = one_segment_env(segment("s", rules=[segment_rule(weight=100_000)]))
    keys = [f"user-{i}" for i in range(200)]
    assert not any(in_segment(none, k) for k in keys)
    assert all(in_segment(everyone, k) for k in keys)
