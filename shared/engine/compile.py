"""Compile a snapshot once into an immutable, indexed ``CompiledEnvironment``.

Compiling is where every check happens, so evaluating never has to: variation indexes exist,
rollout weights are non-negative integers summing to 100000, each serve has exactly one of
``variation`` / ``rollout``, operators are known and their clause values usable (regexes
compile, dates and versions parse), and neither prerequisites nor segments (through
``segmentMatch`` inside segment rules) form a cycle or nest more than 32 deep. These checks
do not depend on ``enabled``, so toggling a flag can never make a snapshot invalid.

A reference to a flag or segment that does not exist is not an error (it may have been archived
or deleted): an unknown prerequisite fails, an unknown segment does not match.

Each flag becomes one closure ``(context, key) -> Evaluation`` specialised to its shape, and
every ``Evaluation`` it can return (per reason, rule and variation) is built here, once.
"""

from __future__ import annotations

import gc
from bisect import bisect_right
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from shared.engine.bucketing import WEIGHT_SCALE, bucket, cumulative, hash32, mmh3_hash
from shared.engine.model import (
    MALFORMED_FLAG,
    CompileError,
    Evaluation,
    InvalidAt,
    Reason,
    join,
)
from shared.engine.operators import ARRAYS, is_number
from shared.engine.rules import (
    MAX_NESTING,
    Context,
    Matcher,
    SegmentResolver,
    StringIn,
    bucket_input,
    compile_rule_clauses,
    compile_segment,
    never,
    segment_references,
    sequence,
    text,
)
from shared.wire.snapshot import (
    FlagSnapshot,
    Prerequisite,
    Rule,
    SegmentSnapshot,
    Serve,
    Snapshot,
    Target,
    Variation,
    WeightedVariation,
)

FlagFn = Callable[[Context, str], Evaluation]
T = TypeVar("T")

FLAG_TYPES = frozenset({"boolean", "string", "number", "json"})


class _Prereq(NamedTuple):
    """What a dependent flag needs to know about a prerequisite flag."""

    run: FlagFn
    enabled: bool
    variations: frozenset[int]


PrereqResolver = Callable[[str, str], _Prereq | None]


@dataclass(frozen=True, slots=True)
class CompiledFlag:
    key: str
    version: int
    enabled: bool
    client_side: bool
    run: FlagFn
    error: CompileError | None = None  # set when compiled with strict=False and malformed


@dataclass(frozen=True, slots=True)
class _Reusable:
    """What compiling the next version of the same environment may take over unchanged."""

    strict: bool
    flags: Mapping[str, Any]  # the flag data compiled, by key
    segments: Mapping[str, Any]  # the segment data compiled, by key
    built: Mapping[str, Any]  # flag key -> its compiled ``_Prereq`` or ``CompileError``
    segments_built: Mapping[str, Any]  # segment key -> its ``Matcher`` or ``CompileError``
    # who names what: prerequisite key -> flags naming it; segment key -> flags naming it
    dependents: Mapping[str, frozenset[str]]
    segment_users: Mapping[str, frozenset[str]]
    positions: Mapping[str, int]  # flag key -> index in ``all_runs``
    client_positions: Mapping[str, int]  # flag key -> index in ``client_runs``


@dataclass(frozen=True, slots=True, eq=False)
class CompiledEnvironment:
    """An environment's flags and segments, ready to evaluate. Never mutated: swap it whole."""

    project: str
    environment: str
    version: int
    generated_at: int
    flags: Mapping[str, CompiledFlag]
    segment_keys: frozenset[str]
    errors: tuple[CompileError, ...]
    runs: Mapping[str, FlagFn]
    all_runs: tuple[tuple[str, FlagFn], ...]
    client_runs: tuple[tuple[str, FlagFn], ...]
    reusable: _Reusable | None = None


# ------------------------------------------------------------------------------------ flags


def _int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidAt(path, "expected an integer")
    return int(value)


def _variations(flag: FlagSnapshot) -> dict[int, Variation]:
    kind = flag.type
    if kind not in FLAG_TYPES:
        raise InvalidAt("type", f"expected one of {', '.join(sorted(FLAG_TYPES))}")
    found: dict[int, Variation] = {}
    items = sequence(flag.variations, "variations")
    if not items:
        raise InvalidAt("variations", "a flag needs at least one variation")
    for i, variation in enumerate(items):
        path = f"variations[{i}]"
        if not isinstance(variation, Variation):
            raise InvalidAt(path, "expected a variation")
        idx = _int(variation.idx, f"{path}.idx")
        if idx < 0 or idx in found:
            raise InvalidAt(f"{path}.idx", "variation indexes must be unique and non-negative")
        text(variation.name, f"{path}.name", empty=True)
        value = variation.value
        ok = (
            kind == "json"
            or (kind == "boolean" and isinstance(value, bool))
            or (kind == "string" and isinstance(value, str))
            or (kind == "number" and is_number(value))
        )
        if not ok:
            raise InvalidAt(f"{path}.value", f"expected a {kind} value")
        found[idx] = variation
    return found


