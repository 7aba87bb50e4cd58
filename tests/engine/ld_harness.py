"""LaunchDarkly sdk-test-harness evaluation data, loaded and translated into Vane's model.

Loading follows the harness's ``data_files.md`` and its ``data/substitutions.go``: constants and
parameters are substituted into the raw text (``"<NAME>"`` becomes the value's JSON, a bare
``<NAME>`` its text), parameter lists expand into every permutation, and the result is parsed.

Translating raises ``Unmappable`` with the reason when a case relies on something Vane's model
cannot express; everything else is translated as literally as possible.

Contexts (multi-kind ones too) pass unchanged; kinds translate one for one: a clause's, a
rollout's and a weighted segment rule's ``contextKind``, ``contextTargets`` (a user entry without
values stands for the user ``targets`` of its variation, as in LD) and a segment's
``includedContexts``/``excludedContexts``. Attributes pass unchanged: Vane reads them as LD does
(a reference where the clause names its kind, a literal name where it does not).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from control_plane.domain.projectfile.imports import flag_type
from shared.wire.snapshot import (
    Clause,
    ContextKeys,
    FlagSnapshot,
    Prerequisite,
    Rule,
    SegmentRule,
    SegmentSnapshot,
    Serve,
    Snapshot,
    Target,
    Variation,
    WeightedVariation,
)

# --------------------------------------------------------------------------------- YAML loading


# libyaml's parser where PyYAML has it (collecting the suite parses these files hundreds of times)
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _JsonishLoader(_SafeLoader):  # type: ignore[misc,valid-type]  # PyYAML ships no stubs
    """YAML with JSON's scalars: ``on``/``yes`` are strings, no dates, no base-60 integers."""


_JsonishLoader.yaml_implicit_resolvers = {
    first: [
        (tag, rx)
        for tag, rx in resolvers
        if tag
        not in {
            "tag:yaml.org,2002:bool",
            "tag:yaml.org,2002:int",
            "tag:yaml.org,2002:float",
            "tag:yaml.org,2002:timestamp",
        }
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_JsonishLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_JsonishLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789")
)
_JsonishLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?$"),
    list("-+0123456789."),
)


def _load(text: str) -> Any:
    return yaml.load(text, Loader=_JsonishLoader)


def _replace(text: str, values: Mapping[str, Any]) -> str:
    for name, value in values.items():
        typed = json.dumps(value)
        text = text.replace(f'"<{name}>"', typed)
        text = text.replace(f"<{name}>", value if isinstance(value, str) else typed)
    return text


def _permutations(parameters: list[Any]) -> list[dict[str, Any]]:
    if not parameters:
        return []
    if isinstance(parameters[0], dict):
        return [dict(p) for p in parameters]
    # A list of lists: every combination, the first list varying fastest (as the harness does).
    combos = itertools.product(*reversed(parameters))
    return [{k: v for part in reversed(combo) for k, v in part.items()} for combo in combos]


def expand(text: str) -> list[dict[str, Any]]:
    """The documents one data file stands for, after constants and parameters."""
    raw = _load(text) or {}
    constants = raw.get("constants") or {}
    parameter_sets = _permutations(raw.get("parameters") or [])
    if not constants and not parameter_sets:
        return [raw]
    if not parameter_sets:
        return [_load(_replace(text, constants))]
    return [
        _load(_replace(_replace(_replace(text, constants), params), constants))
        for params in parameter_sets
    ]


@dataclass(frozen=True)
class Case:
    id: str
    file: str
    doc: dict[str, Any]
    evaluation: dict[str, Any]


def load_cases(folder: Path) -> Iterator[Case]:
    seen: dict[str, int] = {}
    for path in sorted(folder.glob("*.y*ml")) + sorted(folder.glob("*.json")):
        for doc in expand(path.read_text(encoding="utf-8")):
            for evaluation in doc.get("evaluations") or []:
                name = evaluation.get("name") or evaluation.get("flagKey", "?")
                case_id = f"{path.stem}: {doc.get('name', '')} / {name}"
                seen[case_id] = seen.get(case_id, 0) + 1
                if seen[case_id] > 1:
                    case_id = f"{case_id} #{seen[case_id]}"
                yield Case(case_id, path.name, doc, evaluation)


