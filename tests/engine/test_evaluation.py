"""Resolution order, reasons, prerequisites, contexts and evaluate_all."""

from __future__ import annotations

from typing import Any

import pytest

from shared.engine import (
    ErrorKind,
    Evaluation,
    Reason,
    evaluate,
    evaluate_all,
    ofrep_error_code,
    openfeature_reason,
)

from .builders import clause, environment, flag, rule

VALUES = ("off", "fall", "a", "b")


def colours(key: str = "f", **kwargs: Any) -> Any:
    kwargs.setdefault("variations", VALUES)
    kwargs.setdefault("names", ("Off", "Fall", "A", "B"))
    kwargs.setdefault("off", 0)
    return flag(key, **kwargs)


def test_disabled_flag_serves_off_variation_and_ignores_everything_else() -> None:
    env = environment(
        colours(enabled=False, targets=[(2, ["k"])], rules=[rule(to=3)], fallthrough=1)
    )
    result = evaluate(env, "f", {"key": "k"}, 0)
    assert result == Evaluation(Reason.OFF, value="off", variation=0, variation_name="Off")


def test_targets_come_before_rules_and_first_target_wins() -> None:
    env = environment(
        colours(targets=[(2, ["k1", "k2"]), (3, ["k2", "k3"])], rules=[rule(to=1)], fallthrough=1)
    )
    assert evaluate(env, "f", {"key": "k1"}, 0).value == "a"
    assert evaluate(env, "f", {"key": "k2"}, 0).value == "a"
    target = evaluate(env, "f", {"key": "k3"}, 0)
    assert (target.reason, target.value, target.variation, target.variation_name) == (
        Reason.TARGET_MATCH,
        "b",
        3,
        "B",
    )
    assert evaluate(env, "f", {"key": "k4"}, 0).reason is Reason.RULE_MATCH


def test_first_matching_rule_wins_with_index_and_id() -> None:
    env = environment(
        colours(
            rules=[
                rule(clause("plan", "in", "pro"), to=2, id="pro-users"),
                rule(clause("country", "in", "US"), to=3, id="us-users"),
            ],
            fallthrough=1,
        )
    )
    both = evaluate(env, "f", {"key": "k", "plan": "pro", "country": "US"}, 0)
    assert (both.reason, both.rule_index, both.rule_id, both.value) == (
        Reason.RULE_MATCH,
        0,
        "pro-users",
        "a",
    )
    second = evaluate(env, "f", {"key": "k", "country": "US"}, 0)
    assert (second.rule_index, second.rule_id, second.value) == (1, "us-users", "b")
    neither = evaluate(env, "f", {"key": "k"}, 0)
    assert neither == Evaluation(
        Reason.FALLTHROUGH, value="fall", variation=1, variation_name="Fall"
    )


def test_rule_rollout_sets_in_rollout() -> None:
    env = environment(colours(rules=[rule(to=[(2, 50_000), (3, 50_000)], id="split")]))
    seen = {evaluate(env, "f", {"key": f"user-{i}"}, 0).value for i in range(50)}
    result = evaluate(env, "f", {"key": "user-1"}, 0)
    assert seen == {"a", "b"}
    assert (result.reason, result.rule_id, result.in_rollout) == (Reason.RULE_MATCH, "split", True)


def test_evaluations_are_shared_not_rebuilt() -> None:
    env = environment(colours(fallthrough=1))
    assert evaluate(env, "f", {"key": "a"}, 0) is evaluate(env, "f", {"key": "b"}, 0)


# ------------------------------------------------------------------------------ prerequisites


def _prereq_env(**prereq: Any) -> Any:
    prereq.setdefault("rules", [rule(clause("beta", "in", True), to=0)])
    return environment(
        flag("parent", **prereq),
        colours("child", prerequisites=[("parent", 0)], rules=[rule(to=2)]),
    )


def test_prerequisite_met_lets_the_flag_evaluate() -> None:
    env = _prereq_env()
    result = evaluate(env, "child", {"key": "k", "beta": True}, 0)
    assert (result.reason, result.value) == (Reason.RULE_MATCH, "a")


def test_prerequisite_serving_another_variation_fails() -> None:
    env = _prereq_env()
    result = evaluate(env, "child", {"key": "k", "beta": False}, 0)
    assert result == Evaluation(
        Reason.PREREQUISITE_FAILED,
        value="off",
        variation=0,
        variation_name="Off",
        prerequisite_key="parent",
    )


def test_prerequisite_that_is_off_fails_even_when_its_off_variation_is_required() -> None:
    env = _prereq_env(enabled=False, off=0)
    result = evaluate(env, "child", {"key": "k", "beta": True}, 0)
    assert (result.reason, result.prerequisite_key) == (Reason.PREREQUISITE_FAILED, "parent")


def test_unknown_prerequisite_fails() -> None:
    env = environment(colours("child", prerequisites=[("gone", 0)], fallthrough=1))
    result = evaluate(env, "child", {"key": "k"}, 0)
    assert (result.reason, result.prerequisite_key, result.value) == (
        Reason.PREREQUISITE_FAILED,
        "gone",
        "off",
    )


