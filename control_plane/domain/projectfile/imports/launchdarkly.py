"""LaunchDarkly's flag JSON (its relay's and SDKs' data files: ``{"flags", "segments"}``, one
environment's, set in each Vane environment wanted; its REST API's list of flags, ``{"items"}``,
whose environments are imported each into the Vane environment it is mapped to) as a Vane project
document.

Vane evaluates as LaunchDarkly does (targets by context kind, rules of clauses, prerequisites,
segments, rollouts by context kind and attribute), so most of a flag converts one for one. Rollout
weights are out of 100,000 in both products (Vane writes them as percent with 3 decimals:
``weight / 1000``). Bucketing differs: LaunchDarkly hashes with SHA-1 and the flag's salt, Vane
with murmur3, so a rollout keeps its shares but not which context lands where."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from control_plane.domain.projectfile.imports import (
    Converted,
    Json,
    Refused,
    check_key,
    document,
    flag_type,
    guarded,
)
from control_plane.domain.projectfile.imports.environments import Target, Wanted, targets
from shared.engine.operators import OPERATORS

WEIGHT_SCALE = 1000  # LaunchDarkly: out of 100,000; Vane: percent, 3 decimals
KNOWN_FLAG_FIELDS = frozenset(
    {
        "key", "version", "deleted", "on", "variations", "offVariation", "fallthrough",
        "targets", "contextTargets", "rules", "prerequisites", "salt", "clientSide",
        "clientSideAvailability", "name", "description", "tags", "temporary", "_names",
    }
)  # fmt: skip
NO_EQUIVALENT = (
    "trackEvents", "trackEventsFallthrough", "debugEventsUntilDate", "samplingRatio",
    "excludeFromSummaries", "migration",
)  # fmt: skip
KNOWN_SEGMENT_FIELDS = frozenset(
    {
        "key", "version", "deleted", "included", "excluded", "includedContexts",
        "excludedContexts", "rules", "salt", "unbounded", "generation", "name", "description",
    }
)  # fmt: skip


def convert(data: Mapping[str, Any], wanted: Wanted | str) -> Converted:
    """The flags and segments of ``data`` as a document setting them in the Vane environments
    ``wanted``: the REST list's environments each in its own, a data file's in each."""
    if not isinstance(data, Mapping):
        raise Refused("file", "not a JSON object with 'flags' and 'segments'")
    notes: list[str] = []
    chosen = targets(environments(data), wanted, "a LaunchDarkly data file")
    if isinstance(data.get("items"), list):  # the REST API's list of flags
        data = {**data, "flags": guarded("items", _from_api, data["items"], chosen, notes)}
    items = _items(data, "flags", "flag", notes)
    known = {key for key, _ in items}
    flags = [
        guarded(f"flag {key}", _flag, key, _per_environment(ld, chosen), known, notes)
        for key, ld in items
    ]
    segments = [
        guarded(f"segment {key}", _segment, key, ld, notes)
        for key, ld in _items(data, "segments", "segment", notes)
    ]
    return Converted(document(flags, segments), notes, chosen)


def environments(data: Mapping[str, Any]) -> list[str] | None:
    """The REST list's environments (those of any flag), or ``None``: a data file holds one."""
    items = data.get("items")
    if not isinstance(items, list):
        return None
    found = {
        name
        for item in items
        if isinstance(item, Mapping) and isinstance(item.get("environments"), Mapping)
        for name in item["environments"]
        if isinstance(name, str)
    }
    return sorted(found)


BOOKKEEPING = frozenset({"lastModified", "version", "sel", "archived", "environmentName"})
PerEnvironment = list[tuple[str, str | None, Mapping[str, Any]]]
"""A flag in the relay's shape for each Vane environment it is set in, with the file's
environment to name in a note or refusal (``None``: the flag's only one)."""


def _per_environment(ld: Mapping[str, Any], chosen: list[Target]) -> PerEnvironment:
    if "_environments" in ld:  # from the REST list
        return list(ld["_environments"])
    return [(ours, None, ld) for _, ours in chosen]


