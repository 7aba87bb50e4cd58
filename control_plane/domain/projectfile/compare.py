"""Each resource of a document in one canonical form, and the field-by-field difference of two.

Both sides go through the same structs and the same rules (a rule's ``variation`` shorthand is
its ``serve``, a clause naming ``segment`` is a ``segmentMatch`` clause, a field left out takes
its default), so a document exported and read back compares equal to what is live. A rule or
segment rule without ``id`` takes the id of the live rule at its place: ids stay stable."""

from __future__ import annotations

from typing import Any

import msgspec

from control_plane.domain.flags.schemas import ClauseIn, RuleIn, ServeIn
from control_plane.domain.projectfile import schemas as s
from control_plane.domain.projectfile.export import plain
from control_plane.domain.projectfile.schemas import FieldChange
from control_plane.domain.segments.schemas import SegmentRuleIn

_JSON = msgspec.json.Encoder()
SETTINGS_FIELDS = ("enabled", "offVariation", "fallthrough", "targets", "prerequisites")
FIXED_METRIC_FIELDS = ("event", "aggregation", "numerator", "denominator", "quantile")


def _plain(value: Any) -> Any:
    return plain(value)


def clause(c: ClauseIn) -> dict[str, Any]:
    if c.segment is not None or c.op == "segmentMatch":
        keys = ([c.segment] if c.segment is not None else []) + list(c.values or [])
        return {"op": "segmentMatch", "values": keys, "negate": c.negate}
    return {**_plain(c), "op": c.op or "in"} if c.op else {"op": "in", **_plain(c)}


def _ids(given: list[str | None], live: list[str]) -> list[str | None]:
    return [
        i if i is not None else (live[n] if n < len(live) else None) for n, i in enumerate(given)
    ]


def rules(given: list[RuleIn], live: list[RuleIn] | None) -> list[dict[str, Any]]:
    ids = _ids([r.id for r in given], [str(r.id) for r in live or []])
    out = []
    for rule, rule_id in zip(given, ids, strict=True):
        serve = rule.serve or ServeIn(variation=rule.variation, rollout=rule.rollout)
        item = {"description": rule.description, "clauses": [clause(c) for c in rule.clauses]}
        out.append(
            {"id": rule_id, **item, "serve": _plain(serve)}
            if rule_id
            else {**item, "serve": _plain(serve)}
        )
    return out


def setting(given: s.FlagEnvironmentDoc, live: s.FlagEnvironmentDoc | None) -> dict[str, Any]:
    out: dict[str, Any] = _plain(msgspec.structs.replace(given, rules=[]))  # rules: below
    for target in out["targets"]:
        target["values"] = _once(target["values"])
    out["rules"] = rules(given.rules, live.rules if live else None)
    return out


def _once(keys: list[str]) -> list[str]:
    return list(dict.fromkeys(keys))


def _variations(given: s.FlagDoc, live: s.FlagDoc | None) -> list[dict[str, Any]]:
    names = {v.idx: v.name for v in live.variations} if live else {}
    out = []
    for position, item in enumerate(given.variations):
        idx = item.idx if item.idx is not None else position
        name = item.name if item.name is not None else names.get(idx)
        named = {"name": name} if name is not None else {}
        out.append({"idx": idx, "value": plain(item.value), **named})
    return out


def flag(given: s.FlagDoc, live: s.FlagDoc | None) -> dict[str, Any]:
    """The flag's own fields (its settings are compared one environment at a time)."""
    out: dict[str, Any] = _plain(msgspec.structs.replace(given, environments={}))
    del out["environments"]
    out["name"] = given.name if given.name is not None else given.key
    out["tags"] = list(dict.fromkeys(given.tags))
    out["variations"] = _variations(given, live)
    return out


def segment(given: s.SegmentDoc, live: s.SegmentDoc | None) -> dict[str, Any]:
    out: dict[str, Any] = _plain(given)
    out["name"] = given.name if given.name is not None else given.key
    out["included"], out["excluded"] = _once(given.included), _once(given.excluded)
    ids = _ids([r.id for r in given.rules], [str(r.id) for r in live.rules] if live else [])
    out["rules"] = [_segment_rule(r, i) for r, i in zip(given.rules, ids, strict=True)]
    return out


def _segment_rule(rule: SegmentRuleIn, rule_id: str | None) -> dict[str, Any]:
    out: dict[str, Any] = _plain(rule)
    out["clauses"] = [clause(c) for c in rule.clauses]
    if rule_id is not None:
        out["id"] = rule_id
    return out


def metric(given: s.MetricDoc) -> dict[str, Any]:
    """A ratio metric's ``event`` is its numerator's, given or not."""
    out: dict[str, Any] = plain(given)
    if given.event is None and given.numerator is not None:
        out["event"] = given.numerator.event
    return {k: v for k, v in out.items() if k != "key"}


def environment(given: s.EnvironmentDoc, live: s.EnvironmentDoc | None) -> dict[str, Any]:
    critical = given.critical
    if critical is None:
        critical = live.critical if live is not None else given.key == "production"
    name = given.name if given.name is not None else (live.name if live else given.key.title())
    return {"name": name, "critical": critical, "requiredApprovals": given.required_approvals}


def diff(before: Any, after: Any, path: str = "") -> list[FieldChange]:
    """Where ``after`` differs from ``before``: leaves of objects, items of equally long lists,
    a whole list when its length changed. Most of a document is as live: two values that are
    the same JSON differ nowhere, which is answered without walking them."""
    if isinstance(before, dict) and isinstance(after, dict):
        if not before:  # a resource created: each field given, as it is (what follows would)
            prefix = f"{path}." if path else ""
            return [FieldChange(f"{prefix}{k}", None, v) for k, v in after.items() if v is not None]
        if not path and _JSON.encode(before) == _JSON.encode(after):
            return []
        out: list[FieldChange] = []
        for key in [*before, *(k for k in after if k not in before)]:
            out += diff(before.get(key), after.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [
            c
            for i, (b, a) in enumerate(zip(before, after, strict=True))
            for c in diff(b, a, f"{path}[{i}]")
        ]
    if (before == after and type(before) is type(after)) or _same_number(before, after):
        return []
    return [FieldChange(path=path or "(all)", before=before, after=after)]


def _same_number(a: Any, b: Any) -> bool:
    numbers = (int, float)
    return (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )


def fields(changes: list[FieldChange]) -> set[str]:
    """The top-level fields ``changes`` touch (``rules[0].serve`` → ``rules``): what an update
    step sends."""
    return {c.path.split(".")[0].split("[")[0] for c in changes}
