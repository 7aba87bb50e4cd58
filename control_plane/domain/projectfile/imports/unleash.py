"""Unleash's feature export (``features``, ``featureStrategies``, ``featureEnvironments``,
``segments``; the older state export's inline ``strategies`` and ``environments`` too) as a Vane
project document: each environment wanted into the Vane environment it is mapped to
(``environments.targets``), a feature without data in one leaving its setting there as it is.

An Unleash feature is on for a context when its environment is enabled and any of its
strategies holds. Each becomes a boolean Vane flag (``true`` idx 0, ``false`` idx 1) whose rules
serve ``true`` where a strategy holds: the strategy's constraints and segments as clauses, a
``flexibleRollout`` as a rollout of ``true`` and ``false`` by its stickiness, ``userWithId`` as a
clause on the key; ``false`` otherwise. Strategies that always serve ``true`` go first (the
order of an ``or`` does not matter): then a single gradual rollout converts exactly.

A feature with variants (its environment's, or a strategy's own) becomes a ``json`` flag whose
values are what Unleash's ``getVariant`` returns: ``{"name": "disabled", "enabled": false}``
(idx 0, served where no strategy holds or the feature is off) and each variant's
``{"name", "enabled": true, "payload"}``. Where a strategy holds it serves its variants (a
strategy's own, else the environment's) as a rollout by their weights and stickiness, inside a
gradual rollout's share; a variant's overrides are rules before the strategy's, on the same
clauses plus the override's, serving the variant (inside the gradual rollout's share)."""

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
from control_plane.domain.projectfile.imports.environments import Target, Wanted, targets

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
DISABLED: Json = {
    "name": "disabled",
    "enabled": False,
}  # Unleash's variant of a feature that is off
STICKINESS = {"default": "key", "userId": "key", "random": None}


def convert(data: Mapping[str, Any], wanted: Wanted | str) -> Converted:
    if not isinstance(data, Mapping) or not isinstance(data.get("features"), list):
        raise Refused("file", "not an Unleash export: no 'features' list")
    notes: list[str] = []
    chosen = targets(environments(data), wanted, "this Unleash export (of one environment, inline)")
    segments = {
        s.get("id"): guarded(f"segment {s.get('name')}", _segment, s, notes)
        for s in _objects(data.get("segments"))
    }
    by_environment = {theirs: guarded("file", _by_feature, data, theirs) for theirs, _ in chosen}
    flags = [
        guarded(
            f"feature {feature.get('name') if isinstance(feature, Mapping) else feature!r}",
            _flag,
            feature,
            chosen,
            by_environment,
            segments,
            notes,
        )
        for feature in data["features"]
        if not isinstance(feature, Mapping) or not feature.get("archived")
    ]
    found = [f for f in flags if f is not None]
    return Converted(document(found, [s for s, _ in segments.values()]), notes, chosen)


def environments(data: Mapping[str, Any]) -> list[str] | None:
    """The environments the export names (of its strategies, features' states, inline
    environments, its list of environments), or ``None`` where it names none: the oldest
    export, one environment's, inline."""
    named = [
        *(s.get("environment") for s in _objects(data.get("featureStrategies"))),
        *(e.get("environment") for e in _objects(data.get("featureEnvironments"))),
        *(e.get("name") for e in _objects(data.get("environments"))),
        *(
            e.get("name")
            for f in _objects(data.get("features"))
            for e in _objects(f.get("environments"))
        ),
    ]
    found = sorted({name for name in named if isinstance(name, str)})
    return found or None


def _objects(found: Any) -> list[Mapping[str, Any]]:
    return [s for s in found if isinstance(s, Mapping)] if isinstance(found, list) else []


ByFeature = tuple[dict[str, list[Any]], dict[str, Any]]


