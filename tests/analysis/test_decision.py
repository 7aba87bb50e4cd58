"""decide_winner: primary significant in its direction, no guardrail significantly harmed."""

from __future__ import annotations

from control_plane.analysis import Comparison, Moments, decide_winner, frequentist


def _c(arm: str, uplift: float | None, significant: bool, p: float = 0.01) -> Comparison:
    return Comparison(
        arm=arm,
        engine="frequentist",
        uplift=uplift,
        difference=None if uplift is None else uplift / 100,
        p_value=p,
        p_value_adjusted=p,
        significant=significant,
    )


def test_significant_improvement_wins() -> None:
    winner, reason = decide_winner({"b": _c("b", 5.0, True)}, {}, {})
    assert winner == "b"
    assert "+5.00%" in reason


def test_not_significant_means_no_winner() -> None:
    winner, reason = decide_winner({"b": _c("b", 5.0, False, p=0.2)}, {}, {})
    assert winner is None
    assert "no treatment" in reason


def test_direction_lower_wants_a_decrease() -> None:
    primary = {"b": _c("b", -4.0, True)}
    assert decide_winner(primary, {}, {}, primary_direction="lower")[0] == "b"
    assert decide_winner(primary, {}, {}, primary_direction="higher")[0] == "control"


def test_a_harmed_guardrail_blocks_the_win() -> None:
    primary = {"b": _c("b", 5.0, True)}
    guardrails = {"latency": {"b": _c("b", 8.0, True)}, "revenue": {"b": _c("b", -1.0, False)}}
    winner, reason = decide_winner(primary, guardrails, {"latency": "lower"})
    assert winner is None
    assert "latency" in reason
    # the same movement is fine when higher latency were good, or when not significant
    assert decide_winner(primary, guardrails, {"latency": "higher"})[0] == "b"
    guardrails["latency"]["b"] = _c("b", 8.0, False)
    assert decide_winner(primary, guardrails, {"latency": "lower"})[0] == "b"


def test_best_eligible_arm_wins() -> None:
    primary = {"b": _c("b", 3.0, True), "c": _c("c", 6.0, True), "d": _c("d", 9.0, True)}
    guardrails = {"errors": {"d": _c("d", 20.0, True)}}
    assert decide_winner(primary, guardrails, {"errors": "lower"})[0] == "c"


def test_control_wins_only_when_every_treatment_is_significantly_worse() -> None:
    assert decide_winner({"b": _c("b", -3.0, True), "c": _c("c", -5.0, True)})[0] == "control"
    assert decide_winner({"b": _c("b", -3.0, True), "c": _c("c", 1.0, False)})[0] is None


def test_degenerate_comparisons_never_win() -> None:
    assert decide_winner({"b": Comparison(arm="b", engine="frequentist", reason="x")})[0] is None
    assert decide_winner({})[0] is None


def test_end_to_end_with_the_frequentist_engine() -> None:
    control = Moments(10_000, 1_000, 1_000)
    primary = frequentist(
        control, {"b": Moments(10_000, 1_150, 1_150), "c": Moments(10_000, 1_010, 1_010)}
    ).comparisons
    winner, _ = decide_winner(primary)
    assert winner == "b"