# ---------------------------------------------------------------------------------- translating


class Unmappable(Exception):
    """The case relies on something Vane's model does not have; ``reason`` says what."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


BUCKETING = "needs LaunchDarkly's SHA-1 bucket value (Vane buckets with murmur3)"


def translate_context(ld: Any) -> dict[str, Any]:
    if not isinstance(ld, dict):
        raise Unmappable("context is not an object")
    if ld.get("kind") == "multi":
        return ld
    context = {k: v for k, v in ld.items() if k != "custom"}
    for name, value in (ld.get("custom") or {}).items():  # the old user format
        context.setdefault(name, value)
    return context


def _clause(ld: Mapping[str, Any]) -> Clause:
    op = ld.get("op")
    values = tuple(ld.get("values") or ())
    negate = bool(ld.get("negate", False))
    if op == "segmentMatch":
        return Clause(op=op, values=values, negate=negate)
    return Clause(
        op=str(op),
        attribute=ld.get("attribute"),
        values=values,
        negate=negate,
        context_kind=ld.get("contextKind"),
    )


def _serve(ld: Mapping[str, Any]) -> Serve:
    if "variation" in ld:
        return Serve(variation=ld["variation"])
    rollout = ld.get("rollout")
    if rollout is None:
        return Serve()
    return Serve(
        rollout=tuple(
            WeightedVariation(item.get("variation"), item.get("weight", 0))
            for item in rollout.get("variations") or ()
        ),
        bucket_by=rollout.get("bucketBy"),
        context_kind=rollout.get("contextKind"),
    )


def _is_rollout(ld: Mapping[str, Any] | None) -> bool:
    return isinstance(ld, Mapping) and "variation" not in ld and ld.get("rollout") is not None


def _targets(ld: Mapping[str, Any]) -> list[Target]:
    """The individual targets in LD's order, each with its kind."""
    user_targets = ld.get("targets") or []
    context_targets = ld.get("contextTargets") or []
    if not context_targets:
        return [Target(variation=t["variation"], values=tuple(t["values"])) for t in user_targets]
    out = []
    for target in context_targets:
        kind = target.get("contextKind", "user")
        if kind == "user" and not target.get("values"):
            # A placeholder for the user targets serving the same variation.
            out += [
                Target(variation=t["variation"], values=tuple(t["values"]))
                for t in user_targets
                if t["variation"] == target["variation"]
            ]
        else:
            values = tuple(target.get("values") or ())
            out.append(Target(variation=target["variation"], values=values, context_kind=kind))
    return out


def translate_flag(key: str, ld: Mapping[str, Any]) -> FlagSnapshot:
    on = bool(ld.get("on", False))
    prerequisites = ld.get("prerequisites") or []
    if "offVariation" in ld:
        off = ld["offVariation"]
    elif on and not prerequisites:
        off = 0  # never served: an enabled flag without prerequisites has no use for it
    else:
        raise Unmappable("flag without an off variation (Vane flags always have one)")
    if "fallthrough" in ld:
        fallthrough = _serve(ld["fallthrough"])
    elif not on:
        fallthrough = Serve(variation=off)  # never served while the flag is off
    else:
        fallthrough = Serve()
    variations = list(ld.get("variations") or [])
    return FlagSnapshot(
        key=key,
        version=1,
        type=flag_type(variations),
        variations=tuple(Variation(i, v) for i, v in enumerate(variations)),
        enabled=on,
        off_variation=off,
        fallthrough=fallthrough,
        rules=tuple(
            Rule(
                id=str(r.get("id", "")),
                clauses=tuple(_clause(c) for c in r.get("clauses") or ()),
                serve=_serve(r),
            )
            for r in ld.get("rules") or ()
        ),
        targets=tuple(_targets(ld)),
        prerequisites=tuple(
            Prerequisite(key=p["key"], variation=p["variation"]) for p in prerequisites
        ),
        salt=ld.get("salt"),
    )


