"""A readable diff of two JSON documents (an audit entry's before and after)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Changed:
    path: str  # e.g. ``rules[0].clauses[1].values``
    before: Any
    after: Any


_MISSING = object()


def changes(before: Any, after: Any, path: str = "") -> list[Changed]:
    """The leaves that differ, by path; a list that changed length is compared item by item."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[Changed] = []
        for key in sorted({*before, *after}):
            if key in ("updatedAt", "createdAt", "version"):
                continue  # bookkeeping, not what a person changed
            sub = f"{path}.{key}" if path else str(key)
            out += changes(before.get(key, _MISSING), after.get(key, _MISSING), sub)
        return out
    if isinstance(before, list) and isinstance(after, list) and before != after:
        out = []
        for i in range(max(len(before), len(after))):
            b = before[i] if i < len(before) else _MISSING
            a = after[i] if i < len(after) else _MISSING
            if b is _MISSING or a is _MISSING:  # an item added or removed: shown whole
                out.append(
                    Changed(
                        f"{path}[{i}]", None if b is _MISSING else b, None if a is _MISSING else a
                    )
                )
            else:
                out += changes(b, a, f"{path}[{i}]")
        return out
    if before == after:
        return []
    return [
        Changed(
            path or "(whole)",
            None if before is _MISSING else before,
            None if after is _MISSING else after,
        )
    ]


BRIEF_CHANGES = 2  # an entry of at most this many short changes reads on one line
BRIEF_CHARS = 60  # ... each change's before and after together at most this long, as JSON


def history(entries: Iterable[Any]) -> list[dict[str, Any]]:
    """Audit entries as the console lists them: what each changed, and whether that reads on
    the entry's own line (a toggle: ``enabled`` false → true) or is a table a person opens. A
    creation or deletion is its action alone."""
    items = []
    for entry in entries:
        found = (
            changes(entry.before, entry.after)
            if entry.before is not None and entry.after is not None
            else []
        )
        brief = len(found) <= BRIEF_CHANGES and all(
            len(json.dumps(c.before)) + len(json.dumps(c.after)) <= BRIEF_CHARS for c in found
        )
        items.append({"entry": entry, "changes": found, "brief": brief})
    return items