def _variation(value: Any, path: str, variations: Mapping[int, Variation]) -> int:
    idx = _int(value, path)
    if idx not in variations:
        raise InvalidAt(path, f"no variation with index {idx}")
    return idx


class _Serve(NamedTuple):
    fixed: Evaluation | None  # the result, when no rollout is involved
    run: FlagFn  # computes the result (a rollout), or returns ``fixed``
    # For a rollout of two results by key: ``run`` behind a ``StringIn`` rule that serves a
    # fixed result, as one closure (see ``_rollout``).
    after_rule: Callable[[StringIn, Evaluation], FlagFn] | None = None


def _constant(evaluation: Evaluation) -> FlagFn:
    def constant(context: Context, key: str) -> Evaluation:
        return evaluation

    return constant


def _rollout(
    salt: str, bucket_by: str, thresholds: tuple[int, ...], results: tuple[Evaluation, ...]
) -> _Serve:
    last = len(results) - 1
    if bucket_by != "key":

        def by_attribute(context: Context, key: str) -> Evaluation:
            value = bucket_input(context, key, bucket_by)
            slot = 0 if value is None else bucket(salt, value)
            return results[min(bisect_right(thresholds, slot), last)]

        return _Serve(None, by_attribute)
    if len(results) == 2:
        first, second = results
        cut = thresholds[0]

        def split_by_key(context: Context, key: str) -> Evaluation:
            data = salt + key
            # ASCII straight to mmh3; anything else via hash32 (see bucketing's docstring).
            h = mmh3_hash(data, 0, False) if data.isascii() else hash32(data)
            return first if (h * WEIGHT_SCALE) >> 32 < cut else second

        def after_rule(rule: StringIn, hit: Evaluation) -> FlagFn:
            """``hit`` when ``rule`` matches, else ``split_by_key``, in one call instead of
            three: the commonest targeted flag (one ``in`` rule, a percentage rollout for the
            rest) is most of a bulk evaluation's time, and a call is much of each flag's."""
            attribute, strings, _ = rule
            holds = rule.holds

            def in_rule_then_split_by_key(context: Context, key: str) -> Evaluation:
                value = context.get(attribute)
                if value.__class__ is str:
                    if value in strings:
                        return hit
                elif holds(value):
                    return hit
                data = salt + key
                h = mmh3_hash(data, 0, False) if data.isascii() else hash32(data)
                return first if (h * WEIGHT_SCALE) >> 32 < cut else second

            return in_rule_then_split_by_key

        return _Serve(None, split_by_key, after_rule)

    def by_key(context: Context, key: str) -> Evaluation:
        slot = (hash32(salt + key) * WEIGHT_SCALE) >> 32
        return results[min(bisect_right(thresholds, slot), last)]

    return _Serve(None, by_key)


def _serve(
    serve: Any,
    path: str,
    variations: Mapping[int, Variation],
    result: Callable[[int, bool], Evaluation],
    salt: str,
    bucket_by: str,
) -> _Serve:
    if not isinstance(serve, Serve):
        raise InvalidAt(path, "expected a serve object")
    if (serve.variation is None) == (serve.rollout is None):
        raise InvalidAt(path, "set exactly one of variation and rollout")
    if serve.variation is not None:
        fixed = result(_variation(serve.variation, f"{path}.variation", variations), False)
        return _Serve(fixed, _constant(fixed))
    items = sequence(serve.rollout, f"{path}.rollout")
    if not items:
        raise InvalidAt(f"{path}.rollout", "a rollout needs at least one item")
    weights = []
    results = []
    for i, item in enumerate(items):
        item_path = f"{path}.rollout[{i}]"
        if not isinstance(item, WeightedVariation):
            raise InvalidAt(item_path, "expected {idx, weight}")
        results.append(result(_variation(item.idx, f"{item_path}.idx", variations), True))
        weight = _int(item.weight, f"{item_path}.weight")
        if weight < 0:
            raise InvalidAt(f"{item_path}.weight", "weights cannot be negative")
        weights.append(weight)
    if sum(weights) != WEIGHT_SCALE:
        raise InvalidAt(
            f"{path}.rollout", f"weights sum to {sum(weights)}, expected {WEIGHT_SCALE}"
        )
    if serve.bucket_by is not None:
        bucket_by = text(serve.bucket_by, f"{path}.bucketBy")
    return _rollout(salt, bucket_by, cumulative(weights), tuple(results))


Rules = tuple[tuple[Matcher, Evaluation | None, FlagFn], ...]
Prereqs = tuple[tuple[FlagFn | None, int, Evaluation], ...]


