"""Unleash's feature export (``features``, ``featureStrategies``, ``featureEnvironments``,
``segments``; the older state export's inline ``strategies`` and ``environments`` too) as a Vane
project document for one environment.

An Unleash feature is on for a context when its environment is enabled and any of its
strategies holds. Each becomes a boolean Vane flag (``true`` idx 0, ``false`` idx 1) whose rules
serve ``true`` where a strategy holds: the strategy's constraints and segments as clauses, a
``flexibleRollout`` as a rollout of ``true`` and ``false`` by its stickiness, ``userWithId`` as a
clause on the key; ``false`` otherwise. Strategies that always serve ``true`` go first (the
order of an ``or`` does not matter): then a single gradual rollout converts exactly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from control_plane.domain.projectfile.imports import (
    Converted,
    Json,
    Refused,
    check_key,
    document,
    guarded,
)

OPERATORS = {
    "IN": ("in", False),
    "NOT_IN": ("in", True),
    "STR_CONTAINS": ("contains", False),
    "STR_STARTS_WITH": ("startsWith", False),
    "STR_ENDS_WITH": ("endsWith", False),
    "NUM_EQ": ("in", False),
    "NUM_GT": ("greaterThan", False),
    "NUM_GTE": ("greaterThanOrEqual", False),
    "NUM_LT": ("lessThan", False),
    "NUM_LTE": ("lessThanOrEqual", False),
    "DATE_AFTER": ("after", False),
    "DATE_BEFORE": ("before", False),
    "SEMVER_EQ": ("semVerEqual", False),
    "SEMVER_GT": ("semVerGreaterThan", False),
    "SEMVER_LT": ("semVerLessThan", False),
}
ON, OFF = 0, 1
STICKINESS = {"default": "key", "userId": "key", "random": None}


def convert(data: Mapping[str, Any], environment: str) -> Converted:
    if not isinstance(data, Mapping) or not isinstance(data.get("features"), list):
        raise Refused("file", "not an Unleash export: no 'features' list")
    notes: list[str] = []
    segments = {
        s.get("id"): guarded(f"segment {s.get('name')}", _segment, s, notes)
        for s in _objects(data.get("segments"))
    }
    strategies, enabled = guarded("file", _by_feature, data, environment)
    flags = [
        guarded(
            f"feature {feature.get('name') if isinstance(feature, Mapping) else feature!r}",
            _flag,
            feature,
            environment,
            strategies,
            enabled,
            segments,
            notes,
        )
        for feature in data["features"]
        if not isinstance(feature, Mapping) or not feature.get("archived")
    ]
    return Converted(document(flags, [s for s, _ in segments.values()]), notes)


def _objects(found: Any) -> list[Mapping[str, Any]]:
    return [s for s in found if isinstance(s, Mapping)] if isinstance(found, list) else []


def _by_feature(
    data: Mapping[str, Any], environment: str
) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """The environment's strategies and state of each feature, by its name."""
    strategies: dict[str, list[Any]] = {}
    for strategy in data.get("featureStrategies") or []:
        if strategy.get("environment") == environment:
            strategies.setdefault(strategy.get("featureName"), []).append(strategy)
    enabled = {
        e.get("featureName"): e
        for e in data.get("featureEnvironments") or []
        if e.get("environment") == environment
    }
    return strategies, enabled


def _segment(ld: Mapping[str, Any], notes: list[str]) -> tuple[Json, str]:
    key = check_key("segment", ld.get("name"), notes)
    where = f"segment {ld.get('name')}"
    clauses = [_constraint(where, c, notes) for c in ld.get("constraints") or []]
    if not clauses:
        raise Refused(where, "no constraints (a Vane segment's rule needs one)")
    return {"key": key, "name": key, "description": str(ld.get("description") or ""),
            "rules": [{"clauses": clauses}]}, key  # fmt: skip


def _of_environment(
    feature: Mapping[str, Any],
    environment: str,
    strategies: Mapping[str, list[Any]],
    enabled: Mapping[str, Any],
) -> tuple[bool, list[Any], list[Any]]:
    """Whether the feature is enabled in the environment, its strategies and its variants,
    from whichever shape of export holds them."""
    name = str(feature.get("name"))
    for env in feature.get("environments") or []:  # the state export's inline environments
        if env.get("name") == environment:
            return bool(env.get("enabled")), env.get("strategies") or [], env.get("variants") or []
    if name in enabled:
        env = enabled[name]
        return bool(env.get("enabled")), strategies.get(name, []), env.get("variants") or []
    if "strategies" in feature:  # the oldest: one environment, inline
        return bool(feature.get("enabled")), feature["strategies"], feature.get("variants") or []
    return False, strategies.get(name, []), []


