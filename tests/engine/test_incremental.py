"""Compiling a changed snapshot with ``previous=`` takes over unchanged flags and evaluates exactly
as compiling it from scratch, whatever the change: toggles, rules, prerequisites appearing,
changing, disappearing or forming cycles, flags added and removed, segments edited."""

from __future__ import annotations

import random

import msgspec
import pytest

from shared.engine import CompiledEnvironment, compile_patch, compile_snapshot, evaluate_all
from shared.wire import protocol as p
from shared.wire.snapshot import FlagSnapshot, Prerequisite, Snapshot

from .builders import clause, flag, rule, segment, segment_clause, segment_rule, snapshot

CONTEXTS = [
    {"key": f"user-{i}", "country": country, "plan": plan, "org": f"org-{i % 4}"}
    for i, (country, plan) in enumerate(
        [("US", "pro"), ("DE", "free"), ("FR", "pro"), ("US", "free"), ("GB", "team")] * 4
    )
]
NOW = 1_760_000_000_000


def start() -> Snapshot:
    flags = [
        flag(
            f"f{i}",
            variations=("a", "b", "c"),
            rules=[
                rule(clause("country", "in", "US", "GB"), to=i % 3, id="geo"),
                rule(segment_clause("beta"), to=(i + 1) % 3, id="beta"),
            ],
            fallthrough=[(0, 40_000), (1, 30_000), (2, 30_000)],
            prerequisites=[(f"f{i - 1}", 0)] if i % 3 else [],
            off=2,
        )
        for i in range(30)
    ]
    beta = segment("beta", included=["user-1"], rules=[segment_rule(clause("plan", "in", "pro"))])
    return snapshot(*flags, segments=[beta])


def evaluations(env: CompiledEnvironment) -> list[dict[str, object]]:
    return [
        {key: msgspec.to_builtins(result) for key, result in evaluate_all(env, c, NOW).items()}
        for c in CONTEXTS
    ]


def edit(rng: random.Random, before: Snapshot) -> Snapshot:
    flags = dict(before.flags)
    segments = dict(before.segments)
    keys = sorted(flags)
    key = rng.choice(keys)
    target = flags[key]
    match rng.randrange(7):
        case 0:  # the kill switch
            flags[key] = msgspec.structs.replace(target, enabled=not target.enabled)
        case 1:  # a rule's values
            geo = rule(clause("country", "in", rng.choice(["US", "DE", "FR"])), to=1, id="geo")
            flags[key] = msgspec.structs.replace(target, rules=(geo, *target.rules[1:]))
        case 2:  # a prerequisite on another flag, maybe closing a cycle
            other = rng.choice(keys)
            prerequisite = Prerequisite(key=other, variation=rng.randrange(3))
            flags[key] = msgspec.structs.replace(target, prerequisites=(prerequisite,))
        case 3:  # prerequisites dropped
            flags[key] = msgspec.structs.replace(target, prerequisites=())
        case 4:  # a flag removed (others may still name it)
            del flags[key]
        case 5:  # a flag added
            new = f"n{rng.randrange(1000)}"
            flags[new] = flag(new, variations=("a", "b", "c"), prerequisites=[(key, 1)])
        case _:  # the segment edited
            included = tuple(rng.sample([c["key"] for c in CONTEXTS], 3))
            segments["beta"] = msgspec.structs.replace(segments["beta"], included=included)
    return msgspec.structs.replace(
        before, version=before.version + 1, flags=flags, segments=segments
    )


@pytest.mark.parametrize("seed", range(8))
def test_incremental_compiles_evaluate_as_full_ones(seed: int) -> None:
    rng = random.Random(seed)
    current = start()
    compiled = compile_snapshot(current, strict=False)
    for _ in range(40):
        current = edit(rng, current)
        incremental = compile_snapshot(current, strict=False, previous=compiled)
        full = compile_snapshot(current, strict=False)
        assert evaluations(incremental) == evaluations(full)
        assert sorted(e.message for e in incremental.errors) == sorted(
            e.message for e in full.errors
        )
        compiled = incremental


