"""The dependency graph of an environment: which flags and segments name which, in what order
they compile, and the rules on it (no cycles, no nesting deeper than ``MAX_NESTING``).

A flag names other flags through its prerequisites and segments through ``segmentMatch``
clauses in its rules; a segment names other segments through ``segmentMatch`` clauses in its
own rules. This module is the one home of those rules: the compiler orders and checks with it,
and the control plane asks it too (``segments_named``, ``Chains`` for a write's change to the
graph, ``prerequisite_cycle`` for a document's) rather than walking rules and graphs of its own.

A reference to a flag or segment that does not exist is not an edge: it may have been archived
or deleted, which is not an error here (an unknown prerequisite fails, an unknown segment does
not match).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Literal

from shared.engine.model import CompileError, InvalidAt, join
from shared.engine.operators import ARRAYS, SEGMENT_MATCH

# The one home of the nesting limit: chains of prerequisites, and of segments naming segments.
MAX_NESTING = 32

Edges = Callable[[str], list[tuple[str, str]]]
"""``edges(key)``: ``(path, other key)`` for each reference ``key`` makes to a known key."""


# ------------------------------------------------------------------------------ references


def _references_in(rules: Any) -> list[tuple[str, str]]:
    """``(path, segment key)`` of every ``segmentMatch`` value in ``rules``, best effort.

    The one home of "which segments do these rules name": flag rules and segment rules alike,
    as wire objects (``shared.wire.snapshot`` ``Rule`` / ``SegmentRule``) or as the plain dicts
    the database stores. Whatever is not shaped like a rule, a clause or a key is skipped (the
    compiler reports it in its own place).
    """
    found: list[tuple[str, str]] = []
    if not isinstance(rules, ARRAYS):
        return found
    for i, rule in enumerate(rules):
        clauses = rule.get("clauses") if isinstance(rule, dict) else getattr(rule, "clauses", ())
        if not isinstance(clauses, ARRAYS):
            continue
        for j, clause in enumerate(clauses):
            plain = isinstance(clause, dict)
            if (clause.get("op") if plain else getattr(clause, "op", None)) != SEGMENT_MATCH:
                continue
            values = clause.get("values") if plain else getattr(clause, "values", ())
            if not isinstance(values, ARRAYS):
                continue
            for k, value in enumerate(values):
                if isinstance(value, str):
                    found.append((f"rules[{i}].clauses[{j}].values[{k}]", value))
    return found


def segments_named(rules: Iterable[Any]) -> set[str]:
    """The keys of the segments that ``rules`` (a flag's or a segment's) name directly, through
    ``segmentMatch`` clauses. Rules may be wire objects or the dicts a database row holds."""
    return {key for _, key in _references_in(rules)}


def segment_references(item: Any) -> list[tuple[str, str]]:
    """``(path, segment key)`` of every segment a flag's or segment's rules name, best effort;
    paths are relative to the item (``rules[0].clauses[1].values[0]``)."""
    return _references_in(getattr(item, "rules", ()))


def prerequisite_keys(flag: Any) -> list[str]:
    """The keys of the flags ``flag`` names as prerequisites, in order, best effort."""
    items = getattr(flag, "prerequisites", ())
    if not isinstance(items, ARRAYS):
        return []
    return [p.key for p in items if isinstance(getattr(p, "key", None), str)]


def flag_edges(flags: Mapping[str, Any]) -> Edges:
    """Prerequisite edges between the flags of ``flags`` (a flag naming itself is no edge: the
    flag refuses that itself)."""

    def edges(key: str) -> list[tuple[str, str]]:
        return [
            (f"prerequisites[{i}].key", k)
            for i, k in enumerate(prerequisite_keys(flags[key]))
            if k in flags and k != key
        ]

    return edges


def segment_edges(segments: Mapping[str, Any]) -> Edges:
    """``segmentMatch`` edges between the segments of ``segments``."""

    def edges(key: str) -> list[tuple[str, str]]:
        return [(p, k) for p, k in segment_references(segments[key]) if k in segments]

    return edges


def references(
    flags: Mapping[str, Any],
) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """(prerequisite key -> flags naming it, segment key -> flags naming it)."""
    dependents: dict[str, set[str]] = {}
    users: dict[str, set[str]] = {}
    for key, flag in flags.items():
        for other in prerequisite_keys(flag):
            dependents.setdefault(other, set()).add(key)
        for segment in segments_named(getattr(flag, "rules", ())):
            users.setdefault(segment, set()).add(key)
    return (
        {k: frozenset(v) for k, v in dependents.items()},
        {k: frozenset(v) for k, v in users.items()},
    )


def moved(
    index: Mapping[str, frozenset[str]], key: str, before: set[str], after: set[str]
) -> dict[str, frozenset[str]]:
    """``index`` with ``key`` no longer under ``before - after`` and now under ``after - before``."""
    updated = dict(index)
    for ref in before - after:
        updated[ref] = updated.get(ref, frozenset()) - {key}
    for ref in after - before:
        updated[ref] = updated.get(ref, frozenset()) | {key}
    return updated


def with_dependents(keys: set[str], dependents: Mapping[str, Collection[str]]) -> set[str]:
    """``keys`` and whatever depends on them through ``dependents``, at any depth."""
    found, pending = set(keys), list(keys)
    while pending:
        for other in dependents.get(pending.pop(), ()):
            if other not in found:
                found.add(other)
                pending.append(other)
    return found


# ----------------------------------------------------------------------------------- order
# The one home of the whole-environment order and of its cycle and nesting rules.


def order_keys(
    keys: Sequence[str], edges: Edges, prefix: str, what: str
) -> tuple[list[str], dict[str, CompileError]]:
    """Dependencies-first order of ``keys``, and which ones cannot compile.

    ``edges(key)`` lists ``(path, other key)`` for the references a key makes to known keys.
    A key fails when it is in a cycle, when its longest chain of references is more than
    ``MAX_NESTING`` long, or when anything it references fails. Iterative: a long chain of
    references cannot exhaust Python's recursion limit.
    """
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    depth: dict[str, int] = {}
    failed: dict[str, CompileError] = {}
    order: list[str] = []
    for root in keys:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(edges(root)))]
        while stack:
            node, pending = stack[-1]
            for path, other in pending:
                seen = state.get(other)
                if seen is None:
                    state[other] = 1
                    stack.append((other, iter(edges(other))))
                    break
                if seen == 1:
                    members = [k for k, _ in stack]
                    members = members[members.index(other) :]
                    error = CompileError(
                        join(f"{prefix}.{node}", path),
                        f"{what} cycle: {' -> '.join([*members, other])}",
                    )
                    for member in members:
                        failed.setdefault(member, error)
            else:
                stack.pop()
                state[node] = 2
                order.append(node)
                if node in failed:
                    continue
                deepest, deepest_path = 0, ""
                for path, other in edges(node):
                    if other in failed:
                        failed[node] = failed[other]
                        break
                    if depth[other] > deepest:
                        deepest, deepest_path = depth[other], path
                else:
                    depth[node] = deepest + 1
                    if deepest + 1 > MAX_NESTING:
                        failed[node] = CompileError(
                            join(f"{prefix}.{node}", deepest_path),
                            f"{what}s nested more than {MAX_NESTING} deep",
                        )
    return order, failed


# ------------------------------------------------------------------------------ one root
# The one home of the cycle rule for a single flag or segment: ``check_graph`` for the engine's
# validation (with the nesting limit, errors at paths), ``Chains`` for a write of the control plane
# (the keys of the cycle, or of the chain too long, a change would make) and ``prerequisite_cycle``
# for a document's graph.


def check_graph(
    root: str,
    edges: Sequence[tuple[str, str]],
    neighbours: Callable[[str], list[str]],
    what: str,
) -> None:
    """Refuse a cycle through ``root`` or nesting deeper than ``MAX_NESTING``.

    ``edges`` are the root's own references as ``(path, key)``; errors point at one of them.
    """
    depth: dict[str, int] = {}
    for path, key in edges:
        try:
            _deepest(key, [root], depth, neighbours)
        except _Cycle as cycle:
            raise InvalidAt(path, f"{what} cycle: {' -> '.join(cycle.keys)}") from None
        except _TooDeep:
            raise InvalidAt(path, f"{what}s nested more than {MAX_NESTING} deep") from None


def _deepest(
    key: str, stack: list[str], depth: dict[str, int], neighbours: Callable[[str], list[str]]
) -> int:
    """How deep references go from ``key`` (``depth`` keeps what was walked). A function of
    its own, not a closure calling itself: that closure would be a reference cycle holding
    everything the check was given, left for the cycle collector after every check."""
    if key in stack:
        raise _Cycle([*stack[stack.index(key) :], key])
    if key in depth:
        if len(stack) + depth[key] > MAX_NESTING:
            raise _TooDeep
        return depth[key]
    if len(stack) >= MAX_NESTING:
        raise _TooDeep
    stack.append(key)
    deepest = max((_deepest(k, stack, depth, neighbours) for k in neighbours(key)), default=0)
    stack.pop()
    depth[key] = deepest + 1
    return deepest + 1


class _Cycle(Exception):
    def __init__(self, keys: list[str]) -> None:
        super().__init__(keys)
        self.keys = keys


class _TooDeep(Exception):
    pass


def _cycle_through(root: str, graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """The first path (depth first, in the order ``graph`` gives) from ``root`` back to
    ``root``, as ``[root, ..., root]``; None when there is none. Iterative, each key walked once."""
    seen = {root}
    path = [root]
    stack = [iter(graph.get(root, ()))]
    while stack:
        for other in stack[-1]:
            if other == root:
                return [*path, root]
            if other not in seen:
                seen.add(other)
                path.append(other)
                stack.append(iter(graph.get(other, ())))
                break
        else:
            stack.pop()
            path.pop()
    return None


def _longest(start: str, edges: Callable[[str], Iterable[str]]) -> list[str]:
    """The longest path from ``start`` along ``edges`` (keys only, no repeats), as
    ``[start, ..., end]``: iterative, each key walked once; an edge back into the path walked
    (a cycle, which the caller refuses first) is not followed."""
    length: dict[str, int] = {}
    after: dict[str, str | None] = {}
    walking = {start}
    stack = [(start, iter(edges(start)))]
    while stack:
        node, pending = stack[-1]
        for other in pending:
            if other not in length and other not in walking:
                walking.add(other)
                stack.append((other, iter(edges(other))))
                break
        else:
            stack.pop()
            walking.discard(node)
            best, best_after = 1, None
            for other in edges(node):
                if other in length and length[other] + 1 > best:
                    best, best_after = length[other] + 1, other
            length[node], after[node] = best, best_after
    path, step = [start], after[start]
    while step is not None:
        path.append(step)
        step = after[step]
    return path


Refusal = tuple[Literal["cycle", "too deep"], list[str]]


class Chains:
    """Which keys name which: an environment's flags and their prerequisites, or a project's
    segments and the segments their rules name, known both ways, as the control plane changes
    one key at a time. The one home of what such a change must keep for the environment to
    compile (``order_keys``' rules, on the whole graph): no cycle through the key changed, and
    no chain of references through it longer than ``MAX_NESTING``, however far above or below
    it the chain's ends are. A key the graph does not hold is unknown: naming it is no edge."""

    def __init__(self, names: Mapping[str, Iterable[str]]) -> None:
        self.names: dict[str, list[str]] = {}
        self.named_by: dict[str, set[str]] = {}
        for key, named in names.items():
            self.set(key, named)

    def set(self, key: str, names: Iterable[str]) -> None:
        """``key`` names ``names`` from now on."""
        for other in self.names.get(key, ()):
            self.named_by.get(other, set()).discard(key)
        self.names[key] = list(dict.fromkeys(names))
        for other in self.names[key]:
            self.named_by.setdefault(other, set()).add(key)

    def refusal(self, key: str, names: Iterable[str]) -> Refusal | None:
        """Why ``key`` may not name ``names`` (the rest as it is), with the keys at fault: the
        cycle ``[key, ..., key]``, or the chain too long from its top to its bottom; None when
        it may. The graph is left as it was."""
        held = self.names.get(key)
        self.set(key, names)
        try:
            cycle = _cycle_through(key, self.names)
            if cycle is not None:
                return "cycle", cycle
            below = _longest(key, lambda k: [o for o in self.names.get(k, ()) if o in self.names])
            above = _longest(key, lambda k: sorted(self.named_by.get(k, ())))
            chain = [*reversed(above[1:]), *below]
            return ("too deep", chain) if len(chain) > MAX_NESTING else None
        finally:
            if held is None:
                self.set(key, ())
                del self.names[key]
            else:
                self.set(key, held)

    @staticmethod
    def message(refusal: Refusal, what: str) -> str:
        """The refusal in words: ``what`` are the references (``prerequisites``, ``segments``)."""
        kind, keys = refusal
        if kind == "cycle":
            return f"would make a cycle: {' -> '.join(keys)}"
        return (
            f"{what} nested more than {MAX_NESTING} deep ({len(keys)}): "
            f"{' -> '.join(keys[:3])} -> ... -> {' -> '.join(keys[-2:])}"
        )


def prerequisite_cycle(key: str, prerequisites: Mapping[str, Iterable[str]]) -> list[str] | None:
    """The prerequisite cycle flag ``key`` would be part of, as ``[key, ..., key]``, or None.

    ``prerequisites``: flag key -> the keys of its prerequisites in one environment, with
    ``prerequisites[key]`` the ones the flag is about to have. A flag missing from it has none.
    """
    return _cycle_through(key, prerequisites)
