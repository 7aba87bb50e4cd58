"""flagd's flag file (the OpenFeature flag definition format) as a Vane project document setting
its one environment's flags in each Vane environment wanted (``--env``, repeatable), and a project
document's environment as a flagd file.

flagd's targeting is JsonLogic returning a variant's name. It is converted into Vane's ordered
rules: each branch of ``if`` a rule (nested ``if`` conjoined with its branch, ``or`` one rule per
alternative, ``and`` a rule's clauses), each comparison of a ``var`` with literals a clause
(``==``, ``!=``, ``in`` in both its forms, ``<``, ``<=``, ``>``, ``>=``, ``starts_with``,
``ends_with``, ``sem_ver``), ``fractional`` a rollout (its relative weights as percent), and
``{"var": "targetingKey"}`` the context's key. Any other operator refuses the flag, named."""

from __future__ import annotations

import copy
import itertools
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
from control_plane.domain.projectfile.imports.environments import Wanted, targets

Clauses = list[Json]
Condition = list[Clauses]  # alternatives (or) of clause lists (and)
COMPARISONS = {
    "<": "lessThan",
    "<=": "lessThanOrEqual",
    ">": "greaterThan",
    ">=": "greaterThanOrEqual",
}
MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
SEMVER = {
    "=": ("semVerEqual", False),
    "!=": ("semVerEqual", True),
    "<": ("semVerLessThan", False),
    ">": ("semVerGreaterThan", False),
    ">=": ("semVerLessThan", True),
    "<=": ("semVerGreaterThan", True),
}
MAX_ALTERNATIVES = 1000  # ``or`` inside ``and`` multiplies rules: a bound on what one flag makes


def convert(data: Mapping[str, Any], wanted: Wanted | str) -> Converted:
    """The file's flags set in each Vane environment ``wanted`` (``--env``, repeatable)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("flags"), Mapping):
        raise Refused("file", "not a flagd file: no 'flags' object")
    chosen = targets(None, wanted, "a flagd file")
    environments = [ours for _, ours in chosen]
    evaluators = data.get("$evaluators") or {}
    notes: list[str] = []
    if not isinstance(evaluators, Mapping):
        raise Refused("$evaluators", "not an object of names")
    flags = [
        guarded(
            f"flag {key}", _flag, check_key("flag", key, notes), ld, environments, evaluators, notes
        )
        for key, ld in sorted(data["flags"].items(), key=lambda item: str(item[0]))
    ]
    return Converted(document(flags, []), notes, chosen)


class _Flag:
    """One flag's conversion: its variants by name and where to report."""

    def __init__(self, key: str, variants: Mapping[str, Any], evaluators: Mapping[str, Any]):
        self.key = key
        self.where = f"flag {key}"
        self.index = {name: i for i, name in enumerate(variants)}
        self.evaluators = evaluators
        self.inexact: set[str] = set()

    def refuse(self, construct: str) -> Refused:
        return Refused(self.where, construct)

    def resolve(self, logic: Any) -> Any:
        if isinstance(logic, Mapping) and set(logic) == {"$ref"}:
            name = logic["$ref"]
            if name not in self.evaluators:
                raise self.refuse(f"$ref to {name!r}, not in $evaluators")
            return self.evaluators[name]
        return logic


