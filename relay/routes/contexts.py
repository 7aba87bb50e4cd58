"""The evaluation context of a request body: ``{"context": {...}}``, checked."""

from __future__ import annotations

from typing import Any

import msgspec

from shared.engine import context_problem
from shared.wire.body import MalformedBody, decode


class _Body(msgspec.Struct):
    context: msgspec.Raw = msgspec.Raw()


_body_decoder = msgspec.json.Decoder(_Body)
_context_decoder = msgspec.json.Decoder(dict[str, Any])
_any_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder()


class ContextError(Exception):
    """A request body the endpoint cannot use; ``malformed`` when it is not JSON at all."""

    def __init__(self, message: str, *, malformed: bool) -> None:
        super().__init__(message)
        self.message = message
        self.malformed = malformed


def parse_context(body: bytes) -> tuple[dict[str, Any], msgspec.Raw]:
    """The ``context`` object of ``{"context": {...}}`` and its raw bytes (for ETags)."""
    try:
        raw = decode(body, _body_decoder).context
    except MalformedBody as exc:
        raise ContextError(exc.message, malformed=True) from exc
    except msgspec.ValidationError as exc:
        # msgspec may report a type mismatch before it sees that the JSON is broken (``[``)
        try:
            decode(body, _any_decoder)
        except MalformedBody as broken:
            raise ContextError(broken.message, malformed=True) from exc
        raise ContextError(f"request body must be a JSON object: {exc}", malformed=False) from exc
    if not raw:
        raise ContextError("context is required", malformed=False)
    try:
        context = decode(raw, _context_decoder)
    except MalformedBody as exc:
        raise ContextError(exc.message, malformed=True) from exc
    except msgspec.ValidationError as exc:
        raise ContextError("context must be an object", malformed=False) from exc
    return context, raw


def targeting_key_problem(context: dict[str, Any]) -> tuple[str, str] | None:
    """``(errorCode, errorDetails)`` when the context has no usable key, else None.

    A key of the wrong type is INVALID_CONTEXT; no key at all is TARGETING_KEY_MISSING (the
    engine accepts ``key`` or OpenFeature's ``targetingKey``, a non-empty string). A context
    naming a kind (``kind``: another kind, or ``"multi"`` with a part per kind, as
    LaunchDarkly's OpenFeature providers carry it) needs a key in each part; a kind that cannot
    be is INVALID_CONTEXT.
    """
    kind = context.get("kind")
    if kind is not None and kind != "user":
        found = context_problem(context)
        if found is None:
            return None
        field, message = found
        code = "TARGETING_KEY_MISSING" if field.endswith("key") else "INVALID_CONTEXT"
        return code, f"context.{field}: {message}"
    for name in ("key", "targetingKey"):
        value = context.get(name)
        if value.__class__ is str and value:
            return None
    for name in ("key", "targetingKey"):
        value = context.get(name)
        if value is not None and not isinstance(value, str):
            return "INVALID_CONTEXT", f"context.{name} must be a string"
    return "TARGETING_KEY_MISSING", "context needs a non-empty targetingKey (or key)"
