"""HTML forms to the API's request bodies, and back: a form is the API's body in other clothes.

Form fields are named after the API's own fields (``rules[0].clauses[1].values``), so an API
error's ``field`` names the very input it is about, and the page shows it there. Values a person
types are read the way the API reads them: one clause value per line, numbers for the number and
date operators, strings otherwise.

A posted form is read through ``text`` and ``texts`` only: a field a person may leave alone is
not always sent (a box left unticked never is, nor is a multiple select with nothing chosen, and
a client that is not a browser may leave out any field), so a field that is absent, or is not
text (a file), reads as empty, never as an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from control_plane.domain.flags import schemas as s
from control_plane.domain.segments import schemas as seg_s
from shared.engine.operators import NUMBER_OPS
from shared.engine.operators import OPERATORS as ENGINE_OPERATORS


class Posted(Protocol):
    """What a posted form offers (Litestar's ``FormMultiDict``): a field's first value, or all."""

    def get(self, key: str, /) -> Any: ...

    def getall(self, key: str, default: list[Any], /) -> list[Any]: ...


def text(form: Posted, name: str) -> str:
    """A field as typed: its first value, or "" when it was not sent or is not text."""
    value = form.get(name)
    return value if isinstance(value, str) else ""


def texts(form: Posted, name: str) -> list[str]:
    """Every value of a repeated field (ticked boxes of one name, a multiple select), in order;
    [] when none was sent."""
    return [value for value in form.getall(name, []) if isinstance(value, str)]


OPERATORS: tuple[str, ...] = tuple(sorted(ENGINE_OPERATORS))  # the engine's, every one of them
_INDEXED = re.compile(r"^rules\[(\d+)\]\.(.+)$")


def values_of(text: str, op: str) -> list[Any]:
    """One value per line; numbers where the operator compares numbers (or dates as epoch ms)."""
    out: list[Any] = []
    for line in text.splitlines():
        value = line.strip()
        if not value:
            continue
        if op in NUMBER_OPS or (op in ("before", "after") and _is_number(value)):
            try:
                out.append(json.loads(value))
            except ValueError:
                out.append(value)  # the API says why it is not a number, naming the field
        else:
            out.append(value)
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def lines_of(values: list[Any]) -> str:
    return "\n".join(str(v) if not isinstance(v, str) else v for v in values)


@dataclass
class ClauseForm:
    attribute: str = ""
    op: str = "in"
    values: str = ""
    negate: bool = False
    context_kind: str = ""  # blank: the user, and the attribute a literal name

    def to_api(self) -> s.ClauseIn:
        if self.op == "segmentMatch":
            keys = [line.strip() for line in self.values.splitlines() if line.strip()]
            return s.ClauseIn(op="segmentMatch", values=keys, negate=self.negate)
        return s.ClauseIn(
            op=self.op,
            attribute=self.attribute.strip() or None,
            values=values_of(self.values, self.op),
            negate=self.negate,
            context_kind=self.context_kind.strip() or None,
        )


@dataclass
class RuleForm:
    id: str = ""
    description: str = ""
    clauses: list[ClauseForm] = field(default_factory=lambda: [ClauseForm()])
    serve: str = "0"  # a variation idx, or "rollout"
    weights: dict[int, str] = field(default_factory=dict)  # idx -> percent as typed
    bucket_by: str = ""
    weight: str = ""  # a segment rule's: the percent of matching contexts that are in ("": all)
    context_kind: str = ""  # the kind a rollout (or a segment rule's weight) buckets ("": users)

    def to_api(self) -> s.RuleIn:
        return s.RuleIn(
            id=self.id or None,
            description=self.description,
            clauses=[c.to_api() for c in self.clauses],
            serve=serve_in(self.serve, self.weights, self.bucket_by, self.context_kind),
        )


def serve_in(
    choice: str, weights: Mapping[int, str], bucket_by: str, context_kind: str = ""
) -> s.ServeIn:
    """A serve as chosen: a variation, or a rollout bucketed by ``bucket_by`` of the contexts
    of ``context_kind`` (blank: the flag's own, of users)."""
    if choice == "rollout":
        return s.ServeIn(
            rollout=[
                s.WeightIn(idx=idx, weight=_percent(text)) for idx, text in sorted(weights.items())
            ],
            bucket_by=bucket_by.strip() or None,
            context_kind=context_kind.strip() or None,
        )
    return s.ServeIn(variation=int(choice) if choice.lstrip("-").isdigit() else -1)


def _percent(text: str) -> float:
    try:
        return float(text or 0)
    except ValueError:
        return -1.0  # the API refuses it as "a percentage from 0 to 100", naming the field


@dataclass
class ServeForm:
    """A stored serve as the editor shows it."""

    choice: str  # a variation idx, or "rollout"
    weights: dict[int, str] = field(default_factory=dict)
    bucket_by: str = ""
    context_kind: str = ""


def serve_form(serve: s.Serve) -> ServeForm:
    if isinstance(serve.rollout, list):
        return ServeForm(
            "rollout",
            {w.idx: f"{w.weight:g}" for w in serve.rollout},
            serve.bucket_by if isinstance(serve.bucket_by, str) else "",
            serve.context_kind if isinstance(serve.context_kind, str) else "",
        )
    return ServeForm(str(serve.variation))


def clauses_from_api(clauses: list[s.Clause]) -> list[ClauseForm]:
    """A rule's clauses (a flag's or a segment's) for the editor."""
    return [
        ClauseForm(
            attribute=c.attribute if isinstance(c.attribute, str) else "",
            op=c.op,
            values=lines_of(c.values),
            negate=c.negate,
            context_kind=c.context_kind if isinstance(c.context_kind, str) else "",
        )
        for c in clauses
    ]


def rules_from_api(rules: list[s.Rule]) -> list[RuleForm]:
    out = []
    for rule in rules:
        served = serve_form(rule.serve)
        out.append(
            RuleForm(
                rule.id,
                rule.description,
                clauses_from_api(rule.clauses),
                served.choice,
                served.weights,
                served.bucket_by,
                context_kind=served.context_kind,
            )
        )
    return out


def rules_from_form(form: Mapping[str, Any]) -> list[RuleForm]:
    """The rules editor's fields (``rules[i].clauses[j].op`` …) back into rules, in order."""
    rules: dict[int, RuleForm] = {}
    for name, value in form.items():
        match = _INDEXED.match(name)
        if match is None:
            continue
        index, rest = int(match.group(1)), match.group(2)
        rule = rules.setdefault(index, RuleForm(clauses=[]))
        text = value if isinstance(value, str) else ""
        clause = re.match(r"^clauses\[(\d+)\]\.(\w+)$", rest)
        weight = re.match(r"^weights\[(\d+)\]$", rest)
        if clause is not None:
            j, attr = int(clause.group(1)), clause.group(2)
            while len(rule.clauses) <= j:
                rule.clauses.append(ClauseForm(values=""))
            target = rule.clauses[j]
            if attr == "negate":
                target.negate = text in ("on", "true", "1")
            elif attr in ("attribute", "op", "values"):
                setattr(target, attr, text)
            elif attr == "contextKind":
                target.context_kind = text
        elif weight is not None:
            rule.weights[int(weight.group(1))] = text
        elif rest in ("id", "description", "serve", "weight"):
            setattr(rule, rest, text)
        elif rest == "bucketBy":
            rule.bucket_by = text
        elif rest == "contextKind":
            rule.context_kind = text
    return [rules[i] for i in sorted(rules)]


def segment_rules_from_api(rules: list[seg_s.SegmentRule]) -> list[RuleForm]:
    """A segment's rules for the editor (clauses, and a weight instead of a serve)."""
    return [
        RuleForm(
            id=rule.id,
            clauses=clauses_from_api(rule.clauses),
            weight="" if rule.weight is None else f"{rule.weight:g}",
            bucket_by=rule.bucket_by or "",
            context_kind=rule.context_kind or "",
        )
        for rule in rules
    ]


def segment_rule_in(rule: RuleForm) -> seg_s.SegmentRuleIn:
    weight = rule.weight.strip()
    return seg_s.SegmentRuleIn(
        id=rule.id or None,
        clauses=[c.to_api() for c in rule.clauses],
        weight=_percent(weight) if weight else None,
        bucket_by=rule.bucket_by.strip() or None,
        context_kind=rule.context_kind.strip() or None,
    )


@dataclass
class KeysForm:
    """Keys of contexts of one kind, as typed: a flag's individual target (``targets[i]``, with
    the variation they get) or an item of a segment's ``includedContexts``/``excludedContexts``."""

    context_kind: str = ""  # a target's blank: users
    values: str = ""  # one key per line
    variation: str = ""  # a target's idx

    def keys(self) -> list[str]:
        return [line.strip() for line in self.values.splitlines() if line.strip()]


_GROUP = re.compile(r"^(\w+)\[(\d+)\]\.(contextKind|values|variation)$")


def groups_from_form(form: Mapping[str, Any], name: str) -> list[KeysForm]:
    """The rows ``name[i].contextKind`` / ``.values`` / ``.variation`` of a form, in order."""
    rows: dict[int, KeysForm] = {}
    for field_name, value in form.items():
        match = _GROUP.match(field_name)
        if match is None or match.group(1) != name:
            continue
        row = rows.setdefault(int(match.group(2)), KeysForm())
        text = value if isinstance(value, str) else ""
        attr = {"contextKind": "context_kind"}.get(match.group(3), match.group(3))
        setattr(row, attr, text)
    return [rows[i] for i in sorted(rows)]


def listing(rows: Sequence[KeysForm]) -> tuple[list[KeysForm], list[int]]:
    """The rows that list a key (a row left blank, or emptied to remove it, says nothing) and
    where each is on the form: the API's ``targets[1]`` is the form's ``targets[positions[1]]``."""
    positions = [i for i, row in enumerate(rows) if row.keys()]
    return [rows[i] for i in positions], positions


def renumbered(field_name: str, name: str, positions: Sequence[int]) -> str:
    """An API error's field about the k-th row sent (``targets[1].values[0]``) named as the
    form's row it came from (``targets[2].values[0]``), so the page shows it beside that row."""
    prefix = name + "["
    if field_name.startswith(prefix):
        index, closed, rest = field_name[len(prefix) :].partition("]")
        if closed and index.isdigit() and int(index) < len(positions):
            return f"{name}[{positions[int(index)]}]{rest}"
    return field_name


def targets_in(rows: Sequence[KeysForm]) -> list[s.TargetIn]:
    """A flag's targets as typed: each row's keys, of its kind (blank: users), get its variation."""
    return [
        s.TargetIn(
            variation=int(row.variation) if row.variation.lstrip("-").isdigit() else -1,
            values=row.keys(),
            context_kind=row.context_kind.strip() or None,
        )
        for row in rows
    ]


def target_rows(targets: Sequence[s.Target], idxs: Sequence[int]) -> list[KeysForm]:
    """A flag's targets for the editor, then blank rows to add more: at least one, and one per
    variation while there are fewer targets than variations (a variation each, in order)."""
    rows = [
        KeysForm(
            t.context_kind if isinstance(t.context_kind, str) else "",
            lines_of(t.values),
            str(t.variation),
        )
        for t in targets
    ]
    blanks = max(1, len(idxs) - len(rows))
    return rows + [
        KeysForm(variation=str(idxs[k % len(idxs)]) if idxs else "") for k in range(blanks)
    ]


def contexts_in(rows: Sequence[KeysForm]) -> list[seg_s.ContextKeysIn]:
    """A segment's keys of other kinds as typed: each row's keys, of its kind."""
    return [
        seg_s.ContextKeysIn(context_kind=row.context_kind.strip(), values=row.keys())
        for row in rows
    ]


def context_rows(listed: Sequence[seg_s.ContextKeys]) -> list[KeysForm]:
    """A segment's ``includedContexts`` (or ``excludedContexts``) for the editor, and a blank
    row to add a kind."""
    return [KeysForm(c.context_kind, lines_of(c.values)) for c in listed] + [KeysForm()]


def edit_rules(rules: list[RuleForm], action: str) -> list[RuleForm]:
    """Apply an editor button (``add-rule``, ``add-clause:i``, ``remove-rule:i``,
    ``remove-clause:i:j``, ``up:i``, ``down:i``) to the rules as typed; nothing is saved."""
    verb, _, where = action.partition(":")
    at = [int(x) for x in where.split(":") if x.isdigit()]
    if verb == "add-rule":
        rules.append(RuleForm())
    elif verb == "add-clause" and at and at[0] < len(rules):
        rules[at[0]].clauses.append(ClauseForm())
    elif verb == "remove-rule" and at and at[0] < len(rules):
        del rules[at[0]]
    elif verb == "remove-clause" and len(at) == 2 and at[0] < len(rules):
        clauses = rules[at[0]].clauses
        if at[1] < len(clauses):
            del clauses[at[1]]
    elif verb in ("up", "down") and at and at[0] < len(rules):
        i = at[0]
        j = i - 1 if verb == "up" else i + 1
        if 0 <= j < len(rules):
            rules[i], rules[j] = rules[j], rules[i]
    return rules


def names_of(text: str) -> list[str]:
    """A comma-separated list as typed ("country, /device/os") to the API's list of names;
    blank items are dropped (a trailing comma), anything else is the API's to judge."""
    return [name.strip() for name in text.split(",") if name.strip()]


def context_of(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The "evaluate as" panel's context: a JSON object, or (None, why not)."""
    try:
        value = json.loads(text or "{}")
    except ValueError as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(value, dict):
        return None, 'a context is a JSON object, e.g. {"key": "user-1", "country": "DE"}'
    return value, None