def translate_segment(key: str, ld: Mapping[str, Any]) -> SegmentSnapshot:
    if ld.get("unbounded"):
        raise Unmappable("big (unbounded) segments")

    def by_kind(field: str) -> tuple[ContextKeys, ...]:
        return tuple(
            ContextKeys(
                context_kind=e.get("contextKind", "user"), values=tuple(e.get("values") or ())
            )
            for e in ld.get(field) or []
        )

    rules = []
    for i, rule in enumerate(ld.get("rules") or []):
        if rule.get("weight") is not None:
            raise Unmappable(f"weighted segment rule: {BUCKETING}")
        rules.append(
            SegmentRule(
                id=str(rule.get("id", f"rule{i}")),
                clauses=tuple(_clause(c) for c in rule.get("clauses") or ()),
            )
        )
    return SegmentSnapshot(
        key=key,
        version=1,
        included=tuple(ld.get("included") or ()),
        excluded=tuple(ld.get("excluded") or ()),
        included_contexts=by_kind("includedContexts"),
        excluded_contexts=by_kind("excludedContexts"),
        rules=tuple(rules),
        salt=ld.get("salt"),
    )


def _reachable(
    flag_key: str, flags: Mapping[str, Any], segments: Mapping[str, Any]
) -> tuple[list[str], list[str]]:
    flag_keys: list[str] = []
    segment_keys: list[str] = []
    pending_flags: list[str] = [flag_key]
    pending_segments: list[str] = []

    def clauses_of(item: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
        for rule in item.get("rules") or []:
            yield from rule.get("clauses") or []

    while pending_flags or pending_segments:
        if pending_flags:
            key = pending_flags.pop()
            if key in flag_keys or key not in flags:
                continue
            flag_keys.append(key)
            pending_flags += [p["key"] for p in flags[key].get("prerequisites") or []]
            item = flags[key]
        else:
            key = pending_segments.pop()
            if key in segment_keys or key not in segments:
                continue
            segment_keys.append(key)
            item = segments[key]
        for clause in clauses_of(item):
            if clause.get("op") == "segmentMatch":
                pending_segments += [v for v in clause.get("values") or [] if isinstance(v, str)]
    return flag_keys, segment_keys


def translate(case: Case) -> tuple[Snapshot, dict[str, Any]]:
    """The Vane snapshot (only what the evaluated flag can reach) and context for a case."""
    if case.doc.get("requireCapability"):
        raise Unmappable(
            f"needs SDK capability {case.doc['requireCapability']!r} (typed variation methods "
            "and WRONG_TYPE belong to SDK clients, not the engine)"
        )
    context = translate_context(case.evaluation.get("context"))
    sdk = case.doc.get("sdkData") or {}
    ld_flags = {k: v for k, v in (sdk.get("flags") or {}).items() if not v.get("deleted")}
    ld_segments = sdk.get("segments") or {}
    flag_key = case.evaluation["flagKey"]
    flag_keys, segment_keys = _reachable(flag_key, ld_flags, ld_segments)

    expect = case.evaluation.get("expect") or {}
    reason = expect.get("reason") or {}
    if reason.get("errorKind") != "MALFORMED_FLAG":
        if reason.get("inExperiment"):
            raise Unmappable(f"experiment rollout: {BUCKETING}")
        for key in flag_keys:
            ld = ld_flags[key]
            rules = ld.get("rules") or []
            if key != flag_key:
                if _is_rollout(ld.get("fallthrough")) or any(_is_rollout(r) for r in rules):
                    raise Unmappable(f"prerequisite with a rollout: {BUCKETING}")
            elif reason.get("kind") == "FALLTHROUGH" and _is_rollout(ld.get("fallthrough")):
                raise Unmappable(f"fallthrough rollout: {BUCKETING}")
            elif reason.get("kind") == "RULE_MATCH":
                index = reason.get("ruleIndex", 0)
                if index < len(rules) and _is_rollout(rules[index]):
                    raise Unmappable(f"rule rollout: {BUCKETING}")

    snapshot = Snapshot(
        project="ld",
        environment="conformance",
        version=1,
        flags={k: translate_flag(k, ld_flags[k]) for k in flag_keys},
        segments={k: translate_segment(k, ld_segments[k]) for k in segment_keys},
    )
    return snapshot, context


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values that, unlike Python's, keeps booleans apart from numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b
