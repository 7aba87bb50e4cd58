"""One flag compiled into its evaluation closure ``(context, key) -> Evaluation``.

Compiling is where every check of a flag happens, so evaluating never has to: variation indexes
exist, rollout weights are non-negative integers summing to 100000, each serve has exactly one
of ``variation`` / ``rollout``, operators are known and their clause values usable (regexes
compile, dates and versions parse). These checks do not depend on ``enabled``, so toggling a
flag can never make a snapshot invalid.

Each flag becomes one closure specialised to its shape, and every ``Evaluation`` it can return
(per reason, rule and variation) is built here, once. The flag's prerequisites and segments
come compiled already, through resolvers (``shared.engine.snapshot`` orders the compiling with
``shared.engine.graph``), so this module never looks beyond the flag it builds.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from shared.engine.bucketing import WEIGHT_SCALE, bucket, choose, cumulative, hash32, mmh3_hash
from shared.engine.contexts import Context, check_kind, part_of
from shared.engine.model import Evaluation, InvalidAt, Reason
from shared.engine.operators import is_number
from shared.engine.rules import (
    Matcher,
    SegmentResolver,
    StringIn,
    bucket_input,
    check_search_budget,
    compile_rule_clauses,
    sequence,
    text,
)
from shared.wire.kinds import USER
from shared.wire.snapshot import (
    FlagSnapshot,
    Prerequisite,
    Rule,
    Serve,
    Target,
    Variation,
    WeightedVariation,
)

FlagFn = Callable[[Context, str], Evaluation]

FLAG_TYPES = frozenset({"boolean", "string", "number", "json"})


class Prereq(NamedTuple):
    """A built flag, as what a dependent flag needs to know about it as a prerequisite."""

    run: FlagFn
    enabled: bool
    variations: frozenset[int]


# Resolves a prerequisite key met at ``path``: the built flag, or None for an unknown flag.
PrereqResolver = Callable[[str, str], Prereq | None]


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


def constant_run(evaluation: Evaluation) -> FlagFn:
    """A closure that always returns ``evaluation``."""

    def constant(context: Context, key: str) -> Evaluation:
        return evaluation

    return constant


def _rollout(
    salt: str,
    bucket_by: str,
    kind: str | None,
    path: str,
    thresholds: tuple[int, ...],
    results: tuple[Evaluation, ...],
) -> _Serve:
    # ``choose`` picks the item; the closures below inline it (one call fewer per evaluation)
    last = len(results) - 1
    # bucket 0 (a context that cannot be bucketed: the first item with a weight)
    unbucketed = results[choose(thresholds, 0)]
    if bucket_by != "key" or kind not in (None, USER):
        hashed = bucket_input(kind, bucket_by, path)

        def by_attribute(context: Context, key: str) -> Evaluation:
            value = hashed(context, key)
            slot = 0 if value is None else bucket(salt, value)
            return results[min(bisect_right(thresholds, slot), last)]

        return _Serve(None, by_attribute)
    # By the user's key, which the evaluator resolved: ``""`` when the context has no user.
    if len(results) == 2:
        first, second = results
        cut = thresholds[0]

        def split_by_key(context: Context, key: str) -> Evaluation:
            if not key:
                return unbucketed
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
                if not key:
                    return unbucketed
                data = salt + key
                h = mmh3_hash(data, 0, False) if data.isascii() else hash32(data)
                return first if (h * WEIGHT_SCALE) >> 32 < cut else second

            return in_rule_then_split_by_key

        return _Serve(None, split_by_key, after_rule)

    def by_key(context: Context, key: str) -> Evaluation:
        if not key:
            return unbucketed
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
        return _Serve(fixed, constant_run(fixed))
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
    check_kind(serve.context_kind, f"{path}.contextKind")
    kind = serve.context_kind
    return _rollout(salt, bucket_by, kind, f"{path}.bucketBy", cumulative(weights), tuple(results))


Rules = tuple[tuple[Matcher, Evaluation | None, FlagFn], ...]
Prereqs = tuple[tuple[FlagFn | None, int, Evaluation], ...]
# Individual targets, in order, by kind: (kind, key -> result). A flag whose targets are all on
# users has one entry, looked up with the user key alone.
Targets = tuple[tuple[str, Mapping[str, Evaluation]], ...]


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
    kinded: Targets,
    rules: Rules,
    fallthrough: _Serve,
    shapes: Sequence[StringIn | None],
) -> FlagFn:
    """One closure per flag shape, so the common shapes run without loops or checks.
    ``shapes``: each rule's clauses, when they are one ``StringIn``."""
    fall = fallthrough.run
    targets = kinded[0][1] if len(kinded) == 1 and kinded[0][0] == USER else None
    if not prereqs and not kinded:
        if not rules:
            return fall
        first_match, first_hit, _ = rules[0]
        if len(rules) == 1 and first_hit is not None:
            return _one_rule(first_match, first_hit, fallthrough, shapes[0])

    def flag(context: Context, key: str) -> Evaluation:
        for run, required, failed in prereqs:
            if run is None or run(context, key).variation != required:
                return failed
        if targets is not None:
            hit = targets.get(key)
            if hit is not None:
                return hit
        elif kinded:
            for kind, table in kinded:
                part = part_of(context, key, kind)
                if part is not None:
                    hit = table.get(part[1])
                    if hit is not None:
                        return hit
        for match, fixed, serve in rules:
            if match(context, key):
                if fixed is not None:
                    return fixed
                return serve(context, key)
        return fall(context, key)

    return flag


def _targets(
    flag: FlagSnapshot,
    variations: Mapping[int, Variation],
    make: Callable[[int, Reason], Evaluation],
) -> Targets:
    """The flag's individual targets, grouped by kind in order (the first listing of a key
    wins)."""
    kinded: list[tuple[str, dict[str, Evaluation]]] = []
    for i, target in enumerate(sequence(flag.targets, "targets")):
        path = f"targets[{i}]"
        if not isinstance(target, Target):
            raise InvalidAt(path, "expected {variation, values}")
        hit = make(
            _variation(target.variation, f"{path}.variation", variations), Reason.TARGET_MATCH
        )
        kind = check_kind(target.context_kind, f"{path}.contextKind")
        if not kinded or kinded[-1][0] != kind:
            kinded.append((kind, {}))
        table = kinded[-1][1]
        for j, value in enumerate(sequence(target.values, f"{path}.values")):
            table.setdefault(text(value, f"{path}.values[{j}]"), hit)
    return tuple(kinded)


def build_flag(
    flag: Any, resolve_prereq: PrereqResolver, resolve_segment: SegmentResolver
) -> Prereq:
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

    kinded = _targets(flag, variations, make)

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

    check_search_budget(flag.rules, "this flag's patterns and contains values together")

    def fallthrough_result(idx: int, in_rollout: bool) -> Evaluation:
        return make(idx, Reason.FALLTHROUGH, in_rollout=in_rollout)

    fallthrough = _serve(
        flag.fallthrough, "fallthrough", variations, fallthrough_result, salt, bucket_by
    )
    run = (
        _assemble(tuple(prereqs), kinded, tuple(rules), fallthrough, shapes)
        if flag.enabled
        else constant_run(off)
    )
    return Prereq(run, bool(flag.enabled), frozenset(variations))
