"""Doors in: another product's flag file turned into a Vane project document.

A converter is a pure function from the parsed file and the environments wanted
(``environments.Wanted``: ``--env``, ``--all-environments``) to a ``Converted``: the document
(the same shape ``POST /plan`` and ``POST /apply`` take, in their camelCase JSON), the notes
naming whatever had no Vane equivalent and was left out, and which of the file's environments
went to which of Vane's. What cannot be converted faithfully at all
raises ``Refused`` naming the flag (or segment) and the construct: nothing is imported then.
The ``vane import`` command converts on the client and plans and applies the result, so an
import has every guarantee an apply has."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

Json = dict[str, Any]
T = TypeVar("T")
# ``control_plane.domain.problems.KEY_PATTERN`` (a test keeps them equal), not imported: the
# CLI converts without loading the control plane's database layer.
KEY_PATTERN = re.compile(r"^[a-z0-9_.\-]{1,128}$")


@dataclass
class Converted:
    document: Json
    notes: list[str] = field(default_factory=list)  # "flag x: trackEvents (no equivalent)"
    # the file's environment (None: a file of one) and the Vane environment set from it, each
    # pair once (``environments.targets``)
    environments: list[tuple[str | None, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.notes = list(dict.fromkeys(self.notes))  # said once, however many environments


class Refused(Exception):
    """A flag or segment that cannot be converted faithfully; the message names it and the
    construct."""

    def __init__(self, where: str, construct: str) -> None:
        super().__init__(f"{where}: {construct}")
        self.where = where
        self.construct = construct


def check_key(what: str, key: Any, notes: list[str] | None = None) -> str:
    """``key`` as a Vane key: lowercased (named in ``notes``: applications ask for the new
    key), refused if even then it is not one."""
    if isinstance(key, str) and key.lower() != key and KEY_PATTERN.match(key.lower()):
        if notes is not None:
            notes.append(f"{what} {key}: imported as {key.lower()} (Vane's keys are lowercase)")
        return key.lower()
    if not isinstance(key, str) or not KEY_PATTERN.match(key):
        raise Refused(
            f"{what} {key!r}", "its key is not a Vane key (a-z, 0-9, '_', '.', '-', up to 128)"
        )
    return key


MALFORMED = (TypeError, AttributeError, ValueError, KeyError, IndexError)
"""What reading a part of another product's file in an unexpected shape raises: caught per flag
(or segment) by ``guarded`` and refused naming it, never a traceback."""


def guarded(where: str, convert: Callable[..., T], *args: Any) -> T:
    """``convert(*args)``, a part of the file in an unexpected shape refused naming ``where``."""
    try:
        return convert(*args)
    except MALFORMED as exc:
        raise Refused(where, f"not in the expected shape ({type(exc).__name__}: {exc})") from exc


def flag_type(values: list[Any]) -> str:
    """The Vane type of a flag with these variation values."""
    if values and all(isinstance(v, bool) for v in values):
        return "boolean"
    if values and all(isinstance(v, str) for v in values):
        return "string"
    if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return "number"
    return "json"


def document(flags: list[Json], segments: list[Json]) -> Json:
    """A project document: flags and segments sorted by key, environments left as they are."""
    return {
        "version": 1,
        "segments": sorted(segments, key=lambda s: str(s["key"])),
        "flags": sorted(flags, key=lambda f: str(f["key"])),
    }