def test_prerequisites_are_checked_in_order_and_recursively() -> None:
    env = environment(
        flag("p1", rules=[rule(clause("p1", "in", True), to=0)]),
        flag("p2", rules=[rule(clause("p2", "in", True), to=0)]),
        flag("p3", prerequisites=[("p1", 0), ("p2", 0)], rules=[rule(to=0)]),
        colours("child", prerequisites=[("p3", 0)], fallthrough=1),
    )

    def failed(**attributes: Any) -> str | None:
        return evaluate(env, "child", {"key": "k", **attributes}, 0).prerequisite_key

    assert failed(p1=True, p2=True) is None
    assert evaluate(env, "child", {"key": "k", "p1": True, "p2": True}, 0).value == "fall"
    assert failed(p1=True, p2=False) == "p3"  # a transitive failure names the direct prerequisite
    assert evaluate(env, "p3", {"key": "k", "p1": False, "p2": True}, 0).prerequisite_key == "p1"
    assert evaluate(env, "p3", {"key": "k", "p1": True}, 0).prerequisite_key == "p2"


def test_disabled_flag_does_not_check_its_prerequisites() -> None:
    env = environment(colours("child", enabled=False, prerequisites=[("gone", 0)]))
    assert evaluate(env, "child", {"key": "k"}, 0).reason is Reason.OFF


# ----------------------------------------------------------------------------------- contexts


def test_targeting_key_stands_in_for_key() -> None:
    env = environment(colours(targets=[(2, ["tk"])]))
    assert evaluate(env, "f", {"targetingKey": "tk"}, 0).reason is Reason.TARGET_MATCH
    assert evaluate(env, "f", {"key": "", "targetingKey": "tk"}, 0).reason is Reason.TARGET_MATCH
    assert evaluate(env, "f", {"key": "k", "targetingKey": "tk"}, 0).reason is Reason.FALLTHROUGH


@pytest.mark.parametrize(
    "context",
    [{}, {"key": ""}, {"key": None}, {"key": 5}, {"targetingKey": ""}, {"country": "US"}, None, 3],
)
def test_context_without_a_key_is_an_error(context: Any) -> None:
    env = environment(colours(enabled=False))
    result = evaluate(env, "f", context, 0)
    assert result == Evaluation(Reason.ERROR, error_kind=ErrorKind.USER_NOT_SPECIFIED)
    assert evaluate_all(env, context, 0) == {"f": result}


def test_unknown_flag() -> None:
    result = evaluate(environment(), "nope", {"key": "k"}, 0)
    assert (result.reason, result.error_kind, result.value) == (
        Reason.ERROR,
        ErrorKind.FLAG_NOT_FOUND,
        None,
    )


def test_context_checked_before_flag_lookup_like_launchdarkly() -> None:
    result = evaluate(environment(), "nope", {}, 0)
    assert result.error_kind is ErrorKind.USER_NOT_SPECIFIED


def test_a_broken_mapping_is_reported_not_raised() -> None:
    class Hostile(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            if key == "country":
                raise RuntimeError("boom")
            return super().get(key, default)

    env = environment(colours(rules=[rule(clause("country", "in", "US"))]))
    result = evaluate(env, "f", Hostile(key="k"), 0)
    assert (result.reason, result.error_kind) == (Reason.ERROR, ErrorKind.EXCEPTION)
    assert evaluate_all(env, Hostile(key="k"), 0)["f"].error_kind is ErrorKind.EXCEPTION


# ------------------------------------------------------------------------------- evaluate_all


def test_evaluate_all_and_client_side_only() -> None:
    env = environment(
        colours("public", fallthrough=2),
        colours("server-only", fallthrough=3, client_side=False),
        colours("off-flag", enabled=False),
    )
    everything = evaluate_all(env, {"key": "k"}, 0)
    assert {k: v.value for k, v in everything.items()} == {
        "public": "a",
        "server-only": "b",
        "off-flag": "off",
    }
    client = evaluate_all(env, {"key": "k"}, 0, client_side_only=True)
    assert set(client) == {"public", "off-flag"}
    assert client["public"] == everything["public"] == evaluate(env, "public", {"key": "k"}, 0)


# ---------------------------------------------------------------------------- OpenFeature map


@pytest.mark.parametrize(
    ("evaluation", "reason", "code"),
    [
        (Evaluation(Reason.OFF, value=1, variation=0), "DISABLED", None),
        (Evaluation(Reason.TARGET_MATCH, value=1, variation=0), "TARGETING_MATCH", None),
        (
            Evaluation(Reason.RULE_MATCH, value=1, variation=0, rule_index=0),
            "TARGETING_MATCH",
            None,
        ),
        (Evaluation(Reason.RULE_MATCH, value=1, variation=0, in_rollout=True), "SPLIT", None),
        (Evaluation(Reason.FALLTHROUGH, value=1, variation=0), "DEFAULT", None),
        (Evaluation(Reason.FALLTHROUGH, value=1, variation=0, in_rollout=True), "SPLIT", None),
        (Evaluation(Reason.PREREQUISITE_FAILED, value=1, prerequisite_key="p"), "DISABLED", None),
        (Evaluation(Reason.ERROR, error_kind=ErrorKind.FLAG_NOT_FOUND), "ERROR", "FLAG_NOT_FOUND"),
        (Evaluation(Reason.ERROR, error_kind=ErrorKind.MALFORMED_FLAG), "ERROR", "PARSE_ERROR"),
        (
            Evaluation(Reason.ERROR, error_kind=ErrorKind.USER_NOT_SPECIFIED),
            "ERROR",
            "TARGETING_KEY_MISSING",
        ),
        (Evaluation(Reason.ERROR, error_kind=ErrorKind.EXCEPTION), "ERROR", "GENERAL"),
    ],
)
def test_openfeature_mapping(evaluation: Evaluation, reason: str, code: str | None) -> None:
    assert openfeature_reason(evaluation) == reason
    assert ofrep_error_code(evaluation) == code
