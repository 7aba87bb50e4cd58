"""A relay's state after a chain of patches, each applied at the cost of what it names
(``EnvironmentState.patched``), is the state a whole snapshot of the final version builds: the
same snapshot, evaluations, tracked flags and errors; and the provider feed's ``patch`` event,
taken from the patch the relay applied, turns what a provider holds into the same snapshot."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.routes.feed import SnapshotFeed, patch_event
from relay.store import EnvironmentState
from shared.engine import CompileError, evaluate_all
from shared.wire import protocol as p
from shared.wire.snapshot import FlagSnapshot, Prerequisite, Snapshot
from tests.engine.builders import clause, flag, rule, segment, segment_clause, snapshot

KEYS = [f"f{i}" for i in range(8)]
CONTEXTS = [{"key": f"user-{i}", "country": c} for i, c in enumerate(["US", "DE", "FR", "GB"])]
NOW = 1_760_000_000_000
ACCESS = p.Access(keys=(p.AccessKey(id="k1", kind="public", hash="h" * 64),))


def tracking(item: FlagSnapshot, track: bool) -> FlagSnapshot:
    return msgspec.structs.replace(item, track_exposures=track)


def start() -> Snapshot:
    flags = [
        tracking(
            flag(
                key,
                rules=[rule(clause("country", "in", "US"), to=i % 2, id="geo")],
                prerequisites=[(KEYS[i - 1], 0)] if i % 3 == 2 else [],
            ),
            i % 2 == 0,
        )
        for i, key in enumerate(KEYS[:6])
    ]
    return snapshot(*flags, segments=[segment("beta", included=["user-1"])])


# one edit: (kind, flag index, a second index or value)
EDITS = st.tuples(st.integers(0, 6), st.integers(0, len(KEYS) - 1), st.integers(0, 7))


def edited(before: Snapshot, kind: int, index: int, other: int) -> Snapshot:
    flags, segments = dict(before.flags), dict(before.segments)
    key = KEYS[index]
    target = flags.get(key)
    if target is None or kind == 0:  # added (or replaced by a new one)
        flags[key] = tracking(flag(key), other % 2 == 0)
    elif kind == 1:  # the kill switch
        flags[key] = msgspec.structs.replace(target, enabled=not target.enabled)
    elif kind == 2:  # metrics attached or detached
        flags[key] = msgspec.structs.replace(target, track_exposures=not target.track_exposures)
    elif kind == 3:  # a prerequisite, maybe closing a cycle
        prerequisite = Prerequisite(key=KEYS[other], variation=0)
        flags[key] = msgspec.structs.replace(target, prerequisites=(prerequisite,))
    elif kind == 4:  # removed
        del flags[key]
    elif kind == 5:  # now uses the segment
        uses = rule(segment_clause("beta"), to=1, id="beta")
        flags[key] = msgspec.structs.replace(target, rules=(uses,))
    else:  # the segment edited
        beta = segments["beta"]
        segments["beta"] = msgspec.structs.replace(beta, included=(f"user-{other % 4}",))
    flags = dict(sorted(flags.items()))
    return msgspec.structs.replace(
        before, version=before.version + 1, flags=flags, segments=segments
    )


def evaluations(state: EnvironmentState) -> list[dict[str, object]]:
    return [
        {k: msgspec.to_builtins(v) for k, v in evaluate_all(state.compiled, c, NOW).items()}
        for c in CONTEXTS
    ]


_event_patch = msgspec.json.Decoder(p.Patch)


def event_patch(event: bytes) -> p.Patch:
    data = next(line for line in event.split(b"\n") if line.startswith(b"data: "))
    return _event_patch.decode(data.removeprefix(b"data: "))


@settings(max_examples=60, deadline=None)
@given(st.lists(EDITS, min_size=1, max_size=12))
def test_patched_states_equal_the_state_built_from_the_final_snapshot(
    edits: list[tuple[int, int, int]],
) -> None:
    held = EnvironmentState.build(start(), ACCESS)
    provider = held.snapshot  # what a provider following the feed holds
    for kind, index, other in edits:
        patch = p.diff(held.snapshot, edited(held.snapshot, kind, index, other), ACCESS)
        try:
            state = EnvironmentState.patched(held, patch)
        except CompileError:  # a cycle: refused by relays (the control plane never sends one)
            continue
        event = event_patch(patch_event(held, state))
        assert event.access is None  # key data never reaches a provider
        provider = p.apply_patch(provider, event)
        assert provider == state.snapshot
        held = state
    full = EnvironmentState.build(held.snapshot, ACCESS)
    assert held.snapshot == full.snapshot
    assert held.tracked == full.tracked
    assert held.tracked == {k for k, f in held.snapshot.flags.items() if f.track_exposures}
    assert evaluations(held) == evaluations(full)
    assert list(held.compiled.flags) == list(full.compiled.flags)


def test_a_toggle_keeps_the_tracked_flags_and_carries_its_patch() -> None:
    before = EnvironmentState.build(start(), ACCESS)
    toggled = msgspec.structs.replace(before.snapshot.flags["f0"], enabled=False)
    patch = p.Patch(
        environment=before.environment,
        from_version=before.version,
        version=before.version + 1,
        flags={"f0": toggled},
    )
    after = EnvironmentState.patched(before, patch)
    assert after.tracked is before.tracked  # nothing to look at again
    assert after.patch is patch
    assert event_patch(patch_event(before, after)).flags == {"f0": toggled}


def test_a_patch_event_across_versions_compares_the_snapshots() -> None:
    """A provider two versions behind (it missed one) gets the difference of the snapshots,
    not the last patch alone."""
    first = EnvironmentState.build(start(), ACCESS)
    second = EnvironmentState.patched(
        first, p.diff(first.snapshot, edited(first.snapshot, 1, 0, 0))
    )
    third = EnvironmentState.patched(
        second, p.diff(second.snapshot, edited(second.snapshot, 1, 1, 0))
    )
    event = event_patch(patch_event(first, third))
    assert p.apply_patch(first.snapshot, event) == third.snapshot


def test_the_feed_encodes_a_change_once_for_the_streams_that_follow_it() -> None:
    """Streams that sent the version a patch follows get the same bytes (encoded once); a
    stream further behind gets the comparison with what it sent."""
    feed = SnapshotFeed(cast(Any, SimpleNamespace(store=None)), cast(Any, None))
    first = EnvironmentState.build(start(), ACCESS)
    second = EnvironmentState.patched(
        first, p.diff(first.snapshot, edited(first.snapshot, 1, 0, 0))
    )
    third = EnvironmentState.patched(
        second, p.diff(second.snapshot, edited(second.snapshot, 2, 1, 0))
    )
    once = feed._patch_event(second, third)
    assert feed._patch_event(second, third) is once
    behind = feed._patch_event(first, third)
    assert p.apply_patch(first.snapshot, event_patch(behind)) == third.snapshot
    assert feed._patch_event(second, third) is once