def _one_rule(
    match: Matcher, hit: Evaluation, fallthrough: _Serve, rule: StringIn | None
) -> FlagFn:
    """A flag with one rule serving ``hit``, and no prerequisites or targets."""
    fall = fallthrough.run
    miss = fallthrough.fixed
    if miss is not None:
        fixed: Evaluation = miss

        def one_rule_fixed(context: Context, key: str) -> Evaluation:
            return hit if match(context, key) else fixed

        return one_rule_fixed
    if rule is not None and fallthrough.after_rule is not None:
        return fallthrough.after_rule(rule, hit)

    def one_rule(context: Context, key: str) -> Evaluation:
        if match(context, key):
            return hit
        return fall(context, key)

    return one_rule


def _assemble(
    prereqs: Prereqs,
    targets: Mapping[str, Evaluation],
    rules: Rules,
    fallthrough: _Serve,
    shapes: Sequence[StringIn | None],
) -> FlagFn:
    """One closure per flag shape, so the common shapes run without loops or checks.
    ``shapes``: each rule's clauses, when they are one ``StringIn``."""
    fall = fallthrough.run
    if not prereqs and not targets:
        if not rules:
            return fall
        first_match, first_hit, _ = rules[0]
        if len(rules) == 1 and first_hit is not None:
            return _one_rule(first_match, first_hit, fallthrough, shapes[0])

    def flag(context: Context, key: str) -> Evaluation:
        for run, required, failed in prereqs:
            if run is None or run(context, key).variation != required:
                return failed
        if targets:
            hit = targets.get(key)
            if hit is not None:
                return hit
        for match, fixed, serve in rules:
            if match(context, key):
                if fixed is not None:
                    return fixed
                return serve(context, key)
        return fall(context, key)

    return flag


def build_flag(
    flag: Any, resolve_prereq: PrereqResolver, resolve_segment: SegmentResolver
) -> _Prereq:
    """Check and compile one flag; problems raise ``InvalidAt`` relative to the flag."""
    if not isinstance(flag, FlagSnapshot):
        raise InvalidAt("", "expected a flag")
    flag_key = text(flag.key, "key")
    _int(flag.version, "version")
    for name, path in (("enabled", "enabled"), ("client_side", "clientSide")):
        if not isinstance(getattr(flag, name), bool):
            raise InvalidAt(path, "expected a boolean")
    variations = _variations(flag)
    salt = flag_key if flag.salt is None else text(flag.salt, "salt", empty=True)
    bucket_by = text(flag.bucket_by, "bucketBy")

    def make(idx: int, reason: Reason, **extra: Any) -> Evaluation:
        variation = variations[idx]
        return Evaluation(
            reason,
            value=variation.value,
            variation=idx,
            variation_name=variation.name or None,
            **extra,
        )

    off = make(_variation(flag.off_variation, "offVariation", variations), Reason.OFF)

    prereqs = []
    for i, prereq in enumerate(sequence(flag.prerequisites, "prerequisites")):
        path = f"prerequisites[{i}]"
        if not isinstance(prereq, Prerequisite):
            raise InvalidAt(path, "expected {key, variation}")
        prereq_key = text(prereq.key, f"{path}.key")
        required = _int(prereq.variation, f"{path}.variation")
        if prereq_key == flag_key:
            raise InvalidAt(f"{path}.key", f"prerequisite cycle: {flag_key} -> {flag_key}")
        target = resolve_prereq(prereq_key, f"{path}.key")
        if target is not None and required not in target.variations:
            raise InvalidAt(f"{path}.variation", f"{prereq_key} has no variation {required}")
        failed = Evaluation(
            Reason.PREREQUISITE_FAILED,
            value=off.value,
            variation=off.variation,
            variation_name=off.variation_name,
            prerequisite_key=prereq_key,
        )
        # A missing or disabled prerequisite always fails; no need to evaluate it.
        run = target.run if target is not None and target.enabled else None
        prereqs.append((run, required, failed))

    targets: dict[str, Evaluation] = {}
    for i, target_ in enumerate(sequence(flag.targets, "targets")):
        path = f"targets[{i}]"
        if not isinstance(target_, Target):
            raise InvalidAt(path, "expected {variation, values}")
        hit = make(
            _variation(target_.variation, f"{path}.variation", variations), Reason.TARGET_MATCH
        )
        for j, value in enumerate(sequence(target_.values, f"{path}.values")):
            targets.setdefault(text(value, f"{path}.values[{j}]"), hit)

    rules = []
    shapes: list[StringIn | None] = []  # each rule's clauses, when they are one ``StringIn``
    for i, rule in enumerate(sequence(flag.rules, "rules")):
        path = f"rules[{i}]"
        if not isinstance(rule, Rule):
            raise InvalidAt(path, "expected a rule")
        rule_id = text(rule.id, f"{path}.id", empty=True)
        text(rule.description, f"{path}.description", empty=True)
        match, shape = compile_rule_clauses(rule.clauses, f"{path}.clauses", resolve_segment)
        shapes.append(shape)

        def rule_result(
            idx: int, in_rollout: bool, i: int = i, rule_id: str = rule_id
        ) -> Evaluation:
            return make(
                idx, Reason.RULE_MATCH, rule_index=i, rule_id=rule_id or None, in_rollout=in_rollout
            )

        served = _serve(rule.serve, f"{path}.serve", variations, rule_result, salt, bucket_by)
        rules.append((match, served.fixed, served.run))

    def fallthrough_result(idx: int, in_rollout: bool) -> Evaluation:
        return make(idx, Reason.FALLTHROUGH, in_rollout=in_rollout)

    fallthrough = _serve(
        flag.fallthrough, "fallthrough", variations, fallthrough_result, salt, bucket_by
    )
    run = (
        _assemble(tuple(prereqs), targets, tuple(rules), fallthrough, shapes)
        if flag.enabled
        else _constant(off)
    )
    return _Prereq(run, bool(flag.enabled), frozenset(variations))


