"""decide_winner: primary significant in its direction, no guardrail significantly harmed; and
verdict: when a fixed-horizon engine may say so (#35)."""

from __future__ import annotations

from control_plane.analysis import Comparison, Moments, decide_winner, frequentist, verdict


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


def test_a_fixed_horizon_verdict_waits_for_every_arm_to_reach_the_plan() -> None:
    primary = {"b": _c("b", 5.0, True), "c": _c("c", 1.0, False, p=0.3)}
    early = verdict(
        primary,
        engine="frequentist",
        exposed={"control": 5_000, "b": 6_000, "c": 4_000},
        planned_per_arm=4_500,
    )
    assert (early.state, early.winner) == ("not-yet", None)
    assert (early.planned_per_arm, early.reached_per_arm) == (4_500, 4_000)
    assert early.units_still_needed == 500  # only 'c' lacks units
    assert early.reason.startswith("not yet: 4,000 of the 4,500 units per variant planned")
    assert early.reading == decide_winner(primary)[1]
    reached = verdict(
        primary,
        engine="bayesian",
        exposed={"control": 4_500, "b": 4_500, "c": 4_500},
        planned_per_arm=4_500,
    )
    assert (reached.state, reached.winner, reached.units_still_needed) == ("winner", "b", 0)


def test_without_a_plan_or_below_the_minimum_the_verdict_waits_for_the_minimum() -> None:
    primary = {"b": _c("b", 5.0, True)}
    for plan in (None, 12):
        waiting = verdict(
            primary,
            engine="frequentist",
            exposed={"control": 999, "b": 2_000},
            planned_per_arm=plan,
        )
        assert (waiting.state, waiting.planned_per_arm, waiting.units_still_needed) == (
            "not-yet",
            1_000,
            1,
        )
    nothing = verdict(
        {"b": _c("b", 5.0, False, p=0.4)},
        engine="frequentist",
        exposed={"control": 1_000, "b": 1_000},
        planned_per_arm=None,
    )
    assert (nothing.state, nothing.winner) == ("no-winner", None)


def test_the_sequential_verdict_is_its_comparisons_at_any_look() -> None:
    primary = {"b": _c("b", 5.0, True)}
    guardrails = {"latency": {"b": _c("b", 8.0, True)}}
    won = verdict(primary, engine="sequential", exposed={"control": 50, "b": 50}, planned_per_arm=9)
    assert (won.state, won.winner, won.planned_per_arm) == ("winner", "b", None)
    harmed = verdict(
        primary,
        guardrails,
        {"latency": "lower"},
        engine="sequential",
        exposed={"control": 50, "b": 50},
        planned_per_arm=None,
    )
    assert (harmed.state, harmed.winner) == ("no-winner", None)
    assert "guardrails harmed" in harmed.reason