def _from_api(items: list[Any], chosen: list[Target], notes: list[str]) -> dict[str, Any]:
    """``GET /api/v2/flags/{project}``'s flags in the relay's shape, one for each environment
    imported: its setting lifted to the flag, variations' values with their names kept
    aside. A flag not in an environment leaves its setting there as it is."""
    flags: dict[str, Any] = {}
    several = len(chosen) > 1
    for item in items:
        settings = item.get("environments") or {}
        lacking = [t for t, _ in chosen if settings.get(t) is None]
        per: PerEnvironment = [
            (ours, theirs if several else None, _lifted(item, settings[theirs]))
            for theirs, ours in chosen
            if theirs not in lacking
        ]
        named = " or ".join(repr(t) for t in lacking)
        if not per:
            notes.append(f"flag {item.get('key')}: no environment {named}, not imported")
            continue
        if lacking:
            notes.append(f"flag {item.get('key')}: no environment {named} (left as it is there)")
        flags[item["key"]] = {"_environments": per}
    return flags


def _lifted(item: Mapping[str, Any], setting: Mapping[str, Any]) -> dict[str, Any]:
    variations = item.get("variations") or []
    return {
        **{k: v for k, v in setting.items() if not k.startswith("_") and k not in BOOKKEEPING},
        **{k: item[k] for k in ("name", "description", "tags", "temporary") if k in item},
        "clientSideAvailability": item.get("clientSideAvailability") or {},
        "variations": [v.get("value") for v in variations],
        "_names": [v.get("name") for v in variations],
    }


def _items(
    data: Mapping[str, Any], field: str, what: str, notes: list[str]
) -> list[tuple[str, Mapping[str, Any]]]:
    found = data.get(field) or {}
    if not isinstance(found, Mapping):
        raise Refused(field, "not an object of keys")
    out = []
    for key, item in sorted(found.items()):
        if not isinstance(item, Mapping):
            raise Refused(f"{what} {key!r}", "not an object")
        if item.get("deleted"):
            notes.append(f"{what} {key}: deleted in LaunchDarkly, not imported")
            continue
        out.append((check_key(what, key, notes), item))
    taken = [k for k, _ in out]
    twice = sorted({k for k in taken if taken.count(k) > 1})
    if twice:
        raise Refused(f"{what} {twice[0]}", "two keys that differ only in case")
    return out


def _unknown(where: str, ld: Mapping[str, Any], known: frozenset[str], notes: list[str]) -> None:
    notes += [f"{where}: {name} (no Vane equivalent)" for name in sorted(set(ld) - known)]


def _flag(key: str, per: PerEnvironment, known: set[str], notes: list[str]) -> Json:
    where = f"flag {key}"
    ld = per[0][2]  # the flag's own fields are every environment's
    values = ld.get("variations")
    if not isinstance(values, list) or not values:
        raise Refused(where, "no variations")
    kind = flag_type(values)
    if kind == "boolean" and sorted(values) != [False, True]:
        raise Refused(where, "boolean variations other than exactly true and false")
    count = len(values)
    available = ld.get("clientSideAvailability") or {}
    settings = {}
    for ours, theirs, setting in per:
        here = where if theirs is None else f"{where} in {theirs}"
        _unknown(here, setting, KNOWN_FLAG_FIELDS | frozenset(NO_EQUIVALENT), notes)
        notes += [
            f"{here}: {name} (no Vane equivalent)" for name in NO_EQUIVALENT if setting.get(name)
        ]
        if setting.get("salt"):
            notes.append(
                f"{here}: salt (Vane buckets with murmur3 by flag key, not SHA-1 and salt)"
            )
        settings[ours] = _setting(here, setting, count, known, notes)
    return {
        "key": key,
        "name": ld.get("name") or key,
        "description": ld.get("description") or "",
        "type": kind,
        "temporary": bool(ld.get("temporary", True)),
        "tags": sorted(ld.get("tags") or []),
        "clientSide": bool(ld.get("clientSide") or available.get("usingEnvironmentId")),
        "variations": [
            {"value": v, "idx": i, **({"name": n} if n else {})}
            for i, (v, n) in enumerate(zip(values, ld.get("_names") or [None] * count, strict=True))
        ],
        "environments": settings,
    }


