"""Context kinds as they travel: which names a kind may have, and a unit of a kind as one string.

A context kind (``user``, ``organization``, ``device``…) is letters, digits, ``.``, ``_`` or
``-``, and never ``kind`` or ``multi`` (LaunchDarkly's rule). An experiment randomizes on one
kind, and events say which kind their ``unit`` is; where units of every kind are stored and
compared as one string (exposures, events, results), a unit is its *qualified* form:
LaunchDarkly's fully qualified key, the key itself for a user and ``kind:key`` for any other kind
(``%`` and ``:`` in the key escaped as ``%25`` and ``%3A``), so that the user ``acme`` and the
organization ``acme`` are two units, and a user's unit is what it always was.
"""

from __future__ import annotations

import re
from typing import Any

USER = "user"
MULTI = "multi"
_KIND = re.compile(r"^[A-Za-z0-9._-]+$")


def kind_problem(kind: Any) -> str | None:
    """Why ``kind`` cannot name a context kind, or None."""
    if not isinstance(kind, str) or not _KIND.match(kind):
        return "a context kind is letters, digits, '.', '_' or '-'"
    if kind in (MULTI, "kind"):
        return f"{kind!r} is not a context kind"
    return None


def reference_names(attribute: str) -> tuple[str, ...]:
    """An attribute reference as the names it reads, outermost first: ``/address/city`` is
    ``("address", "city")`` (``~1`` stands for ``/``, ``~0`` for ``~``); a name without a leading
    ``/`` is itself. A malformed reference raises ``ValueError`` saying why."""
    if not attribute.startswith("/"):
        return (attribute,)
    names = attribute[1:].split("/")
    if any(not name for name in names):
        raise ValueError(f"malformed attribute reference {attribute!r}: an empty name")
    if re.search(r"~(?![01])", attribute):
        raise ValueError(f"malformed attribute reference {attribute!r}: '~' must be '~0' or '~1'")
    return tuple(name.replace("~1", "/").replace("~0", "~") for name in names)


def reference_problem(attribute: str) -> str | None:
    """Why ``attribute``, read as a reference, cannot be one (None: it can)."""
    try:
        reference_names(attribute)
    except ValueError as exc:
        return str(exc)
    return None


def redact(props: dict[str, Any] | None, private: tuple[str, ...]) -> dict[str, Any] | None:
    """``props`` without the ``private`` attributes (names, or references into nested objects):
    what a key's ``privateAttributes`` keep out of the event store and the relay's spool. The
    given dict is not changed."""
    if not props or not private:
        return props
    out = dict(props)
    for attribute in private:
        *path, last = reference_names(attribute)
        parent = out
        for name in path:
            child = parent.get(name)
            if not isinstance(child, dict):
                break
            parent[name] = parent = dict(child)
        else:
            parent.pop(last, None)
    return out


def qualified_unit(kind: str | None, key: str) -> str:
    """A unit of ``kind`` (None: a user) as stored: the key for a user, else ``kind:key``."""
    if kind is None or kind == USER:
        return key
    return f"{kind}:{key.replace('%', '%25').replace(':', '%3A')}"
