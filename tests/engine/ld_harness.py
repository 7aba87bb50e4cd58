"""LaunchDarkly sdk-test-harness evaluation data, loaded and translated into Vane's model.

Loading follows the harness's ``data_files.md`` and its ``data/substitutions.go``: constants and
parameters are substituted into the raw text (``"<NAME>"`` becomes the value's JSON, a bare
``<NAME>`` its text), parameter lists expand into every permutation, and the result is parsed.

Translating raises ``Unmappable`` with the reason when a case relies on something Vane's model
cannot express; everything else is translated as literally as possible.

Vane contexts have one kind and its targeting is not kind-scoped, so LD's kind-scoped data is
specialised to the kind of the case's (single-kind) context, which is exactly what LaunchDarkly
applies to such a context: user ``targets`` and segment ``included``/``excluded`` only for a
``user`` context, ``contextTargets`` and ``includedContexts``/``excludedContexts`` only for their
own kind, and a clause scoped to another kind (other than on the ``kind`` attribute) becomes a
clause that never matches, as it never does in LD (its attribute cannot be found). Multi-kind
contexts are not translated.
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

from shared.wire.snapshot import (
    Clause,
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


class _JsonishLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no stubs
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
        raise Unmappable("multi-kind context (Vane contexts have one kind)")
    context = {k: v for k, v in ld.items() if k != "custom"}
    for name, value in (ld.get("custom") or {}).items():  # the old user format
        context.setdefault(name, value)
    return context


def _attribute(clause: Mapping[str, Any]) -> str | None:
    """An LD attribute reference as a Vane attribute name (plain, top-level)."""
    attribute = clause.get("attribute")
    if not isinstance(attribute, str):
        return None
    if "contextKind" not in clause or not attribute.startswith("/"):
        return attribute  # a literal name, slashes included
    parts = attribute[1:].split("/")
    if any(p == "" for p in parts) or re.search(r"~(?![01])", attribute):
        raise Unmappable("malformed LD attribute reference (Vane attributes are plain names)")
    if len(parts) > 1:
        raise Unmappable("nested attribute reference (Vane reads top-level attributes)")
    return parts[0].replace("~1", "/").replace("~0", "~")


# ``key in []``: the key is always present and never in an empty list, so this never matches.
NEVER = Clause(op="in", attribute="key", values=())


def _clause(ld: Mapping[str, Any], kind: str, context: Mapping[str, Any]) -> Clause:
    op = ld.get("op")
    values = tuple(ld.get("values") or ())
    negate = bool(ld.get("negate", False))
    if op == "segmentMatch":
        return Clause(op=op, values=values, negate=negate)
    attribute = _attribute(ld)
    if attribute != "kind" and ld.get("contextKind", "user") != kind:
        return NEVER
    if attribute == "anonymous" and "anonymous" not in context:
        raise Unmappable("LD's built-in 'anonymous' attribute defaults to false; Vane has none")
    return Clause(op=str(op), attribute=attribute, values=values, negate=negate)


def _serve(ld: Mapping[str, Any], kind: str) -> Serve:
    if "variation" in ld:
        return Serve(variation=ld["variation"])
    rollout = ld.get("rollout")
    if rollout is None:
        return Serve()
    if rollout.get("contextKind", "user") != kind:
        raise Unmappable("rollout bucketed by another context kind")
    return Serve(
        rollout=tuple(
            WeightedVariation(item.get("variation"), item.get("weight", 0))
            for item in rollout.get("variations") or ()
        ),
        bucket_by=_attribute({**rollout, "attribute": rollout["bucketBy"]})
        if "bucketBy" in rollout
        else None,
    )


def _is_rollout(ld: Mapping[str, Any] | None) -> bool:
    return isinstance(ld, Mapping) and "variation" not in ld and ld.get("rollout") is not None


def _type(values: list[Any]) -> str:
    if values and all(isinstance(v, bool) for v in values):
        return "boolean"
    if values and all(isinstance(v, str) for v in values):
        return "string"
    if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return "number"
    return "json"


def _targets(ld: Mapping[str, Any], kind: str) -> list[Target]:
    """The individual targets LD checks for a context of ``kind``, in LD's order."""
    user_targets = ld.get("targets") or []
    context_targets = ld.get("contextTargets") or []
    if not context_targets:
        pairs = [(t["variation"], t["values"]) for t in user_targets] if kind == "user" else []
    else:
        pairs = []
        for target in context_targets:
            target_kind = target.get("contextKind", "user")
            if target_kind == "user" and not target.get("values"):
                # A placeholder for the user targets serving the same variation.
                if kind == "user":
                    pairs += [
                        (t["variation"], t["values"])
                        for t in user_targets
                        if t["variation"] == target["variation"]
                    ]
            elif target_kind == kind:
                pairs.append((target["variation"], target.get("values") or []))
    return [Target(variation=v, values=tuple(values)) for v, values in pairs]