def _setting(
    where: str, ld: Mapping[str, Any], count: int, known: set[str], notes: list[str]
) -> Json:
    on = bool(ld.get("on", False))
    prerequisites = ld.get("prerequisites") or []
    off = ld.get("offVariation")
    if off is None:
        if not on or prerequisites:
            raise Refused(
                where,
                "no offVariation (LaunchDarkly then serves the application's default value; "
                "a Vane flag always serves a variation)",
            )
        off = 0
        notes.append(f"{where}: no offVariation, variation 0 set (never served while on)")
    if "fallthrough" in ld:
        fallthrough = _serve(f"{where} fallthrough", ld["fallthrough"], count, notes)
    elif on:
        raise Refused(where, "no fallthrough")
    else:
        fallthrough = {"variation": _index(f"{where} offVariation", off, count)}
    return {
        "enabled": on,
        "offVariation": _index(f"{where} offVariation", off, count),
        "fallthrough": fallthrough,
        "targets": _targets(where, ld, count),
        "prerequisites": [_prerequisite(where, p, known) for p in prerequisites],
        "rules": [
            _rule(f"{where} rules[{i}]", r, count, notes)
            for i, r in enumerate(ld.get("rules") or [])
        ],
    }


def _prerequisite(where: str, ld: Any, known: set[str]) -> Json:
    key = ld.get("key") if isinstance(ld, Mapping) else None
    vane_key = key.lower() if isinstance(key, str) else key
    if vane_key not in known:
        raise Refused(
            where,
            f"prerequisite {key!r} is not a flag of the file (LaunchDarkly then serves the "
            "off variation; Vane refuses a prerequisite on no flag)",
        )
    return {"key": vane_key, "variation": ld.get("variation")}