def _flag(
    feature: Mapping[str, Any],
    environment: str,
    strategies: Mapping[str, list[Any]],
    enabled: Mapping[str, Any],
    segments: Mapping[Any, tuple[Json, str]],
    notes: list[str],
) -> Json:
    key = check_key("feature", feature.get("name"), notes)
    where = f"feature {feature.get('name')}"
    on, found, variants = _of_environment(feature, environment, strategies, enabled)
    if variants or any(s.get("variants") for s in found):
        notes.append(f"{where}: variants (imported as on or off; its variants are not)")
    if feature.get("impressionData"):
        notes.append(f"{where}: impressionData (no Vane equivalent)")
    live = sorted(
        (s for s in found if not s.get("disabled")), key=lambda s: s.get("sortOrder") or 0
    )
    if len(live) < len(found):
        notes.append(f"{where}: disabled strategies (not imported)")
    rules = [_rule(where, s, segments, notes) for s in live]
    rules.sort(key=lambda r: "rollout" in r["serve"])  # a stable sort: certain ones first
    if sum("rollout" in r["serve"] for r in rules) > 1:
        notes.append(
            f"{where}: several gradual rollouts (a context matching two gets the first's chance "
            "only, not either's)"
        )
    fallthrough: Json = {"variation": ON if not found else OFF}  # no strategy: the state
    for i, rule in enumerate(rules):
        if not rule["clauses"]:  # holds for everyone: what follows never decides
            fallthrough, rules = rule["serve"], rules[:i]
            break
    return {
        "key": key,
        "name": key,
        "description": str(feature.get("description") or ""),
        "type": "boolean",
        "temporary": feature.get("type", "release") in ("release", "experiment"),
        "variations": [
            {"value": True, "idx": ON, "name": "on"},
            {"value": False, "idx": OFF, "name": "off"},
        ],
        "environments": {
            environment: {
                "enabled": on,
                "offVariation": OFF,
                "fallthrough": fallthrough,
                "rules": rules,
            }
        },
    }


def _rule(
    where: str,
    strategy: Mapping[str, Any],
    segments: Mapping[Any, tuple[Json, str]],
    notes: list[str],
) -> Json:
    name = strategy.get("name") or strategy.get("strategyName")
    where = f"{where} strategy {name}"
    parameters = strategy.get("parameters") or {}
    clauses = [_constraint(where, c, notes) for c in strategy.get("constraints") or []]
    for id_ in strategy.get("segments") or []:
        if id_ not in segments:
            raise Refused(where, f"segment {id_!r}, not in the export")
        clauses.append({"op": "segmentMatch", "values": [segments[id_][1]], "negate": False})
    serve: Json = {"variation": ON}
    if name == "userWithId":
        ids = [u.strip() for u in str(parameters.get("userIds") or "").split(",") if u.strip()]
        clauses.append({"attribute": "key", "op": "in", "values": ids, "negate": False})
    elif name == "flexibleRollout":
        serve = _rollout(where, parameters)
    elif name != "default":
        raise Refused(
            where, f"the strategy {name!r} (Vane converts default, flexibleRollout, userWithId)"
        )
    rule: Json = {"clauses": clauses, "serve": serve}
    if strategy.get("title"):
        rule["description"] = str(strategy["title"])
    return rule


def _rollout(where: str, parameters: Mapping[str, Any]) -> Json:
    try:
        percent = int(str(parameters.get("rollout", "100")))
    except ValueError:
        raise Refused(where, f"rollout {parameters.get('rollout')!r}: not a percent") from None
    if not 0 <= percent <= 100:
        raise Refused(where, f"rollout {percent}: not a percent")
    stickiness = str(parameters.get("stickiness") or "default")
    bucket_by = STICKINESS.get(stickiness, stickiness)
    if bucket_by is None:
        raise Refused(where, "random stickiness (Vane buckets by an attribute)")
    if percent in (0, 100):
        return {"variation": ON if percent == 100 else OFF}
    served: Json = {
        "rollout": [{"idx": ON, "weight": percent}, {"idx": OFF, "weight": 100 - percent}]
    }
    if bucket_by != "key":
        served["bucketBy"] = bucket_by
    return served


def _constraint(where: str, ld: Any, notes: list[str]) -> Json:
    if not isinstance(ld, Mapping) or ld.get("operator") not in OPERATORS:
        op = ld.get("operator") if isinstance(ld, Mapping) else ld
        raise Refused(where, f"constraint operator {op!r}")
    op, negate = OPERATORS[ld["operator"]]
    if ld.get("caseInsensitive") and op in ("in", "contains", "startsWith", "endsWith"):
        raise Refused(where, f"a case-insensitive {ld['operator']} (Vane compares exactly)")
    attribute = str(ld.get("contextName") or "")
    if attribute == "currentTime":
        raise Refused(where, "a constraint on currentTime")
    values = list(ld.get("values") or ([ld["value"]] if ld.get("value") is not None else []))
    if ld["operator"].startswith("NUM_"):
        values = [_number(where, v) for v in values]
    negate = negate != bool(ld.get("inverted"))
    if negate:
        notes.append(
            f"{where}: a negated constraint (a context without {attribute} matches no Vane clause)"
        )
    return {
        "attribute": "key" if attribute == "userId" else attribute,
        "op": op,
        "values": values,
        "negate": negate,
    }


def _number(where: str, value: Any) -> int | float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise Refused(where, f"{value!r} is not a number") from None
    return int(number) if number.is_integer() else number