def test_a_toggle_recompiles_only_the_flag_and_what_depends_on_it() -> None:
    before = start()
    compiled = compile_snapshot(before)
    # f4 is a prerequisite of f5, which is one of f6 (f_i needs f_(i-1) unless i % 3 == 0)
    toggled: dict[str, FlagSnapshot] = dict(before.flags)
    toggled["f4"] = msgspec.structs.replace(toggled["f4"], enabled=False)
    after = msgspec.structs.replace(before, version=8, flags=toggled)
    incremental = compile_snapshot(after, previous=compiled)
    fresh = {key for key in after.flags if incremental.runs[key] is not compiled.runs[key]}
    assert fresh == {"f4", "f5"}  # f6 starts a new chain (6 % 3 == 0)
    assert evaluations(incremental) == evaluations(compile_snapshot(after))


def test_a_segment_change_or_another_mode_compiles_everything() -> None:
    before = start()
    compiled = compile_snapshot(before)
    beta = msgspec.structs.replace(before.segments["beta"], included=("user-2",))
    after = msgspec.structs.replace(before, version=8, segments={"beta": beta})
    incremental = compile_snapshot(after, previous=compiled)
    assert all(incremental.runs[k] is not compiled.runs[k] for k in after.flags)
    lenient = compile_snapshot(before, strict=False, previous=compiled)
    assert all(lenient.runs[k] is not compiled.runs[k] for k in before.flags)


def named(patch: p.Patch) -> tuple[set[str], set[str]]:
    """The flag and segment keys a patch changes, adds or removes."""
    return (
        {*patch.flags, *patch.removed_flags},
        {*patch.segments, *patch.removed_segments},
    )


@pytest.mark.parametrize("seed", range(8))
def test_patches_compiled_from_what_they_name_evaluate_as_full_compiles(seed: int) -> None:
    """The relay's path: the patch applied to the snapshot held, then only what it names (and
    what uses that) compiled; chained over 40 random edits, each checked against a full one."""
    rng = random.Random(seed)
    held = start()
    compiled = compile_snapshot(held, strict=False)
    for _ in range(40):
        patch = p.diff(held, edit(rng, held))
        held = p.apply_patch(held, patch)
        flags, segments = named(patch)
        patched = compile_patch(compiled, held, flags=flags, segments=segments, strict=False)
        full = compile_snapshot(held, strict=False)
        assert evaluations(patched) == evaluations(full)
        assert list(patched.flags) == list(full.flags)
        assert sorted(e.message for e in patched.errors) == sorted(e.message for e in full.errors)
        compiled = patched


def test_a_patch_compiles_the_flag_and_its_dependents_only() -> None:
    before = start()
    compiled = compile_snapshot(before)
    toggled = dict(before.flags)
    toggled["f4"] = msgspec.structs.replace(toggled["f4"], enabled=False)
    after = msgspec.structs.replace(before, version=8, flags=toggled)
    patched = compile_patch(compiled, after, flags={"f4"})
    fresh = {key for key in after.flags if patched.runs[key] is not compiled.runs[key]}
    assert fresh == {"f4", "f5"}
    assert evaluations(patched) == evaluations(compile_snapshot(after))


def test_a_segment_patch_compiles_only_the_flags_that_use_it() -> None:
    inner = segment("inner", included=["user-2"])
    outer = segment("outer", rules=[segment_rule(segment_clause("inner"))])
    flags = [
        flag(f"g{i}", rules=[rule(segment_clause("outer"), to=1, id="r")] if i < 3 else [])
        for i in range(10)
    ]
    before = snapshot(*flags, segments=[inner, outer])
    compiled = compile_snapshot(before)
    edited = msgspec.structs.replace(inner, included=("user-3",))
    after = msgspec.structs.replace(
        before, version=9, segments={**before.segments, "inner": edited}
    )
    patched = compile_patch(compiled, after, flags=(), segments={"inner"})
    fresh = {key for key in after.flags if patched.runs[key] is not compiled.runs[key]}
    assert fresh == {"g0", "g1", "g2"}  # through "outer", which names "inner"
    assert evaluations(patched) == evaluations(compile_snapshot(after))
    assert evaluations(patched) != evaluations(compiled)
