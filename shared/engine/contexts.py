"""Context kinds and attribute references: how a rule finds the value it reads.

A context is a mapping. A plain one (no ``kind``, or ``kind: "user"``) is a user, as it has
always been: its key is ``key``, else OpenFeature's ``targetingKey``, and its attributes are its
top-level properties. A context of another kind names it (``{"kind": "organization", "key":
"acme", "plan": "enterprise"}``); a multi-kind context holds one such part per kind, as
LaunchDarkly shapes it::

    {"kind": "multi", "user": {"key": "u1", "email": "..."},
                      "organization": {"key": "acme", "plan": "enterprise"}}

A clause, an individual target, a segment's listed keys and a rollout each read one kind
(``user`` by default); against a context without that kind a clause never matches (negated or
not), a target or a listed key never applies, and a rollout buckets as for a missing attribute.

The closures see a plain context as it comes, so rules on users cost nothing more than before.
A context naming kinds is seen as ``Kinds``: a dict holding the user part's attributes (so the
same user rules read it unchanged), with the parts of every kind beside it; its user key is
``""`` when it has no user part (a real key is never empty), which the closures read as "no
user". Rules on another kind find their part in ``Kinds.parts``.

Where a rule names its kind, its attribute is a reference (LaunchDarkly's syntax): one starting
with ``/`` reads into nested objects, ``/address/city``, with ``~1`` for ``/`` and ``~0`` for
``~`` inside a name; any other is one top-level name. Where a rule names no kind (every rule
written before kinds), it reads the user and its attribute is one literal name, slashes and all,
as LaunchDarkly reads a clause without ``contextKind``. ``anonymous`` is an attribute of every
kind, ``false`` when absent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from shared.engine.model import InvalidAt
from shared.wire.kinds import MULTI, USER, kind_problem, reference_names

# Beside the parts of a multi-kind context: its kind, and the targeting key OpenFeature always
# carries (its SDKs set one at the top; LaunchDarkly's OpenFeature providers ignore it there).
_NOT_PARTS = frozenset({"kind", "targetingKey"})

Context = Mapping[str, Any]
Part = tuple[Context, str]  # a kind's attributes and its key


class Kinds(dict[str, Any]):
    """A context naming kinds, as the closures see it: the user part's attributes, and
    ``parts`` (every kind's attributes and key) and ``names`` (its kinds, in order)."""

    __slots__ = ("names", "parts")

    parts: dict[str, Part]
    names: tuple[str, ...]


def check_kind(kind: Any, path: str) -> str:
    """The kind a rule names (``None``: the user), or ``InvalidAt``."""
    if kind is None:
        return USER
    problem = kind_problem(kind)
    if problem is not None:
        raise InvalidAt(path, problem)
    return str(kind)


def key_of(part: Mapping[str, Any]) -> str | None:
    """A part's key: ``key``, else ``targetingKey``; ``None`` unless a non-empty string."""
    key = part.get("key")
    if key is None or key == "":
        key = part.get("targetingKey")
    if isinstance(key, str) and key:
        return str(key)
    return None


def unit_key(context: Context, kind: str = USER) -> str | None:
    """The key of the part of ``kind`` in a context as it arrives (a plain context is a user),
    or None: what an experiment randomized on ``kind`` assigns, and exposures record."""
    given = context.get("kind")
    if given == MULTI:
        part = context.get(kind) if kind not in _NOT_PARTS else None
        return key_of(part) if isinstance(part, Mapping) else None
    return key_of(context) if (given if given is not None else USER) == kind else None


def exposure_unit(context: Context) -> tuple[str, str | None] | None:
    """The unit a flag's first exposure records for a context as it arrives, and its kind (None:
    a user): the user's key, else the key of a single-kind context of another kind."""
    user = unit_key(context)
    if user is not None:
        return user, None
    kind = context.get("kind")
    if isinstance(kind, str) and kind != MULTI and kind_problem(kind) is None:
        key = key_of(context)
        return None if key is None else (key, kind)
    return None


_KEY_REQUIRED = "a non-empty key is required"


def _parts(context: Context, kind: Any) -> dict[str, Part] | tuple[str, str]:
    """A context naming a kind (``kind``: another than the user, or ``multi``) as its parts,
    each kind's attributes and key; or why it cannot be evaluated (the field, what is wrong)."""
    if kind != MULTI:
        if (problem := kind_problem(kind)) is not None:
            return "kind", problem
        key = key_of(context)
        return ("key", _KEY_REQUIRED) if key is None else {kind: (context, key)}
    parts: dict[str, Part] = {}
    for name, part in context.items():
        if name in _NOT_PARTS:
            continue
        if (problem := kind_problem(name)) is not None:
            return name, problem
        if not isinstance(part, Mapping):
            return name, "a part of a multi-kind context is an object"
        key = key_of(part)
        if key is None:
            return f"{name}.key", _KEY_REQUIRED
        parts[name] = (part, key)
    return parts or ("kind", "a multi-kind context holds at least one kind")


def context_problem(context: Context) -> tuple[str, str] | None:
    """Why a context as it arrives cannot be evaluated (the field, what is wrong), or None:
    what a relay answers before evaluating (``view`` gives no reason)."""
    kind = context.get("kind")
    if kind is None or kind == USER:
        return None if key_of(context) is not None else ("key", _KEY_REQUIRED)
    found = _parts(context, kind)
    return found if isinstance(found, tuple) else None


def view(context: Context) -> tuple[Context, str] | None:
    """How the closures see a context, and its user key (``""`` without a user part); ``None``
    for a context that has no usable key (a part without one, or a kind that cannot be)."""
    kind = context.get("kind")
    if kind is None or kind == USER:
        key = key_of(context)
        return None if key is None else (context, key)
    parts = _parts(context, kind)
    if isinstance(parts, tuple):
        return None
    user = parts.get(USER)
    seen = Kinds(user[0] if user is not None else ())
    seen.parts = parts
    seen.names = tuple(parts)
    return seen, (user[1] if user is not None else "")


def part_of(context: Context, key: str, kind: str) -> Part | None:
    """The attributes and key of ``kind`` in a context as the closures see it, or None."""
    if kind == USER:
        return (context, key) if key else None
    if context.__class__ is not Kinds:
        return None
    return context.parts.get(kind)


def kinds_of(context: Context) -> tuple[str, ...]:
    """The kinds a context as the closures see it holds (what the attribute ``kind`` reads)."""
    if context.__class__ is Kinds:
        return context.names
    return (USER,)


def reference(attribute: str, path: str, *, literal: bool = False) -> tuple[str, ...]:
    """An attribute as the names to read, outermost first (``shared.wire.kinds``): a literal
    name is itself. A malformed reference raises ``InvalidAt``."""
    if literal:
        return (attribute,)
    try:
        return reference_names(attribute)
    except ValueError as exc:
        raise InvalidAt(path, str(exc)) from None


def reader(names: tuple[str, ...]) -> Callable[[Context], Any]:
    """Reads the value at ``names`` in a part's attributes (None where it is missing)."""
    if len(names) == 1:
        (name,) = names
        if name == "anonymous":
            return lambda attributes: attributes.get(name, False)
        return lambda attributes: attributes.get(name)

    def read_nested(attributes: Context) -> Any:
        value: Any = attributes
        for name in names:
            if not isinstance(value, Mapping):
                return None
            value = value.get(name)
        return value

    return read_nested
