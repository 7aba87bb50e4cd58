"""Context kinds and attribute references (issue #23), as a rule's author sees them."""

from __future__ import annotations

from typing import Any

import pytest

from shared.engine import CompileError, ErrorKind, Reason, compile_snapshot, evaluate
from shared.wire.snapshot import (
    Clause,
    ContextKeys,
    FlagSnapshot,
    Rule,
    SegmentSnapshot,
    Serve,
    Snapshot,
    Target,
    Variation,
    WeightedVariation,
)


def _env(*rules: Rule, targets: tuple[Target, ...] = (), fallthrough: Serve | None = None) -> Any:
    flag = FlagSnapshot(
        key="f",
        version=1,
        type="string",
        variations=(Variation(0, "off"), Variation(1, "on"), Variation(2, "other")),
        enabled=True,
        off_variation=0,
        fallthrough=fallthrough or Serve(variation=0),
        rules=rules,
        targets=targets,
    )
    segment = SegmentSnapshot(
        key="big-accounts",
        version=1,
        included_contexts=(ContextKeys("organization", ("acme",)),),
    )
    return compile_snapshot(Snapshot("p", "e", 1, {"f": flag}, {"big-accounts": segment}))


def _on(attribute: str, values: tuple[Any, ...], kind: str = "user", op: str = "in") -> Rule:
    clause = Clause(op=op, attribute=attribute, values=values, context_kind=kind)
    return Rule(id="r", clauses=(clause,), serve=Serve(variation=1))


ENTERPRISE_USER = {
    "kind": "multi",
    "user": {"key": "u1", "email": "a@example.com"},
    "organization": {"key": "acme", "plan": "enterprise", "address": {"city": "Lyon"}},
}


def test_a_rule_on_the_organization_reads_the_organization_of_a_multi_kind_context() -> None:
    env = _env(_on("plan", ("enterprise",), "organization"))
    assert evaluate(env, "f", ENTERPRISE_USER, 0).value == "on"
    # the same attribute on the user (or a user without an organization) is not the organization's
    assert evaluate(env, "f", {"key": "u1", "plan": "enterprise"}, 0).value == "off"
    single = {"kind": "organization", "key": "acme", "plan": "enterprise"}
    assert evaluate(env, "f", single, 0).value == "on"


def test_a_rule_on_a_kind_the_context_lacks_never_matches_even_negated() -> None:
    def not_free(kind: str) -> Rule:
        clause = Clause(op="in", attribute="plan", values=("free",), negate=True, context_kind=kind)
        return Rule(id="r", clauses=(clause,), serve=Serve(variation=1))

    on_org = _env(not_free("organization"))
    assert evaluate(on_org, "f", {"key": "u1", "plan": "enterprise"}, 0).value == "off"
    assert evaluate(on_org, "f", ENTERPRISE_USER, 0).value == "on"
    on_user = _env(not_free("user"))  # against an organization alone: no user, no match
    assert (
        evaluate(on_user, "f", {"kind": "organization", "key": "acme", "plan": "x"}, 0).value
        == "off"
    )


def test_attribute_references_read_into_nested_objects_with_escapes() -> None:
    env = _env(_on("/address/city", ("Lyon",), "organization"))
    assert evaluate(env, "f", ENTERPRISE_USER, 0).value == "on"
    escaped = _env(_on("/a~1b/c~0d", (1,)))
    assert evaluate(escaped, "f", {"key": "u", "a/b": {"c~d": 1}}, 0).value == "on"
    assert evaluate(escaped, "f", {"key": "u", "a/b": 1}, 0).value == "off"
    literal = _env(_on("a/b", (1,)))  # no leading slash: one literal name
    assert evaluate(literal, "f", {"key": "u", "a/b": 1}, 0).value == "on"


def test_a_rule_written_before_kinds_reads_its_attribute_as_a_literal_name() -> None:
    """No ``contextKind``: the user, and the attribute as it always was (``/`` included), so
    stored rules and old snapshots keep their meaning."""
    old = Rule(id="r", clauses=(Clause(op="in", attribute="/", values=(1,)),), serve=Serve(1))
    env = _env(old)
    assert evaluate(env, "f", {"key": "u", "/": 1}, 0).value == "on"
    assert evaluate(env, "f", {"kind": "organization", "key": "o", "/": 1}, 0).value == "off"


@pytest.mark.parametrize("reference", ["/", "//x", "/x/", "/a~2b", "/~"])
def test_a_malformed_reference_is_a_compile_error_naming_the_field(reference: str) -> None:
    with pytest.raises(CompileError) as refused:
        _env(_on(reference, ("x",)))
    assert refused.value.path == "flags.f.rules[0].clauses[0].attribute"
    assert "malformed attribute reference" in refused.value.message


def test_anonymous_is_false_when_absent_in_every_kind() -> None:
    env = _env(_on("anonymous", (False,), "organization"))
    assert evaluate(env, "f", ENTERPRISE_USER, 0).value == "on"
    assert evaluate(env, "f", {"key": "u1"}, 0).value == "off"  # no organization at all


def test_targets_segments_and_rollouts_name_their_kind() -> None:
    targeted = _env(targets=(Target(2, ("acme",), "organization"), Target(1, ("u1",))))
    assert evaluate(targeted, "f", ENTERPRISE_USER, 0).reason is Reason.TARGET_MATCH
    assert evaluate(targeted, "f", ENTERPRISE_USER, 0).value == "other"  # the first listed
    assert evaluate(targeted, "f", {"key": "acme"}, 0).value == "off"  # a user named acme
    in_segment = _env(_on("", ("big-accounts",), op="segmentMatch"))
    assert evaluate(in_segment, "f", ENTERPRISE_USER, 0).value == "on"
    assert evaluate(in_segment, "f", {"key": "acme"}, 0).value == "off"
    split = Serve(
        rollout=(WeightedVariation(1, 50_000), WeightedVariation(2, 50_000)),
        context_kind="organization",
    )
    by_account = _env(fallthrough=split)
    served = {
        evaluate(by_account, "f", {**ENTERPRISE_USER, "user": {"key": f"u{i}"}}, 0).value
        for i in range(50)
    }
    assert len(served) == 1  # every user of one account gets the same variation


@pytest.mark.parametrize(
    "context",
    [
        {"kind": "multi"},
        {"kind": "multi", "user": {"name": "no key"}},
        {"kind": "multi", "user": "u1"},
        {"kind": "organization"},
    ],
)
def test_a_context_with_a_part_without_a_key_is_not_a_context(context: dict[str, Any]) -> None:
    result = evaluate(_env(), "f", context, 0)
    assert result.error_kind is ErrorKind.USER_NOT_SPECIFIED