def _flag(
    key: str, ld: Any, environments: list[str], evaluators: Mapping[str, Any], notes: list[str]
) -> Json:
    where = f"flag {key}"
    variants = ld.get("variants") if isinstance(ld, Mapping) else None
    if not isinstance(variants, Mapping) or not variants:
        raise Refused(where, "no variants")
    flag = _Flag(key, variants, evaluators)
    default = ld.get("defaultVariant")
    if default not in flag.index:
        raise Refused(where, f"defaultVariant {default!r} is not a variant")
    values = list(variants.values())
    kind = flag_type(values)
    if kind == "boolean" and sorted(values) != [False, True]:
        raise Refused(where, "boolean variants other than exactly one true and one false")
    rules, fallthrough = _targeting(flag, ld.get("targeting"), flag.index[default])
    enabled = ld.get("state", "ENABLED") == "ENABLED"
    if not enabled:
        notes.append(
            f"{where}: DISABLED (flagd answers the application's default; Vane serves "
            f"defaultVariant {default!r} while off)"
        )
    notes += [f"{where}: {what}" for what in sorted(flag.inexact)]
    notes += [f"{where}: {name} (no Vane equivalent)" for name in sorted(set(ld) - FLAG_FIELDS)]
    setting = {
        "enabled": enabled,
        "offVariation": flag.index[default],
        "fallthrough": fallthrough,
        "rules": rules,
    }
    return {
        "key": key,
        "name": key,
        "type": kind,
        "description": str((ld.get("metadata") or {}).get("description") or ""),
        "variations": [
            {"value": value, "idx": i, "name": name}
            for i, (name, value) in enumerate(variants.items())
        ],
        "environments": {ours: copy.deepcopy(setting) for ours in environments},
    }


FLAG_FIELDS = frozenset({"state", "variants", "defaultVariant", "targeting", "metadata"})


def _targeting(flag: _Flag, logic: Any, default: int) -> tuple[list[Json], Json]:
    """The rules and the fallthrough that serve what ``logic`` returns."""
    logic = flag.resolve(logic)
    if logic is None or logic == {}:
        return [], {"variation": default}
    rules: list[Json] = []
    fallthrough = _branches(flag, logic, [[]], rules, default)
    return rules, fallthrough if fallthrough is not None else {"variation": default}


def _branches(
    flag: _Flag, logic: Any, guard: Condition, rules: list[Json], default: int
) -> Json | None:
    """Append the rules serving what ``logic`` returns where ``guard`` holds; the serve for
    when none of them matched and ``guard`` is always true (none: a rule made it)."""
    logic = flag.resolve(logic)
    if isinstance(logic, Mapping) and set(logic) == {"if"}:
        parts = list(logic["if"])
        for i in range(0, len(parts) - 1, 2):
            condition = _and(flag, guard, _condition(flag, parts[i]))
            _branches(flag, parts[i + 1], condition, rules, default)
        last = parts[-1] if len(parts) % 2 == 1 else None
        return _branches(flag, last, guard, rules, default)
    serve = _serve(flag, logic, default)
    if guard == [[]]:
        return serve
    rules += [{"clauses": clauses, "serve": serve} for clauses in guard]
    return None


def _serve(flag: _Flag, logic: Any, default: int) -> Json:
    if logic is None:
        return {"variation": default}
    if isinstance(logic, bool):
        logic = str(logic).lower()
    if isinstance(logic, str):
        if logic not in flag.index:
            raise flag.refuse(f"targeting returns {logic!r}, not a variant")
        return {"variation": flag.index[logic]}
    if isinstance(logic, Mapping) and set(logic) == {"fractional"}:
        return _fractional(flag, list(logic["fractional"]))
    raise flag.refuse(f"targeting returns {_operator(logic)!r}: only variant names and fractional")


def _operator(logic: Any) -> str:
    return next(iter(logic)) if isinstance(logic, Mapping) and logic else type(logic).__name__


