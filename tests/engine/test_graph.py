"""The dependency graph's rules the control plane asks the engine about: which segments rules
name, and whether a change would close a cycle of segments or of prerequisites. And the engine
leaves the garbage collector to its caller."""

from __future__ import annotations

import gc
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.engine import (
    Chains,
    compile_patch,
    compile_snapshot,
    prerequisite_cycle,
    segments_named,
    validate_flag,
    validate_segment,
)
from shared.engine.graph import MAX_NESTING, order_keys
from tests.engine.builders import (
    clause,
    flag,
    rule,
    segment,
    segment_clause,
    segment_rule,
    snapshot,
)

OK = clause("country", "in", "US")


def test_segments_named_reads_flag_and_segment_rules() -> None:
    flag_rules = [
        rule(clause("country", "in", "fr"), segment_clause("beta", "staff")),
        rule(segment_clause("beta", negate=True)),
    ]
    assert segments_named(flag_rules) == {"beta", "staff"}
    segment_rules = [segment_rule(OK), segment_rule(segment_clause("inner"))]
    assert segments_named(segment_rules) == {"inner"}
    assert segments_named([]) == set()
    assert segments_named([rule(OK)]) == set()


def test_segments_named_reads_the_rows_a_database_stores() -> None:
    wire = [rule(clause("plan", "in", "pro")), rule(segment_clause("beta", "staff"))]
    stored: list[dict[str, Any]] = msgspec.to_builtins(wire)
    assert segments_named(stored) == segments_named(wire) == {"beta", "staff"}
    stored_segment_rules = msgspec.to_builtins([segment_rule(segment_clause("inner"))])
    assert segments_named(stored_segment_rules) == {"inner"}


def test_segments_named_skips_what_is_not_a_rule() -> None:
    assert segments_named(None) == set()  # type: ignore[arg-type]
    assert segments_named([{"clauses": "nope"}, {"no": "clauses"}, 3]) == set()
    assert segments_named([{"clauses": [{"op": "segmentMatch", "values": ["a", 5]}]}]) == {"a"}


def test_a_segment_cycle_is_refused_with_its_keys() -> None:
    names = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert Chains(names).refusal("a", names["a"]) is None
    assert Chains(names).refusal("c", {"a"}) == ("cycle", ["c", "a", "b", "c"])
    assert Chains({}).refusal("a", {"a"}) == ("cycle", ["a", "a"])
    assert Chains({}).refusal("new", {"unknown"}) is None


def test_prerequisite_cycle_follows_the_order_given() -> None:
    prerequisites = {"a": ["x", "b"], "b": ["y", "c"], "c": [], "x": [], "y": ["x"]}
    assert prerequisite_cycle("a", prerequisites) is None
    closing = {**prerequisites, "c": ["a"]}
    assert prerequisite_cycle("c", closing) == ["c", "a", "b", "c"]
    assert prerequisite_cycle("a", closing) == ["a", "b", "c", "a"]
    # only a cycle through the flag changed counts; a flag missing from the map has none
    assert prerequisite_cycle("z", {"z": ["missing"]}) is None


def test_cycle_search_is_not_recursive() -> None:
    chain = {f"s{i}": [f"s{i + 1}"] for i in range(5000)}
    assert prerequisite_cycle("s0", chain) is None
    looped = Chains(chain).refusal("s5000", ["s0"])
    assert looped is not None
    assert looped[0] == "cycle"
    assert len(looped[1]) == 5002


def test_compiling_leaves_the_garbage_collector_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pausing the collector is the caller's choice (the relay's ``gc_paused``), never the
    engine's: the in-process provider runs inside someone else's application."""

    def refuse() -> None:
        raise AssertionError("the engine must not switch the garbage collector")

    monkeypatch.setattr(gc, "disable", refuse)
    monkeypatch.setattr(gc, "enable", refuse)
    data = snapshot(
        flag("a", rules=[rule(segment_clause("s"))]),
        flag("b", prerequisites=[("a", 0)]),
        segments=[segment("s", included=["k"])],
    )
    compiled = compile_snapshot(data)
    compile_patch(compiled, data, flags=["a"], segments=["s"])


def test_checking_a_flag_or_segment_leaves_no_cycles_behind() -> None:
    """What ``validate_flag`` and ``validate_segment`` make is freed as soon as they answer, by
    reference counting: none of it waits for the cycle collector. A plan of 10,000 flags checks
    30,000 settings with the collector paused (``collector_paused``); each check left a cycle (a
    recursive closure holding the flag and its prerequisites), 670,000 objects the first
    collection after it had to walk."""
    segments = {
        "s": segment("s", included=["k"]),
        "t": segment("t", rules=[segment_rule(segment_clause("s"))]),
    }
    prerequisite = flag("a", rules=[rule(segment_clause("s"))])
    checked = flag("b", prerequisites=[("a", 0)], rules=[rule(OK), rule(segment_clause("t"))])
    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        validate_flag(checked, segments, {"a": prerequisite})
        validate_segment(segments["t"], segments)
        assert gc.collect() == 0
    finally:
        if was:
            gc.enable()


@st.composite
def _graph_and_change(draw: st.DrawFn) -> tuple[dict[str, list[str]], str, list[str]]:
    """Two chains the compiler takes (each at most ``MAX_NESTING`` long, with a few shortcuts
    along them), and one key's new references: joining the chains anywhere, closing a cycle,
    naming an unknown key, or nothing."""
    graph: dict[str, list[str]] = {}
    for name in ("a", "b"):
        keys = [f"{name}{i}" for i in range(draw(st.integers(1, MAX_NESTING)))]
        for i, key in enumerate(keys):
            later = keys[i + 1 :]
            graph[key] = later[:1] + draw(
                st.lists(st.sampled_from(later), max_size=1) if later else st.just([])
            )
    keys = list(graph)
    key = draw(st.sampled_from([*keys, "new"]))
    names = draw(st.lists(st.sampled_from([*keys, "gone"]), max_size=2))
    return graph, key, names


def _edges(graph: dict[str, list[str]]) -> Any:
    return lambda key: [(f"p[{i}]", other) for i, other in enumerate(graph[key]) if other in graph]


@given(_graph_and_change())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
def test_chains_refuses_exactly_what_the_compiler_would(
    case: tuple[dict[str, list[str]], str, list[str]],
) -> None:
    """The control plane's check of one key's change (``Chains.refusal``) refuses exactly the
    changes after which the compiler, ordering the whole graph, fails some key: a cycle, or a
    chain more than ``MAX_NESTING`` long wherever its ends are."""
    graph, key, names = case
    chains = Chains(graph)
    refusal = chains.refusal(key, names)
    after = {**graph, key: names}
    failed = order_keys(list(after), _edges(after), "flags", "prerequisite")[1]
    assert (refusal is not None) == bool(failed), (refusal, failed)
    if refusal is not None:
        kind, keys = refusal
        assert key in keys
        assert kind == "cycle" or len(keys) == MAX_NESTING + 1 or len(keys) > MAX_NESTING
    assert chains.names == {k: list(dict.fromkeys(v)) for k, v in graph.items()}  # as it was