def _by_feature(data: Mapping[str, Any], environment: str | None) -> ByFeature:
    """The environment's strategies and state of each feature, by its name (none for an export
    of one environment, inline)."""
    strategies: dict[str, list[Any]] = {}
    if environment is None:
        return strategies, {}
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
    feature: Mapping[str, Any], environment: str | None, by_feature: ByFeature
) -> tuple[bool, list[Any], list[Any]] | None:
    """Whether the feature is enabled in the environment, its strategies and its variants,
    from whichever shape of export holds them; ``None`` where the export has nothing of the
    feature in that environment."""
    name = str(feature.get("name"))
    strategies, enabled = by_feature
    for env in feature.get("environments") or []:  # the state export's inline environments
        if env.get("name") == environment:
            return bool(env.get("enabled")), env.get("strategies") or [], env.get("variants") or []
    if name in enabled:
        env = enabled[name]
        return bool(env.get("enabled")), strategies.get(name, []), env.get("variants") or []
    if "strategies" in feature:  # the oldest: one environment, inline
        return bool(feature.get("enabled")), feature["strategies"], feature.get("variants") or []
    if environment is None:
        return False, [], []
    return (False, strategies[name], []) if name in strategies else None


class _Variants:
    """A feature's variants as one flag's variations: ``disabled`` first (idx 0), then every
    variant of the environment and of its strategies, each once."""

    def __init__(
        self, where: str, found: list[Any], strategies: list[Any], values: list[Json]
    ) -> None:
        self.where = where
        self.feature = [v for v in found if isinstance(v, Mapping)]
        self.values = values  # shared by the flag's environments: one list of variations
        for variant in [*self.feature, *(v for s in strategies for v in _own_variants(s))]:
            self.idx(variant)

    def idx(self, variant: Mapping[str, Any]) -> int:
        name = variant.get("name")
        if not isinstance(name, str) or not name:
            raise Refused(self.where, f"a variant without a name: {variant!r}")
        value: Json = {"name": name, "enabled": True}
        if variant.get("payload") is not None:
            value["payload"] = variant["payload"]
        if value not in self.values:
            self.values.append(value)
        return self.values.index(value)

    def serve(self, where: str, strategy: Mapping[str, Any], percent: int) -> Json:
        """The variants the strategy serves, as a rollout within ``percent`` of its units."""
        variants = _own_variants(strategy) or self.feature
        if not variants:
            raise Refused(where, "no variants to serve (the feature has some elsewhere)")
        weights = [(self.idx(v), _weight(where, v)) for v in variants]
        total = sum(w for _, w in weights)
        if total <= 0:
            raise Refused(where, "variants with no weight")
        units = [(i, w * percent * 1000 // total) for i, w in weights]  # thousandths of a percent
        units[-1] = (units[-1][0], units[-1][1] + percent * 1000 - sum(u for _, u in units))
        if percent < 100:
            units.append((0, (100 - percent) * 1000))
        merged: dict[int, int] = {}
        for i, u in units:
            if u:
                merged[i] = merged.get(i, 0) + u
        if len(merged) == 1:
            return {"variation": next(iter(merged))}
        served: Json = {"rollout": [{"idx": i, "weight": u / 1000} for i, u in merged.items()]}
        bucket_by = _bucket_by(where, str(variants[0].get("stickiness") or "default"))
        if bucket_by != "key":
            served["bucketBy"] = bucket_by
        return served

    def overrides(self, rule: Json, strategy: Mapping[str, Any], percent: int) -> list[Json]:
        """Rules serving a variant to the contexts its overrides name, where the strategy holds
        (within a gradual rollout's share: the rest get ``disabled``, as in Unleash)."""
        stickiness = (strategy.get("parameters") or {}).get("stickiness") or "default"
        bucket_by = _bucket_by(self.where, str(stickiness))
        found = []
        for variant in _own_variants(strategy) or self.feature:
            for override in variant.get("overrides") or []:
                attribute = str(override.get("contextName") or "")
                values = [str(v) for v in override.get("values") or []]
                if not attribute or not values:
                    continue
                clause = {
                    "attribute": "key" if attribute == "userId" else attribute,
                    "op": "in",
                    "values": values,
                    "negate": False,
                }
                idx = self.idx(variant)
                serve: Json = {"variation": idx}
                if percent < 100:
                    serve = {
                        "rollout": [
                            {"idx": idx, "weight": percent},
                            {"idx": 0, "weight": 100 - percent},
                        ]
                    }
                    if bucket_by != "key":
                        serve["bucketBy"] = bucket_by
                found.append({"clauses": [*rule["clauses"], clause], "serve": serve})
        return found


def _own_variants(strategy: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [v for v in strategy.get("variants") or [] if isinstance(v, Mapping)]


def _weight(where: str, variant: Mapping[str, Any]) -> int:
    weight = variant.get("weight", 0)
    if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
        raise Refused(
            where, f"variant {variant.get('name')!r} weight {weight!r}: not a whole number"
        )
    return weight


class _Environment:
    """A feature in one of the export's environments: its state, strategies and variants."""

    def __init__(self, where: str, of: tuple[bool, list[Any], list[Any]], notes: list[str]):
        self.where = where
        self.on, self.found, self.variants = of
        self.live = sorted(
            (s for s in self.found if not s.get("disabled")), key=lambda s: s.get("sortOrder") or 0
        )
        if len(self.live) < len(self.found):
            notes.append(f"{where}: disabled strategies (not imported)")
        self.varied = bool(self.variants) or any(_own_variants(s) for s in self.live)

    def may_be_on(self) -> bool:
        return self.on and (bool(self.live) or not self.found)


def _flag(
    feature: Mapping[str, Any],
    chosen: list[Target],
    by_environment: Mapping[str | None, ByFeature],
    segments: Mapping[Any, tuple[Json, str]],
    notes: list[str],
) -> Json | None:
    key = check_key("feature", feature.get("name"), notes)
    where = f"feature {feature.get('name')}"
    if feature.get("impressionData"):
        notes.append(f"{where}: impressionData (no Vane equivalent)")
    several = len(chosen) > 1 and chosen[0][0] is not None
    present: dict[str, _Environment] = {}
    for theirs, ours in chosen:
        of = _of_environment(feature, theirs, by_environment[theirs])
        if of is not None:
            present[ours] = _Environment(
                where if not several else f"{where} in {theirs}", of, notes
            )
    lacking = " or ".join(repr(t) for t, o in chosen if o not in present)
    if not present:
        notes.append(f"{where}: no environment {lacking}, not imported")
        return None
    if lacking:
        notes.append(f"{where}: no environment {lacking} (left as it is there)")
    values: list[Json] | None = None
    if any(e.varied for e in present.values()):
        values = [DISABLED]
        _variants_everywhere(where, chosen, present)
    settings = {ours: _setting(env, segments, notes, values) for ours, env in present.items()}
    return {
        "key": key,
        "name": key,
        "description": str(feature.get("description") or ""),
        "type": "boolean" if values is None else "json",
        "temporary": feature.get("type", "release") in ("release", "experiment"),
        "variations": (
            [{"value": True, "idx": ON, "name": "on"}, {"value": False, "idx": OFF, "name": "off"}]
            if values is None
            else [{"value": v, "idx": i, "name": v["name"]} for i, v in enumerate(values)]
        ),
        "environments": settings,
    }


def _variants_everywhere(
    where: str, chosen: list[Target], present: Mapping[str, _Environment]
) -> None:
    """A feature with variants is a ``json`` flag in every environment: refused where it has
    none and may be on (Unleash's ``isEnabled`` would say so, its ``getVariant`` "disabled")."""
    with_them = [t for t, o in chosen if o in present and present[o].varied]
    for theirs, ours in chosen:
        if ours in present and not present[ours].varied and present[ours].may_be_on():
            raise Refused(
                where,
                f"variants in {with_them[0]} but none in {theirs}, where it is on (a Vane flag "
                "has one type: give it variants there too, or leave that environment out)",
            )


def _setting(
    env: _Environment,
    segments: Mapping[Any, tuple[Json, str]],
    notes: list[str],
    values: list[Json] | None,
) -> Json:
    """The feature's setting in one environment: its strategies as rules, and what is served
    where none holds; a ``json`` flag without variants here serves ``disabled``."""
    if values is not None and not env.varied:  # never on here: getVariant is "disabled"
        return {"enabled": env.on, "offVariation": 0, "fallthrough": {"variation": 0}, "rules": []}
    chosen = None if values is None else _Variants(env.where, env.variants, env.live, values)
    off = OFF if chosen is None else 0
    rules = _rules(env.where, env.live, segments, notes, chosen, off)
    fallthrough: Json = {"variation": off}
    if not env.found:  # no strategy: on for everyone, as the environment's state says
        fallthrough = {"variation": ON} if chosen is None else chosen.serve(env.where, {}, 100)
    for i, rule in enumerate(rules):
        if not rule["clauses"]:  # holds for everyone: what follows never decides
            fallthrough, rules = rule["serve"], rules[:i]
            break
    return {"enabled": env.on, "offVariation": off, "fallthrough": fallthrough, "rules": rules}


def _rules(
    where: str,
    live: list[Any],
    segments: Mapping[Any, tuple[Json, str]],
    notes: list[str],
    chosen: _Variants | None,
    off: int,
) -> list[Json]:
    """The strategies as rules (each variant override before its strategy's rule), those that
    never serve ``off`` first: an ``or`` of strategies keeps its meaning."""
    rules: list[Json] = []
    for strategy in live:
        rule = _rule(where, strategy, segments, notes, chosen)
        if chosen is not None:
            name = strategy.get("name") or strategy.get("strategyName")
            parameters = strategy.get("parameters") or {}
            percent = _percent(where, parameters) if name == "flexibleRollout" else 100
            rules += chosen.overrides(rule, strategy, percent)
        rules.append(rule)
    # a stable sort: the rules that never serve "off" first (an "or" of strategies keeps its
    # meaning), then the gradual rollouts
    rules.sort(key=lambda r: _may_serve(r["serve"], off))
    if sum(_may_serve(r["serve"], off) for r in rules) > 1:
        notes.append(
            f"{where}: several gradual rollouts (a context matching two gets the first's chance "
            "only, not either's)"
        )
    return rules


def _may_serve(serve: Json, off: int) -> bool:
    """Whether ``serve`` gives some units the feature's off value (a gradual rollout)."""
    return serve.get("variation") == off or any(w["idx"] == off for w in serve.get("rollout") or [])


def _rule(
    where: str,
    strategy: Mapping[str, Any],
    segments: Mapping[Any, tuple[Json, str]],
    notes: list[str],
    variants: _Variants | None = None,
) -> Json:
    name = strategy.get("name") or strategy.get("strategyName")
    where = f"{where} strategy {name}"
    parameters = strategy.get("parameters") or {}
    clauses = [_constraint(where, c, notes) for c in strategy.get("constraints") or []]
    for id_ in strategy.get("segments") or []:
        if id_ not in segments:
            raise Refused(where, f"segment {id_!r}, not in the export")
        clauses.append({"op": "segmentMatch", "values": [segments[id_][1]], "negate": False})
    percent = 100
    if name == "userWithId":
        ids = [u.strip() for u in str(parameters.get("userIds") or "").split(",") if u.strip()]
        clauses.append({"attribute": "key", "op": "in", "values": ids, "negate": False})
    elif name == "flexibleRollout":
        percent = _percent(where, parameters)
    elif name != "default":
        raise Refused(
            where, f"the strategy {name!r} (Vane converts default, flexibleRollout, userWithId)"
        )
    if variants is not None:
        serve = variants.serve(where, strategy, percent)
        rollout_by = _bucket_by(where, str(parameters.get("stickiness") or "default"))
        if percent < 100 and serve.get("bucketBy", "key") != rollout_by:
            notes.append(
                f"{where}: the rollout's stickiness and the variants' differ (one rollout by "
                "the variants')"
            )
    elif name == "flexibleRollout":
        serve = _rollout(where, parameters, percent)
    else:
        serve = {"variation": ON}
    rule: Json = {"clauses": clauses, "serve": serve}
    if strategy.get("title"):
        rule["description"] = str(strategy["title"])
    return rule


def _percent(where: str, parameters: Mapping[str, Any]) -> int:
    try:
        percent = int(str(parameters.get("rollout", "100")))
    except ValueError:
        raise Refused(where, f"rollout {parameters.get('rollout')!r}: not a percent") from None
    if not 0 <= percent <= 100:
        raise Refused(where, f"rollout {percent}: not a percent")
    return percent


def _bucket_by(where: str, stickiness: str) -> str:
    bucket_by = STICKINESS.get(stickiness, stickiness)
    if bucket_by is None:
        raise Refused(where, "random stickiness (Vane buckets by an attribute)")
    return bucket_by


def _rollout(where: str, parameters: Mapping[str, Any], percent: int) -> Json:
    """On for ``percent`` of the units, by the strategy's stickiness."""
    bucket_by = _bucket_by(where, str(parameters.get("stickiness") or "default"))
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
