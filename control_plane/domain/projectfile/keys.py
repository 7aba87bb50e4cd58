"""Keys in a document: an inventory, for the record. A key's name, kind, environment and role
(a management key's) are exported, never its token nor its hint; apply never issues or revokes
a key (a token is shown once, at creation, and a file's apply is read in CI logs). A key in the
document that is not live, as written, is a note of the plan: issue it with ``POST /keys``."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from control_plane.domain.projectfile import schemas as s

if TYPE_CHECKING:
    from control_plane.domain.projectfile.planner import Planner

Identity = tuple[str, str, str, str]


def identity(key: s.KeyDoc) -> Identity:
    return (key.kind, key.environment or "", key.name, key.role or "")


def label(key: s.KeyDoc) -> str:
    where = f" in {key.environment}" if key.environment else ""
    role = f" ({key.role})" if key.role else ""
    return f"{key.kind} key {key.name or '(unnamed)'}{where}{role}"


def plan(p: Planner) -> None:
    """Each key of the document matched with a live one (the same name, kind, environment and
    role), or noted as not live; live keys the document leaves out stay."""
    live = Counter(identity(k) for k in p.live.doc.keys)
    for i, given in enumerate(p.doc.keys):
        found = identity(given)
        if live[found] > 0:
            live[found] -= 1  # not listed as left alone: a document never writes a key
            continue
        p.notes.append(
            f"keys[{i}]: no live {label(given)}; keys are never issued nor revoked from a "
            "document (a token is shown once, when issued): issue it with POST /keys"
        )