def _index(where: str, value: Any, count: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
        raise Refused(where, f"variation {value!r} out of range")
    return value


def _serve(where: str, ld: Any, count: int, notes: list[str]) -> Json:
    if not isinstance(ld, Mapping):
        raise Refused(where, "neither a variation nor a rollout")
    if ld.get("variation") is not None:
        return {"variation": _index(where, ld["variation"], count)}
    rollout = ld.get("rollout")
    if not isinstance(rollout, Mapping) or not rollout.get("variations"):
        raise Refused(where, "neither a variation nor a rollout")
    if rollout.get("kind") == "experiment":
        notes.append(f"{where}: an experiment rollout, imported as a plain rollout")
    if rollout.get("seed") is not None:
        notes.append(f"{where}: rollout seed (Vane buckets with murmur3)")
    weights = [
        {"idx": _index(where, item.get("variation"), count), "weight": int(item.get("weight") or 0)}
        for item in rollout["variations"]
    ]
    total = sum(w["weight"] for w in weights)
    if total > 100_000:
        raise Refused(where, f"rollout weights sum to {total}, over 100000")
    # LaunchDarkly gives what the weights leave to the last variation listed: so does this.
    weights[-1]["weight"] += 100_000 - total
    served: Json = {
        "rollout": [{"idx": w["idx"], "weight": w["weight"] / WEIGHT_SCALE} for w in weights]
    }
    if rollout.get("bucketBy"):
        served["bucketBy"] = rollout["bucketBy"]
    if rollout.get("contextKind"):
        served["contextKind"] = rollout["contextKind"]
    return served


def _targets(where: str, ld: Mapping[str, Any], count: int) -> list[Json]:
    """The individual targets by kind; a user entry of ``contextTargets`` without values
    stands for the ``targets`` of its variation, as in LaunchDarkly."""
    users = [
        {
            "variation": _index(where + " targets", t.get("variation"), count),
            "values": list(t.get("values") or []),
        }
        for t in ld.get("targets") or []
    ]
    by_kind = ld.get("contextTargets") or []
    if not by_kind:
        return users
    out: list[Json] = []
    for target in by_kind:
        kind = target.get("contextKind") or "user"
        variation = _index(where + " contextTargets", target.get("variation"), count)
        if kind == "user" and not target.get("values"):
            out += [t for t in users if t["variation"] == variation]
        else:
            item: Json = {"variation": variation, "values": list(target.get("values") or [])}
            if kind != "user":
                item["contextKind"] = kind
            out.append(item)
    return out


def _rule(where: str, ld: Any, count: int, notes: list[str]) -> Json:
    if not isinstance(ld, Mapping):
        raise Refused(where, "not an object")
    if ld.get("trackEvents"):
        notes.append(f"{where}: trackEvents (no Vane equivalent)")
    rule: Json = {
        "clauses": [
            _clause(f"{where} clauses[{i}]", c) for i, c in enumerate(ld.get("clauses") or [])
        ],
        "serve": _serve(where, ld, count, notes),
        "description": str(ld.get("description") or ""),
    }
    if ld.get("id"):
        rule["id"] = str(ld["id"])
    return rule


def _clause(where: str, ld: Any) -> Json:
    if not isinstance(ld, Mapping):
        raise Refused(where, "not an object")
    op = ld.get("op")
    if op not in OPERATORS:
        raise Refused(where, f"operator {op!r} (Vane has {', '.join(sorted(OPERATORS))})")
    values = list(ld.get("values") or [])
    if op == "segmentMatch":  # segment keys, lowercased as the segments are
        values = [v.lower() if isinstance(v, str) else v for v in values]
    clause: Json = {
        "op": op,
        "values": values,
        "negate": bool(ld.get("negate")),
    }
    if op != "segmentMatch":
        clause["attribute"] = ld.get("attribute")
        if ld.get("contextKind"):
            clause["contextKind"] = ld["contextKind"]
    return clause


def _segment(key: str, ld: Mapping[str, Any], notes: list[str]) -> Json:
    where = f"segment {key}"
    _unknown(where, ld, KNOWN_SEGMENT_FIELDS, notes)
    if ld.get("unbounded"):
        raise Refused(where, "a big (unbounded) segment: its members live outside the file")
    if ld.get("salt"):
        notes.append(f"{where}: salt (Vane buckets with murmur3)")
    included = list(ld.get("included") or [])
    excluded = list(ld.get("excluded") or [])
    others: dict[str, dict[str, list[str]]] = {"includedContexts": {}, "excludedContexts": {}}
    for field, keys in (("includedContexts", included), ("excludedContexts", excluded)):
        for entry in ld.get(field) or []:
            kind = entry.get("contextKind") or "user"
            values = list(entry.get("values") or [])
            if kind == "user":
                keys += values
            else:  # one entry a kind, as Vane's segments take them
                others[field].setdefault(kind, []).extend(values)
    return {
        "key": key,
        "name": ld.get("name") or key,
        "description": ld.get("description") or "",
        "included": included,
        "excluded": excluded,
        **{
            field: [{"contextKind": kind, "values": values} for kind, values in kinds.items()]
            for field, kinds in others.items()
            if kinds
        },
        "rules": [
            _segment_rule(f"{where} rules[{i}]", r) for i, r in enumerate(ld.get("rules") or [])
        ],
    }


def _segment_rule(where: str, ld: Any) -> Json:
    if not isinstance(ld, Mapping):
        raise Refused(where, "not an object")
    rule: Json = {
        "clauses": [
            _clause(f"{where} clauses[{i}]", c) for i, c in enumerate(ld.get("clauses") or [])
        ]
    }
    if ld.get("id"):
        rule["id"] = str(ld["id"])
    if ld.get("weight") is not None:
        rule["weight"] = int(ld["weight"]) / WEIGHT_SCALE
        if ld.get("bucketBy"):
            rule["bucketBy"] = ld["bucketBy"]
        if ld.get("rolloutContextKind"):
            rule["contextKind"] = ld["rolloutContextKind"]
    return rule