# ---------------------------------------------------------------------------- environment

Edges = Callable[[str], list[tuple[str, str]]]


def _order(
    keys: Sequence[str], edges: Edges, prefix: str, what: str
) -> tuple[list[str], dict[str, CompileError]]:
    """Dependencies-first order of ``keys``, and which ones cannot compile.

    ``edges(key)`` lists ``(path, other key)`` for the references a key makes to known keys.
    A key fails when it is in a cycle, when its longest chain of references is more than
    ``MAX_NESTING`` long, or when anything it references fails. Iterative: a long chain of
    references cannot exhaust Python's recursion limit.
    """
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    depth: dict[str, int] = {}
    failed: dict[str, CompileError] = {}
    order: list[str] = []
    for root in keys:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(edges(root)))]
        while stack:
            node, pending = stack[-1]
            for path, other in pending:
                seen = state.get(other)
                if seen is None:
                    state[other] = 1
                    stack.append((other, iter(edges(other))))
                    break
                if seen == 1:
                    members = [k for k, _ in stack]
                    members = members[members.index(other) :]
                    error = CompileError(
                        join(f"{prefix}.{node}", path),
                        f"{what} cycle: {' -> '.join([*members, other])}",
                    )
                    for member in members:
                        failed.setdefault(member, error)
            else:
                stack.pop()
                state[node] = 2
                order.append(node)
                if node in failed:
                    continue
                deepest, deepest_path = 0, ""
                for path, other in edges(node):
                    if other in failed:
                        failed[node] = failed[other]
                        break
                    if depth[other] > deepest:
                        deepest, deepest_path = depth[other], path
                else:
                    depth[node] = deepest + 1
                    if deepest + 1 > MAX_NESTING:
                        failed[node] = CompileError(
                            join(f"{prefix}.{node}", deepest_path),
                            f"{what}s nested more than {MAX_NESTING} deep",
                        )
    return order, failed


def _flag_edges(flags: Mapping[str, Any]) -> Edges:
    def edges(key: str) -> list[tuple[str, str]]:
        return [
            (f"prerequisites[{i}].key", k)
            for i, k in enumerate(_prereq_keys(flags[key]))
            if k in flags and k != key
        ]

    return edges


def _segment_edges(segments: Mapping[str, Any]) -> Edges:
    def edges(key: str) -> list[tuple[str, str]]:
        return [(p, k) for p, k in segment_references(segments[key]) if k in segments]

    return edges


def _check_map(items: Any, name: str, kind: type) -> Mapping[str, Any]:
    if not isinstance(items, Mapping):
        raise CompileError(name, "expected a map")
    for key, value in items.items():
        if not isinstance(key, str) or not key:
            raise CompileError(name, f"invalid key {key!r}")
        own_key = getattr(value, "key", key) if isinstance(value, kind) else key
        if own_key != key:
            raise CompileError(f"{name}.{key}.key", f"{own_key!r} does not match its map key")
    return items


Reuse = Callable[[str, Any, set[str]], Any]
"""``(key, data, keys reused so far)`` -> an earlier compiled item to take over, or None."""


def _compile_all(
    data: Mapping[str, Any],
    prefix: str,
    what: str,
    edges: Edges,
    build: Callable[[Any, Callable[[str, str], Any]], Any],
    reuse: Reuse | None = None,
) -> dict[str, Any]:
    """Compile every item of ``data`` after what it references; failures become errors."""
    order, failed = _order(list(data), edges, prefix, what)
    built: dict[str, Any] = {}
    reused: set[str] = set()

    def resolve(key: str, path: str) -> Any:
        found = built.get(key)
        if isinstance(found, CompileError):
            raise found
        if found is None and key in data:
            raise InvalidAt(path, f"{what} {key!r} could not be compiled")
        return found

    for key in order:
        if key in failed:
            built[key] = failed[key]
            continue
        if reuse is not None:
            earlier = reuse(key, data[key], reused)
            if earlier is not None:
                built[key] = earlier
                reused.add(key)
                continue
        try:
            built[key] = build(data[key], resolve)
        except InvalidAt as exc:
            built[key] = CompileError(join(f"{prefix}.{key}", exc.path), exc.message)
        except CompileError as exc:
            built[key] = exc
    return built


