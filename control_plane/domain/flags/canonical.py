"""Turn flag API input into the canonical wire forms of ``shared.wire.snapshot``, or say why not.

Every check names the field it failed on, with the path a user would write
(``rules[0].clauses[1].values``). Semantic checks that the engine also needs (regexes, semvers,
dates, segment and prerequisite cycles) are the engine's: ``check_with_engine`` runs its compiler
on the would-be flag, so the control plane never accepts what a relay could not evaluate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from control_plane.domain.flags import schemas as s
from control_plane.domain.problems import MAX_NAME, Problems
from control_plane.domain.targeting import clauses as targeting
from control_plane.domain.targeting.clauses import clause, serve
from shared.wire import body
from shared.wire import snapshot as w

MAX_VARIATION_IDX = 9_999  # an index into a flag's variations, never a value in itself

# the operator table is the engine's (shared/engine/operators.py): the one home of the operators


def _type_ok(flag_type: str, value: Any) -> bool:
    if flag_type == "boolean":
        return isinstance(value, bool)
    if flag_type == "string":
        return isinstance(value, str)
    if flag_type == "number":
        return body.number_in_range(value)
    return True  # json: any JSON value (its numbers are checked by ``body.value_problem``)


_TYPE_WORDS = {
    "boolean": "a boolean",
    "string": "a string",
    "number": f"a finite number within ±{body.MAX_SAFE_INTEGER} (2^53 - 1)",
}


def variations(
    problems: Problems, flag_type: str, given: list[s.VariationIn] | None
) -> list[w.Variation]:
    """Validate and canonicalise a flag's variations (idx defaults to position)."""
    if given is None:
        if flag_type == "boolean":
            return [w.Variation(0, True, "on"), w.Variation(1, False, "off")]
        problems.add("variations", f"a {flag_type} flag needs 2 or more variations")
        return []
    if len(given) < 2:
        problems.add("variations", "needs 2 or more items")
    if flag_type == "boolean" and len(given) != 2:
        problems.add("variations", "a boolean flag has exactly 2 variations, true and false")
    with_idx = [v.idx is not None for v in given]
    if any(with_idx) and not all(with_idx):
        problems.add("variations", "give idx on every variation or on none")
    out: list[w.Variation] = []
    seen: set[int] = set()
    values: dict[Any, int] = {}  # each value once: a variation is told apart by its value
    for position, item in enumerate(given):
        field = f"variations[{position}]"
        idx = position if item.idx is None else item.idx
        if not 0 <= idx <= MAX_VARIATION_IDX:
            problems.add(f"{field}.idx", f"must be from 0 to {MAX_VARIATION_IDX}")
        elif idx in seen:
            problems.add(f"{field}.idx", f"idx {idx} is used twice")
        seen.add(idx)
        if not _type_ok(flag_type, item.value):
            problems.add(
                f"{field}.value", f"must be {_TYPE_WORDS[flag_type]} for a {flag_type} flag"
            )
        elif (problem := body.value_problem(item.value)) is not None:
            problems.add(f"{field}.value", problem)
        else:
            same = values.setdefault(_value_identity(flag_type, item.value), position)
            if same != position:
                problems.add(f"{field}.value", f"the same value as variations[{same}]")
        name = item.name if item.name is not None else _default_name(flag_type, item.value, idx)
        if len(name) > MAX_NAME:
            problems.add(f"{field}.name", f"must be at most {MAX_NAME} characters")
        out.append(w.Variation(idx, item.value, name))
    booleans = [v.value for v in out if isinstance(v.value, bool)]  # others are reported above
    if flag_type == "boolean" and len(booleans) == 2 and set(booleans) != {True, False}:
        problems.add("variations", "a boolean flag's variations are true and false")
    return out


def _value_identity(flag_type: str, value: Any) -> Any:
    """What makes two variation values the same: 1 and 1.0 for numbers, equal JSON documents."""
    if flag_type == "number":
        return float(value)
    if flag_type == "json":
        return msgspec.json.encode(value, order="sorted")
    return value


def _default_name(flag_type: str, value: Any, idx: int) -> str:
    if flag_type == "boolean":
        return "on" if value else "off"
    if flag_type in {"string", "number"}:
        return str(value)
    return f"variation {idx}"


def rules(
    problems: Problems,
    given: Sequence[s.RuleIn],
    idxs: frozenset[int],
    segment_keys: frozenset[str],
    new_rule_id: Any,
) -> list[w.Rule]:
    out: list[w.Rule] = []
    seen_ids: set[str] = set()
    for i, rule in enumerate(given):
        field = f"rules[{i}]"
        if not rule.clauses:
            problems.add(f"{field}.clauses", "a rule needs at least one clause")
        clauses = tuple(
            clause(problems, f"{field}.clauses[{j}]", c, segment_keys)
            for j, c in enumerate(rule.clauses)
        )
        direct = rule.variation is not None or rule.rollout is not None
        if rule.serve is not None and direct:
            problems.add(
                field, "give variation/rollout either at rule level or inside serve, not both"
            )
        if rule.serve is not None:
            served = serve(problems, f"{field}.serve", rule.serve, idxs)
        else:
            served = serve(
                problems, field, s.ServeIn(variation=rule.variation, rollout=rule.rollout), idxs
            )
        rule_id = rule.id or new_rule_id()
        if rule_id in seen_ids:
            problems.add(f"{field}.id", f"rule id {rule_id!r} is used twice")
        seen_ids.add(rule_id)
        out.append(w.Rule(id=rule_id, clauses=clauses, serve=served, description=rule.description))
    return out


def targets(
    problems: Problems, given: Iterable[s.TargetIn], idxs: frozenset[int]
) -> list[w.Target]:
    out = []
    owner: dict[tuple[str, str], int] = {}  # (kind, key) -> the target listing it
    for i, target in enumerate(given):
        field = f"targets[{i}]"
        if target.variation not in idxs:
            problems.add(f"{field}.variation", f"no variation has idx {target.variation}")
        kind = targeting.context_kind(problems, f"{field}.contextKind", target.context_kind)
        for j, key in enumerate(target.values):
            listed = (kind or "user", key)
            if not key:
                problems.add(f"{field}.values[{j}]", "a context key is not empty")
            elif listed in owner and owner[listed] != i:
                problems.add(
                    f"{field}.values[{j}]",
                    f"{key!r} is already targeted by targets[{owner[listed]}]",
                )
            owner.setdefault(listed, i)
        out.append(
            w.Target(
                variation=target.variation,
                values=tuple(dict.fromkeys(target.values)),
                context_kind=kind,
            )
        )
    return out