def _fractional(flag: _Flag, parts: list[Any]) -> Json:
    bucket_by = "key"
    if parts and not isinstance(parts[0], list):
        bucket_by = _bucket_by(flag, parts.pop(0))
    shares = []
    for part in parts:
        if not isinstance(part, list) or not part or part[0] not in flag.index:
            raise flag.refuse(f"fractional bucket {part!r}: not [variant, weight]")
        weight = part[1] if len(part) > 1 else 1
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
            raise flag.refuse(f"fractional weight {weight!r}: not a whole number")
        shares.append((flag.index[part[0]], weight))
    total = sum(w for _, w in shares)
    if total <= 0:
        raise flag.refuse("fractional with no weight")
    units = [w * 100_000 // total for _, w in shares]  # thousandths of a percent
    if any(w * 100_000 % total for _, w in shares):
        flag.inexact.add("fractional weights rounded to thousandths of a percent")
    units[-1] += 100_000 - sum(units)
    rollout = [{"idx": i, "weight": u / 1000} for (i, _), u in zip(shares, units, strict=True)]
    served: Json = {"rollout": rollout}
    if bucket_by != "key":
        served["bucketBy"] = bucket_by
    return served


def _bucket_by(flag: _Flag, logic: Any) -> str:
    if isinstance(logic, Mapping) and set(logic) == {"cat"}:
        names = [v for v in logic["cat"] if v != {"var": "$flagd.flagKey"}]
        if len(names) == 1:
            logic = names[0]
    attribute = _var(flag, logic) if isinstance(logic, Mapping) and "var" in logic else None
    if attribute is None:
        raise flag.refuse(f"fractional bucketing by {logic!r}: only one attribute")
    return attribute[0] if attribute[1] is None else attribute[0].lstrip("/")


def _and(flag: _Flag, left: Condition, right: Condition) -> Condition:
    out = [a + b for a, b in itertools.product(left, right)]
    if len(out) > MAX_ALTERNATIVES:
        raise flag.refuse(f"more than {MAX_ALTERNATIVES} alternatives ('or' inside 'and')")
    return out


def _condition(flag: _Flag, logic: Any) -> Condition:
    logic = flag.resolve(logic)
    if logic is True:
        return [[]]
    op = _operator(logic)
    if not isinstance(logic, Mapping) or len(logic) != 1:
        raise flag.refuse(f"condition {logic!r}: not an operator")
    args = logic[op] if isinstance(logic[op], list) else [logic[op]]
    if op == "and":
        guarded = [a for a in (_presence(flag, arg) for arg in args) if a is not None]
        out: Condition = [[]]
        for arg in args:
            if _presence(flag, arg) is None:
                out = _and(flag, out, _condition(flag, arg))
        for attribute in guarded:  # exact where every alternative reads the attribute
            if not all(any(c.get("attribute") == attribute for c in alt) for alt in out):
                raise flag.refuse(f"'!=' null on {attribute!r} (a presence test) alone")
        return out
    if op == "or":
        return [clauses for arg in args for clauses in _condition(flag, arg)]
    if op == "!":
        inner = _condition(flag, args[0])
        if len(inner) != 1 or len(inner[0]) != 1:
            raise flag.refuse("'!' of more than one comparison")
        flag.inexact.add("'!' (a missing attribute matches no Vane clause, negated or not)")
        return [[{**inner[0][0], "negate": not inner[0][0]["negate"]}]]
    return [[_clause(flag, op, args)]]


def _presence(flag: _Flag, logic: Any) -> str | None:
    """The attribute of ``{"!=": [{"var": x}, null]}``, a presence test: Vane's clauses never
    match a missing attribute, so within an ``and`` that compares it, it is implied."""
    if isinstance(logic, Mapping) and set(logic) in ({"!="}, {"!=="}):
        args = next(iter(logic.values()))
        if isinstance(args, list) and len(args) == 2 and args[1] is None:
            found = _var(flag, args[0])
            return found[0] if found is not None else None
    return None


def _var(flag: _Flag, logic: Any) -> tuple[str, str | None] | None:
    """The attribute (and its context kind, for a reference) ``{"var": …}`` reads."""
    if not (isinstance(logic, Mapping) and set(logic) == {"var"}):
        return None
    name = logic["var"][0] if isinstance(logic["var"], list) else logic["var"]
    if not isinstance(name, str) or name.startswith("$flagd."):
        raise flag.refuse(f"var {name!r}: flagd's own properties have no Vane equivalent")
    if name == "targetingKey":
        return "key", None
    if "." in name:
        escaped = [p.replace("~", "~0").replace("/", "~1") for p in name.split(".")]
        return "/" + "/".join(escaped), "user"
    return name, None


def _clause(flag: _Flag, op: str, args: list[Any]) -> Json:
    if op in ("==", "===", "!=", "!=="):
        return _compare(flag, op, "in", args, negate=op.startswith("!"))
    if op in COMPARISONS:
        if len(args) == 3:
            raise flag.refuse(f"'{op}' between two values (write an 'and' of two comparisons)")
        if _var(flag, args[0]) is None:
            args, op = list(reversed(args)), MIRRORED[op]
        flag.inexact.add(f"'{op}' (JsonLogic compares a missing attribute as 0, Vane never)")
        return _compare(flag, op, COMPARISONS[op], args)
    if op == "in":
        if isinstance(args[-1], list):  # array membership: {"in": [{"var": x}, [a, b]]}
            return _clause_of(flag, op, args[0], "in", list(args[-1]))
        return _clause_of(flag, op, args[-1], "contains", [args[0]])  # a string contains
    if op in ("starts_with", "ends_with"):
        name = "startsWith" if op == "starts_with" else "endsWith"
        return _clause_of(flag, op, args[0], name, [args[1]])
    if op == "sem_ver" and len(args) == 3:
        if args[1] not in SEMVER:
            raise flag.refuse(f"sem_ver {args[1]!r} (Vane has =, !=, <, <=, >, >=)")
        name, negate = SEMVER[args[1]]
        if negate:
            flag.inexact.add(f"sem_ver {args[1]!r} (a missing or invalid version matches neither)")
        return _clause_of(flag, op, args[0], name, [args[2]], negate=negate)
    raise flag.refuse(f"operator {op!r}")


def _compare(flag: _Flag, op: str, name: str, args: list[Any], negate: bool = False) -> Json:
    if len(args) != 2:
        raise flag.refuse(f"'{op}' of {len(args)} values")
    left, right = args if _var(flag, args[0]) is not None else list(reversed(args))
    if negate:
        flag.inexact.add(f"'{op}' (a missing attribute matches no Vane clause, negated or not)")
    return _clause_of(flag, op, left, name, [right], negate=negate)


def _clause_of(
    flag: _Flag, op: str, var: Any, name: str, values: list[Any], negate: bool = False
) -> Json:
    attribute = _var(flag, var)
    if attribute is None or any(isinstance(v, Mapping) for v in values):
        raise flag.refuse(f"'{op}' that is not a var compared with values")
    clause: Json = {"attribute": attribute[0], "op": name, "values": values, "negate": negate}
    if attribute[1] is not None:
        clause["contextKind"] = attribute[1]
    return clause


# --- the way out: a project document's environment as a flagd file -------------------------

EXPORTED_OPS = {
    "lessThan": "<",
    "lessThanOrEqual": "<=",
    "greaterThan": ">",
    "greaterThanOrEqual": ">=",
    "startsWith": "starts_with",
    "endsWith": "ends_with",
}
NUMBER_OPS = ("lessThan", "lessThanOrEqual", "greaterThan", "greaterThanOrEqual")
SEMVER_OUT = {"semVerEqual": "=", "semVerLessThan": "<", "semVerGreaterThan": ">"}


class NotExported(Exception):
    """A construct of a flag with no flagd equivalent: the flag is left out, named."""


def export(project: Mapping[str, Any], environment: str) -> Converted:
    """The flags of ``project`` (the ``GET /export`` document) as served in ``environment``,
    as a flagd file; a flag flagd cannot express is left out and named in the notes."""
    flags: Json = {}
    notes: list[str] = []
    for flag in project.get("flags") or []:
        setting = (flag.get("environments") or {}).get(environment)
        if flag.get("archived") or setting is None:
            continue
        try:
            flags[flag["key"]] = _flagd_flag(flag, setting)
        except NotExported as exc:
            notes.append(f"flag {flag['key']}: {exc} (not exported)")
    return Converted({"flags": flags}, notes)


def _variant_names(flag: Mapping[str, Any]) -> dict[int, str]:
    names = [str(v.get("name") or "") for v in flag["variations"]]
    unique = all(names) and len(set(names)) == len(names)
    return {
        v["idx"]: (names[i] if unique else f"variation-{v['idx']}")
        for i, v in enumerate(flag["variations"])
    }


def _flagd_flag(flag: Mapping[str, Any], setting: Mapping[str, Any]) -> Json:
    names = _variant_names(flag)
    variants = {names[v["idx"]]: v["value"] for v in flag["variations"]}
    out: Json = {"state": "ENABLED", "variants": variants}
    if flag.get("description"):
        out["metadata"] = {"description": flag["description"]}
    if not setting["enabled"]:  # flagd's DISABLED answers the caller's default: not Vane's off
        return {**out, "defaultVariant": names[setting["offVariation"]]}
    if setting.get("prerequisites"):
        raise NotExported("prerequisites")
    branches: list[Any] = []
    for target in setting.get("targets") or []:
        if target.get("contextKind"):
            raise NotExported("a target of context kind " + target["contextKind"])
        condition = {"in": [{"var": "targetingKey"}, list(target["values"])]}
        branches += [condition, names[target["variation"]]]
    for rule in setting.get("rules") or []:
        clauses = [_flagd_clause(c) for c in rule["clauses"]]
        condition = clauses[0] if len(clauses) == 1 else {"and": clauses}
        branches += [condition if clauses else True, _flagd_serve(rule["serve"], names)]
    fallthrough = setting["fallthrough"]
    if fallthrough.get("variation") is not None and not branches:
        return {**out, "defaultVariant": names[fallthrough["variation"]]}
    default = fallthrough.get("variation", setting["offVariation"])
    targeting = {"if": [*branches, _flagd_serve(fallthrough, names)]} if branches else None
    return {
        **out,
        "defaultVariant": names[default],
        "targeting": targeting or _flagd_serve(fallthrough, names),
    }


def _flagd_serve(serve: Mapping[str, Any], names: Mapping[int, str]) -> Any:
    if serve.get("variation") is not None:
        return names[serve["variation"]]
    if serve.get("contextKind"):
        raise NotExported("a rollout by context kind " + serve["contextKind"])
    bucket_by = serve.get("bucketBy") or "key"
    shares = [[names[w["idx"]], round(w["weight"] * 1000)] for w in serve["rollout"]]
    var = "targetingKey" if bucket_by == "key" else bucket_by
    return {"fractional": [{"cat": [{"var": "$flagd.flagKey"}, {"var": var}]}, *shares]}


def _flagd_var(clause: Mapping[str, Any]) -> str:
    """The flagd ``var`` of a clause's attribute: a user's reference ``/a/b`` as ``a.b``."""
    attribute = str(clause["attribute"])
    kind = clause.get("contextKind")
    if kind is None:
        return "targetingKey" if attribute == "key" else attribute
    if kind != "user" or not attribute.startswith("/"):
        raise NotExported(f"a clause by context kind {kind}")
    parts = [p.replace("~1", "/").replace("~0", "~") for p in attribute[1:].split("/")]
    return "targetingKey" if parts == ["key"] else ".".join(parts)


def _flagd_clause(clause: Mapping[str, Any]) -> Any:
    op = clause["op"]
    if op == "segmentMatch":
        raise NotExported("a segment")
    var = {"var": _flagd_var(clause)}
    values = list(clause["values"])
    if op == "in":
        matched: Any = {"in": [var, values]}
    elif op == "contains":
        matched = {"or": [{"in": [v, var]} for v in values]}
    elif op in EXPORTED_OPS:
        matched = {"or": [{EXPORTED_OPS[op]: [var, v]} for v in values]}
        if op in NUMBER_OPS:  # JsonLogic compares a missing attribute as 0; Vane never matches it
            matched = {"and": [{"!=": [var, None]}, matched]}
    elif op in SEMVER_OUT:
        matched = {"or": [{"sem_ver": [var, SEMVER_OUT[op], v]} for v in values]}
    else:
        raise NotExported(f"the operator {op}")
    if clause.get("negate"):
        raise NotExported("a negated clause")  # a missing attribute: flagd's ! would match
    return matched