def translate_flag(
    key: str, ld: Mapping[str, Any], kind: str, context: Mapping[str, Any]
) -> FlagSnapshot:
    on = bool(ld.get("on", False))
    prerequisites = ld.get("prerequisites") or []
    if "offVariation" in ld:
        off = ld["offVariation"]
    elif on and not prerequisites:
        off = 0  # never served: an enabled flag without prerequisites has no use for it
    else:
        raise Unmappable("flag without an off variation (Vane flags always have one)")
    if "fallthrough" in ld:
        fallthrough = _serve(ld["fallthrough"], kind)
    elif not on:
        fallthrough = Serve(variation=off)  # never served while the flag is off
    else:
        fallthrough = Serve()
    variations = list(ld.get("variations") or [])
    return FlagSnapshot(
        key=key,
        version=1,
        type=_type(variations),
        variations=tuple(Variation(i, v) for i, v in enumerate(variations)),
        enabled=on,
        off_variation=off,
        fallthrough=fallthrough,
        rules=tuple(
            Rule(
                id=str(r.get("id", "")),
                clauses=tuple(_clause(c, kind, context) for c in r.get("clauses") or ()),
                serve=_serve(r, kind),
            )
            for r in ld.get("rules") or ()
        ),
        targets=tuple(_targets(ld, kind)),
        prerequisites=tuple(
            Prerequisite(key=p["key"], variation=p["variation"]) for p in prerequisites
        ),
        salt=ld.get("salt"),
    )


def translate_segment(
    key: str, ld: Mapping[str, Any], kind: str, context: Mapping[str, Any]
) -> SegmentSnapshot:
    if ld.get("unbounded"):
        raise Unmappable("big (unbounded) segments")

    def keys(user_list: str, kind_list: str) -> list[str]:
        found = list(ld.get(user_list) or []) if kind == "user" else []
        for entry in ld.get(kind_list) or []:
            if entry.get("contextKind", "user") == kind:
                found += entry.get("values") or []
        return found

    included = keys("included", "includedContexts")
    excluded = keys("excluded", "excludedContexts")
    rules = []
    for i, rule in enumerate(ld.get("rules") or []):
        if rule.get("weight") is not None:
            raise Unmappable(f"weighted segment rule: {BUCKETING}")
        rules.append(
            SegmentRule(
                id=str(rule.get("id", f"rule{i}")),
                clauses=tuple(_clause(c, kind, context) for c in rule.get("clauses") or ()),
            )
        )
    return SegmentSnapshot(
        key=key,
        version=1,
        included=tuple(included),
        excluded=tuple(excluded),
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
    kind = context.get("kind") or "user"
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
        flags={k: translate_flag(k, ld_flags[k], kind, context) for k in flag_keys},
        segments={k: translate_segment(k, ld_segments[k], kind, context) for k in segment_keys},
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