def compile_snapshot(
    snapshot: Snapshot, *, strict: bool = True, previous: CompiledEnvironment | None = None
) -> CompiledEnvironment:
    """Compile a snapshot, or raise ``CompileError`` naming a problem.

    With ``strict=False`` a flag that does not compile (or whose prerequisites or segments do
    not) is kept and evaluates to ``ERROR``/``MALFORMED_FLAG``; ``errors`` lists the problems.
    That suits a relay, which should keep serving the healthy flags of a bad snapshot.

    ``previous``, the compiled earlier version of the same environment, lets an unchanged flag
    keep its compiled form: one whose data is equal, whose prerequisites are the same keys and
    were all kept themselves, while no segment changed. So a one-flag change to a 10,000-flag
    environment compiles one flag, not 10,000; the result evaluates exactly as a full compile.
    """
    # Compiling allocates about a hundred objects per flag, all kept: cyclic collections
    # triggered on the way would rescan the growing heap again and again (about 40 % of the
    # time for 10,000 flags). Reference counting still frees garbage while the collector waits.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _compile_snapshot(snapshot, strict, previous)
    finally:
        if paused:
            gc.enable()


def _same(before: Any, after: Any) -> bool:
    return before is after or before == after


def _flag_reuse(
    earlier: _Reusable | None, strict: bool, flags: Mapping[str, Any], segments: Mapping[str, Any]
) -> Reuse | None:
    """How ``_compile_all`` may take over flags compiled for ``earlier`` (None: compile all)."""
    if earlier is None or earlier.strict != strict:
        return None
    if earlier.segments.keys() != segments.keys() or not all(
        _same(earlier.segments[key], value) for key, value in segments.items()
    ):
        return None  # segments are compiled into the flags that use them: start afresh
    old_edges, new_edges = _flag_edges(earlier.flags), _flag_edges(flags)

    def reuse(key: str, data: Any, reused: set[str]) -> Any:
        before = earlier.flags.get(key)
        if before is None or not _same(before, data):
            return None
        targets = [other for _, other in new_edges(key)]
        if targets != [other for _, other in old_edges(key)]:
            return None  # a prerequisite appeared or went away
        if not all(other in reused for other in targets):
            return None  # a prerequisite was compiled afresh: this flag holds its old form
        return earlier.built.get(key)

    return reuse


def _compile_snapshot(
    snapshot: Snapshot, strict: bool, previous: CompiledEnvironment | None
) -> CompiledEnvironment:
    if not isinstance(snapshot, Snapshot):
        raise CompileError("", "expected a snapshot")
    flag_data = _check_map(snapshot.flags, "flags", FlagSnapshot)
    segment_data = _check_map(snapshot.segments, "segments", SegmentSnapshot)
    reuse = _flag_reuse(
        previous.reusable if previous is not None else None, strict, flag_data, segment_data
    )
    segments = _compile_all(
        segment_data, "segments", "segment", _segment_edges(segment_data), compile_segment
    )

    def resolve_segment(key: str, path: str) -> Matcher | None:
        found = segments.get(key)
        if isinstance(found, CompileError):
            raise found
        return found

    compiled = _compile_all(
        flag_data,
        "flags",
        "prerequisite",
        _flag_edges(flag_data),
        lambda flag, resolve: build_flag(flag, resolve, resolve_segment),
        reuse,
    )
    errors: dict[tuple[str, str], CompileError] = {}
    for item in [*segments.values(), *compiled.values()]:
        if isinstance(item, CompileError):
            if strict:
                raise item
            errors.setdefault((item.path, item.message), item)
    flags: dict[str, CompiledFlag] = {}
    for key, data in flag_data.items():
        built = compiled[key]
        if isinstance(built, CompileError):
            version = data.version if isinstance(getattr(data, "version", None), int) else 0
            client_side = getattr(data, "client_side", True) is not False
            flags[key] = CompiledFlag(
                key, version, False, client_side, _constant(MALFORMED_FLAG), built
            )
        else:
            flags[key] = CompiledFlag(key, data.version, data.enabled, data.client_side, built.run)
    return _environment(
        snapshot,
        flags,
        segment_data,
        tuple(errors.values()),
        lambda positions: _Reusable(
            strict, flag_data, segment_data, compiled, segments, *_references(flag_data), *positions
        ),
    )


def _flag_segment_keys(flag: Any) -> set[str]:
    return {key for _, key in segment_references(flag)}


def _references(
    flags: Mapping[str, Any],
) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """(prerequisite key -> flags naming it, segment key -> flags naming it)."""
    dependents: dict[str, set[str]] = {}
    users: dict[str, set[str]] = {}
    for key, flag in flags.items():
        for other in _prereq_keys(flag):
            dependents.setdefault(other, set()).add(key)
        for segment in _flag_segment_keys(flag):
            users.setdefault(segment, set()).add(key)
    return (
        {k: frozenset(v) for k, v in dependents.items()},
        {k: frozenset(v) for k, v in users.items()},
    )


