"""Layers and holdouts in the pure rule (``shared.engine.experiments.place``), the one function
the control plane's assign endpoint, its exposure checks and the relay all call: 100,000 units."""

from __future__ import annotations

from collections import Counter

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from shared.engine.bucketing import WEIGHT_SCALE, holdout_bucket, layer_bucket
from shared.engine.experiments import exposure_claim_problem, place
from shared.wire.protocol import Access, SnapshotMessage, decode_to_relay, encode
from shared.wire.snapshot import (
    ExperimentSnapshot,
    ExperimentVariant,
    HoldoutSnapshot,
    Snapshot,
)

UNITS = [f"user-{i}" for i in range(100_000)]
VARIANTS = (ExperimentVariant(key="control"), ExperimentVariant(key="treatment"))


def experiment(
    key: str,
    layer: str | None = None,
    bounds: tuple[int, int] | None = None,
    holdouts: tuple[HoldoutSnapshot, ...] = (),
) -> ExperimentSnapshot:
    return ExperimentSnapshot(
        key=key,
        type="manual",
        url="*",
        goal="buy",
        variants=VARIANTS,
        layer=layer,
        layer_range=bounds,
        holdouts=holdouts,
    )


def test_no_unit_is_in_two_experiments_of_a_layer_and_each_gets_its_share() -> None:
    shares = {
        "a": (0, 20_000),
        "b": (20_000, 55_000),
        "c": (55_000, 60_000),
        "d": (70_000, 100_000),
    }
    layer = [experiment(k, "checkout", bounds) for k, bounds in shares.items()]
    free = experiment("free")  # outside any layer: everyone
    counts: Counter[str] = Counter()
    for unit in UNITS:
        inside = [e.key for e in layer if place(e, unit).assigned]
        assert len(inside) <= 1, (unit, inside)
        counts.update(inside)
        assert place(free, unit).assigned
    for key, (start, end) in shares.items():
        share = (end - start) / WEIGHT_SCALE
        assert abs(counts[key] / len(UNITS) - share) < 0.01, (key, counts[key])
    # the gap [60000, 70000) belongs to no experiment
    unplaced = len(UNITS) - sum(counts.values())
    assert abs(unplaced / len(UNITS) - 0.1) < 0.01


def test_held_out_units_get_the_control_and_are_never_exposed_to_a_treatment() -> None:
    q4 = HoldoutSnapshot(key="q4", share=5_000)
    held = experiment("pricing", holdouts=(q4,))
    treatment = {"experiment": "pricing", "variant": "treatment"}
    control = {"experiment": "pricing", "variant": "control"}
    groups: Counter[str] = Counter()
    for unit in UNITS[:20_000]:
        placement = place(held, unit)
        groups.update(group for _, group in placement.holdouts)
        if holdout_bucket("q4", unit) < 5_000:
            assert placement.outcome == "held_out"
            assert placement.variant == 0
            assert placement.holdouts == (("q4", "holdout"),)
            for claim in (treatment, control):
                problem = exposure_claim_problem(claim, unit, {"pricing": held}.get)
                assert problem is not None
                assert problem[0] == "props.experiment"
        else:
            assert placement.assigned
            assert placement.holdouts == (("q4", "general"),)
    assert abs(groups["holdout"] / 20_000 - 0.05) < 0.01


def test_the_layer_decides_before_the_holdout() -> None:
    """A unit outside the experiment's range is not counted by its holdouts: both groups are the
    units an experiment would take."""
    q4 = HoldoutSnapshot(key="q4", share=50_000)
    half = experiment("e", "l", (0, 50_000), (q4,))
    for unit in UNITS[:2_000]:
        placement = place(half, unit)
        if layer_bucket("l", unit) >= 50_000:
            assert placement.outcome == "outside"
            assert placement.holdouts == ()


def test_a_started_experiment_without_a_range_holds_nobody() -> None:
    assert not place(experiment("e", "l", None), "u").assigned


def test_holdout_claims_name_the_group() -> None:
    q4 = HoldoutSnapshot(key="q4", share=50_000)
    holdouts = {"q4": q4}.get
    unit = next(u for u in UNITS if holdout_bucket("q4", u) < 50_000)
    ok = {"holdout": "q4", "group": "holdout"}
    assert exposure_claim_problem(ok, unit, lambda _: None, holdouts) is None
    wrong = {"holdout": "q4", "group": "general"}
    assert exposure_claim_problem(wrong, unit, lambda _: None, holdouts) == (
        "props.group",
        f"unit {unit!r} is in group 'holdout' of 'q4', not 'general'",
    )
    unknown = exposure_claim_problem({"holdout": "x", "group": "general"}, unit, lambda _: None)
    assert unknown == ("props.holdout", "no running holdout 'x'")


def _received(frame: bytes) -> Snapshot:
    """The snapshot a relay reads from a websocket frame."""
    message = decode_to_relay(frame)
    assert isinstance(message, SnapshotMessage)
    return message.snapshot


def test_old_snapshots_decode_without_layers_or_holdouts() -> None:
    """A snapshot written before layers (no layer, layerRange or holdouts) still decodes."""
    old_experiment = {"key": "e", "type": "manual", "url": "*", "goal": "buy"}
    old_experiment["variants"] = [{"key": "control"}, {"key": "treatment"}]  # type: ignore[assignment]
    old = {"project": "p", "environment": "e", "version": 1, "flags": {}, "segments": {}}
    frame = {
        "type": "snapshot",
        "snapshot": {**old, "experiments": {"e": old_experiment}},
        "access": {},
    }
    decoded = _received(msgspec.msgpack.encode(frame))
    assert decoded.experiments["e"].layer is None
    assert decoded.experiments["e"].layer_range is None
    assert decoded.experiments["e"].holdouts == ()
    assert place(decoded.experiments["e"], "u").assigned
    with_layer = experiment("e", "l", (0, 10), (HoldoutSnapshot(key="h", share=1),))
    assert (
        _received(
            encode(
                SnapshotMessage(
                    snapshot=Snapshot(
                        project="p",
                        environment="e",
                        version=1,
                        flags={},
                        segments={},
                        experiments={"e": with_layer},
                    ),
                    access=Access(),
                )
            )
        ).experiments["e"]
        == with_layer
    )


@given(st.text(max_size=50), st.integers(0, WEIGHT_SCALE), st.integers(0, WEIGHT_SCALE))
def test_place_never_raises(unit: str, start: int, share: int) -> None:
    e = experiment("e", "l", (start, WEIGHT_SCALE), (HoldoutSnapshot(key="h", share=share),))
    placement = place(e, unit)
    assert placement.outcome in {"assigned", "outside", "held_out"}