def _moved(
    index: Mapping[str, frozenset[str]], key: str, before: set[str], after: set[str]
) -> dict[str, frozenset[str]]:
    """``index`` with ``key`` no longer under ``before - after`` and now under ``after - before``."""
    updated = dict(index)
    for ref in before - after:
        updated[ref] = updated.get(ref, frozenset()) - {key}
    for ref in after - before:
        updated[ref] = updated.get(ref, frozenset()) | {key}
    return updated


def compile_patch(
    previous: CompiledEnvironment,
    snapshot: Snapshot,
    *,
    flags: Collection[str],
    segments: Collection[str] = (),
    strict: bool = True,
) -> CompiledEnvironment:
    """``snapshot`` compiled from ``previous``, the compiled version it was patched from, where
    ``flags`` and ``segments`` name every flag and segment the patch changed, added or removed.

    Only those flags are compiled, with the flags that use a named segment (directly or through
    other segments) and every flag that depends on any of them through prerequisites; every
    other compiled flag is taken over as it is, so the cost follows the patch, not the size of
    the environment. Evaluates exactly as ``compile_snapshot(snapshot)`` (tested over random
    edits). Without what to take over (``previous`` compiled another way), compiles it whole.
    """
    earlier = previous.reusable
    if earlier is None or earlier.strict != strict:
        return compile_snapshot(snapshot, strict=strict, previous=previous)
    paused = gc.isenabled()
    gc.disable()
    try:
        return _compile_patch(previous, earlier, snapshot, set(flags), set(segments), strict)
    finally:
        if paused:
            gc.enable()


def _compile_patch(
    previous: CompiledEnvironment,
    earlier: _Reusable,
    snapshot: Snapshot,
    named: set[str],
    named_segments: set[str],
    strict: bool,
) -> CompiledEnvironment:
    if not isinstance(snapshot, Snapshot):
        raise CompileError("", "expected a snapshot")
    flag_data = snapshot.flags
    segment_data = _check_map(snapshot.segments, "segments", SegmentSnapshot)
    _check_map({k: flag_data[k] for k in named if k in flag_data}, "flags", FlagSnapshot)
    segment_built, rebuild = _patched_segments(earlier, segment_data, named_segments)
    dependents, users = _patched_references(earlier, flag_data, named)
    rebuild = _with_dependents(rebuild | named, dependents) & flag_data.keys()
    built = _patched_builds(earlier, flag_data, named, rebuild, segment_built)
    compiled_flags = _copy(previous.flags)
    for key in named - flag_data.keys():
        compiled_flags.pop(key, None)
    for key in rebuild:
        compiled_flags[key] = _compiled_flag(key, flag_data[key], built[key], strict)
    errors = _patch_errors(segment_built, built, strict)
    reusable = replace(
        earlier,
        flags=flag_data,
        segments=segment_data,
        built=built,
        segments_built=segment_built,
        dependents=dependents,
        segment_users=users,
    )
    same_keys = all((key in flag_data) == (key in previous.flags) for key in named)
    if same_keys and all(
        compiled_flags[key].client_side == previous.flags[key].client_side for key in rebuild
    ):
        # the same flags in the same order: replace the rebuilt ones in place (no 10,000 walk)
        return _replaced_in_place(
            previous, snapshot, compiled_flags, rebuild, segment_data, errors, reusable
        )
    if list(compiled_flags) != list(flag_data):
        compiled_flags = {key: compiled_flags[key] for key in flag_data}  # the snapshot's order
    return _environment(
        snapshot,
        compiled_flags,
        segment_data,
        errors,
        lambda flags: _Reusable(
            strict, flag_data, segment_data, built, segment_built, dependents, users, *flags
        ),
    )


def _patched_segments(
    earlier: _Reusable, segment_data: Mapping[str, Any], named_segments: set[str]
) -> tuple[Mapping[str, Any], set[str]]:
    """The compiled segments, and the flags that use a changed one (or a segment that names it,
    at any depth). Segments are few: recompiled whole when any changed."""
    if not named_segments:
        return earlier.segments_built, set()
    segment_built = _compile_all(
        segment_data, "segments", "segment", _segment_edges(segment_data), compile_segment
    )
    namers: dict[str, set[str]] = {}
    for version_of_segments in (earlier.segments, segment_data):
        for key, segment in version_of_segments.items():
            for _, other in segment_references(segment):
                namers.setdefault(other, set()).add(key)
    touched = _with_dependents(set(named_segments), namers)
    rebuild: set[str] = set()
    for key in touched:
        rebuild |= earlier.segment_users.get(key, frozenset())
    return segment_built, rebuild


def _patched_references(
    earlier: _Reusable, flag_data: Mapping[str, Any], named: set[str]
) -> tuple[Mapping[str, frozenset[str]], Mapping[str, frozenset[str]]]:
    """(prerequisite -> dependents, segment -> users) with the named flags' references moved."""
    dependents, users = earlier.dependents, earlier.segment_users
    for key in named:
        before, after = earlier.flags.get(key), flag_data.get(key)
        old_prereqs = set(_prereq_keys(before)) if before is not None else set()
        new_prereqs = set(_prereq_keys(after)) if after is not None else set()
        if old_prereqs != new_prereqs:
            dependents = _moved(dependents, key, old_prereqs, new_prereqs)
        old_segments = _flag_segment_keys(before) if before is not None else set()
        new_segments = _flag_segment_keys(after) if after is not None else set()
        if old_segments != new_segments:
            users = _moved(users, key, old_segments, new_segments)
    return dependents, users


def _with_dependents(keys: set[str], dependents: Mapping[str, Collection[str]]) -> set[str]:
    """``keys`` and whatever depends on them through ``dependents``, at any depth."""
    found, pending = set(keys), list(keys)
    while pending:
        for other in dependents.get(pending.pop(), ()):
            if other not in found:
                found.add(other)
                pending.append(other)
    return found


def _patched_builds(
    earlier: _Reusable,
    flag_data: Mapping[str, Any],
    named: set[str],
    rebuild: set[str],
    segment_built: Mapping[str, Any],
) -> dict[str, Any]:
    """The built flags: ``rebuild`` built again in prerequisite order, the rest taken over."""

    def resolve_segment(key: str, path: str) -> Matcher | None:
        found = segment_built.get(key)
        if isinstance(found, CompileError):
            raise found
        return found

    built = _copy(earlier.built)
    for key in named - flag_data.keys():
        built.pop(key, None)
    order, failed = _order(sorted(rebuild), _flag_edges(flag_data), "flags", "prerequisite")

    def resolve(key: str, path: str) -> Any:
        found = built.get(key)
        if isinstance(found, CompileError):
            raise found
        if found is None and key in flag_data:
            raise InvalidAt(path, f"prerequisite {key!r} could not be compiled")
        return found

    for key in order:
        if key not in rebuild:
            continue  # an unchanged prerequisite: already compiled
        if key in failed:
            built[key] = failed[key]
            continue
        try:
            built[key] = build_flag(flag_data[key], resolve, resolve_segment)
        except InvalidAt as exc:
            built[key] = CompileError(join(f"flags.{key}", exc.path), exc.message)
        except CompileError as exc:
            built[key] = exc
    return built


def _compiled_flag(key: str, data: Any, item: Any, strict: bool) -> CompiledFlag:
    """A built flag (or its ``CompileError``: raised when ``strict``, else a malformed flag)."""
    if not isinstance(item, CompileError):
        return CompiledFlag(key, data.version, data.enabled, data.client_side, item.run)
    if strict:
        raise item
    version = data.version if isinstance(getattr(data, "version", None), int) else 0
    client_side = getattr(data, "client_side", True) is not False
    return CompiledFlag(key, version, False, client_side, _constant(MALFORMED_FLAG), item)


def _patch_errors(
    segment_built: Mapping[str, Any], built: Mapping[str, Any], strict: bool
) -> tuple[CompileError, ...]:
    """Every distinct compile error (``strict``: the first segment error is raised instead)."""
    if strict:
        for item in segment_built.values():
            if isinstance(item, CompileError):
                raise item
        return ()
    found: dict[tuple[str, str], CompileError] = {}
    for item in [*segment_built.values(), *built.values()]:
        if isinstance(item, CompileError):
            found.setdefault((item.path, item.message), item)
    return tuple(found.values())


def _replaced_in_place(
    previous: CompiledEnvironment,
    snapshot: Snapshot,
    compiled_flags: dict[str, CompiledFlag],
    rebuild: set[str],
    segment_data: Mapping[str, Any],
    errors: tuple[CompileError, ...],
    reusable: _Reusable,
) -> CompiledEnvironment:
    runs = _copy(previous.runs)
    all_runs, client_runs = list(previous.all_runs), list(previous.client_runs)
    for key in rebuild:
        run = runs[key] = compiled_flags[key].run
        all_runs[reusable.positions[key]] = (key, run)
        if key in reusable.client_positions:
            client_runs[reusable.client_positions[key]] = (key, run)
    return CompiledEnvironment(
        project=str(snapshot.project),
        environment=str(snapshot.environment),
        version=snapshot.version,
        generated_at=snapshot.generated_at,
        flags=MappingProxyType(compiled_flags),
        segment_keys=frozenset(segment_data),
        errors=errors,
        runs=runs,
        all_runs=tuple(all_runs),
        client_runs=tuple(client_runs),
        reusable=reusable,
    )


def _copy(mapping: Mapping[str, T]) -> dict[str, T]:
    """A copy of a dict or of the dict behind a ``MappingProxyType`` (a C-level copy)."""
    if isinstance(mapping, dict | MappingProxyType):
        return mapping.copy()
    return dict(mapping)


def _environment(
    snapshot: Snapshot,
    flags: dict[str, CompiledFlag],
    segment_data: Mapping[str, Any],
    errors: tuple[CompileError, ...],
    reusable: Callable[[tuple[dict[str, int], dict[str, int]]], _Reusable],
) -> CompiledEnvironment:
    """The compiled environment of ``flags``, in their order; ``reusable`` gets the positions
    of each flag in ``all_runs`` and ``client_runs`` (so a patch can replace one in place)."""
    runs = {key: flag.run for key, flag in flags.items()}
    client = [key for key, flag in flags.items() if flag.client_side]
    return CompiledEnvironment(
        project=str(snapshot.project),
        environment=str(snapshot.environment),
        version=snapshot.version,
        generated_at=snapshot.generated_at,
        flags=MappingProxyType(flags),
        segment_keys=frozenset(segment_data),
        errors=errors,
        runs=runs,
        all_runs=tuple(runs.items()),
        client_runs=tuple((key, runs[key]) for key in client),
        reusable=reusable(
            ({key: i for i, key in enumerate(runs)}, {key: i for i, key in enumerate(client)})
        ),
    )


# ----------------------------------------------------------------------------- validation


def _check_graph(
    root: str,
    edges: Sequence[tuple[str, str]],
    neighbours: Callable[[str], list[str]],
    what: str,
) -> None:
    """Refuse a cycle through ``root`` or nesting deeper than ``MAX_NESTING``.

    ``edges`` are the root's own references as ``(path, key)``; errors point at one of them.
    """
    depth: dict[str, int] = {}

    def visit(key: str, stack: list[str]) -> int:
        if key in stack:
            raise _Cycle([*stack[stack.index(key) :], key])
        if key in depth:
            if len(stack) + depth[key] > MAX_NESTING:
                raise _TooDeep
            return depth[key]
        if len(stack) >= MAX_NESTING:
            raise _TooDeep
        stack.append(key)
        deepest = max((visit(k, stack) for k in neighbours(key)), default=0)
        stack.pop()
        depth[key] = deepest + 1
        return deepest + 1

    for path, key in edges:
        try:
            visit(key, [root])
        except _Cycle as cycle:
            raise InvalidAt(path, f"{what} cycle: {' -> '.join(cycle.keys)}") from None
        except _TooDeep:
            raise InvalidAt(path, f"{what}s nested more than {MAX_NESTING} deep") from None


class _Cycle(Exception):
    def __init__(self, keys: list[str]) -> None:
        super().__init__(keys)
        self.keys = keys


class _TooDeep(Exception):
    pass


def _prereq_keys(flag: Any) -> list[str]:
    items = getattr(flag, "prerequisites", ())
    if not isinstance(items, ARRAYS):
        return []
    return [p.key for p in items if isinstance(getattr(p, "key", None), str)]


def _placeholder_prereq(flag: Any) -> _Prereq:
    variations = getattr(flag, "variations", ())
    indexes = frozenset(
        v.idx
        for v in (variations if isinstance(variations, ARRAYS) else ())
        if isinstance(getattr(v, "idx", None), int)
    )
    return _Prereq(_constant(MALFORMED_FLAG), getattr(flag, "enabled", False) is True, indexes)


def validate_flag(
    flag: FlagSnapshot,
    segments: Mapping[str, SegmentSnapshot],
    flags: Mapping[str, FlagSnapshot],
) -> None:
    """Check one flag as ``compile_snapshot`` would; ``CompileError`` paths are relative to it.

    ``flags`` are the environment's other flags (a stale copy of this one is ignored) and
    ``segments`` its segments; their own contents are not checked, only the flag's use of them.
    Pass every flag of the environment: a prerequisite cycle can only be seen through the
    flags given (a flag missing from ``flags`` counts as unknown, which is allowed).
    """
    try:
        key = text(getattr(flag, "key", None), "key")
        others = {**flags, key: flag}
        edges = [
            (f"prerequisites[{i}].key", k) for i, k in enumerate(_prereq_keys(flag)) if k != key
        ]
        _check_graph(key, edges, lambda k: _prereq_keys(others.get(k)), "prerequisite")

        def resolve_prereq(prereq_key: str, path: str) -> _Prereq | None:
            other = others.get(prereq_key)
            return None if other is None else _placeholder_prereq(other)

        def resolve_segment(segment_key: str, path: str) -> Matcher | None:
            return never if segment_key in segments else None

        build_flag(flag, resolve_prereq, resolve_segment)
    except InvalidAt as exc:
        raise CompileError(exc.path, exc.message) from None


def validate_segment(segment: SegmentSnapshot, segments: Mapping[str, SegmentSnapshot]) -> None:
    """Check one segment as ``compile_snapshot`` would; paths are relative to the segment."""
    try:
        key = text(getattr(segment, "key", None), "key")
        others = {**segments, key: segment}
        edges = [(p, k) for p, k in segment_references(segment)]
        _check_graph(
            key,
            edges,
            lambda k: [ref for _, ref in segment_references(others.get(k))],
            "segment",
        )

        def resolve_segment(segment_key: str, path: str) -> Matcher | None:
            return never if segment_key in others else None

        compile_segment(segment, resolve_segment)
    except InvalidAt as exc:
        raise CompileError(exc.path, exc.message) from None
