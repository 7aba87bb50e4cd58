"""Decoding request bodies the same way on the control plane and the relay (pure).

msgspec raises three different things for a body that is not JSON at all: ``DecodeError`` for
broken syntax, ``UnicodeDecodeError`` for bytes that are not UTF-8, and ``RecursionError`` for
nesting deeper than the interpreter's stack allows. All three are the client's fault and answered
400; ``msgspec.ValidationError`` (well-formed JSON of the wrong shape, 422) passes through.

Free-form JSON that is stored and later decoded again elsewhere (event ``props``, flag values) is
held to ``MAX_DEPTH`` levels, far below the interpreter's limit, so that it decodes anywhere.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

MAX_DEPTH = 32
"""Nesting allowed in stored free-form JSON (event ``props``, json flag variations)."""
MAX_BODY_BYTES = 1 << 20  # a request body, by default, on either side
MAX_SAFE_INTEGER = 2**53 - 1
"""The bound on every number that reaches a snapshot or an event: exact as an IEEE double (what a
browser's JSON reads) and far inside msgpack's 64-bit integers (the relays' wire), so whatever the
API accepts can travel everywhere. JSON that is not a finite number within it is refused."""
NUMBER_RULE = f"numbers must be finite and within ±{MAX_SAFE_INTEGER} (2^53 - 1)"

EMPTY = "request body is empty: send a JSON object"


class MalformedBody(ValueError):
    """The body is not JSON that can be read (400); ``message`` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def decode(raw: bytes | msgspec.Raw, decoder: msgspec.json.Decoder[T]) -> T:
    """``decoder.decode(raw)``, with every way of not being JSON turned into ``MalformedBody``."""
    if isinstance(raw, bytes) and not raw.strip():
        raise MalformedBody(EMPTY)
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError as exc:
        raise MalformedBody(f"request body is not valid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise MalformedBody(
            f"request body is not valid UTF-8 (byte {exc.start}): JSON must be UTF-8"
        ) from exc
    except RecursionError as exc:
        raise MalformedBody("request body is nested too deeply") from exc


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True if ``value`` (decoded JSON) nests objects or arrays deeper than ``limit``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def encoded_depth_exceeds(encoded: bytes, value: Any, limit: int = MAX_DEPTH) -> bool:
    """``depth_exceeds`` for a value whose JSON encoding is at hand: a cheap count of opening
    brackets rules out deep nesting for almost every value without walking it."""
    if encoded.count(b"{") + encoded.count(b"[") <= limit:
        return False
    return depth_exceeds(value, limit)


def number_in_range(value: Any) -> bool:
    """True if ``value`` is a finite number within ±``MAX_SAFE_INTEGER`` (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER  # NaN compares False


def numbers_out_of_range(value: Any) -> bool:
    """True if any number in ``value`` (decoded JSON, nested) is outside ``number_in_range``."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif (
            isinstance(item, int | float)
            and item.__class__ is not bool  # a bool is an int to Python, not a number to JSON
            and not number_in_range(item)
        ):
            return True
    return False


def value_problem(value: Any) -> str | None:
    """Why free-form JSON (a json flag's variation) cannot be stored and published, or None."""
    if depth_exceeds(value):
        return f"nested at most {MAX_DEPTH} levels deep"
    if numbers_out_of_range(value):
        return NUMBER_RULE
    return None


NUL_RULE = "must not contain NUL (\\u0000) characters"
SURROGATE_RULE = "must not contain lone surrogates (\\ud800-\\udfff): text must be valid Unicode"
KEY_SUFFIX = " (in an object key)"


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as text by every database Vane runs on, or None.

    PostgreSQL refuses NUL in ``text`` and ``jsonb`` (SQLite would keep it, so the same write
    would succeed on one database and fail on the other), and no database encodes a lone
    surrogate as UTF-8. Both are refused at the edge, naming the field, on either database.
    """
    if "\x00" in text:
        return NUL_RULE
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return SURROGATE_RULE
    return None


def unstorable_text(value: Any, path: str = "") -> tuple[str, str] | None:
    """(path, why) of the first string in ``value`` (decoded JSON, object keys too) that
    ``text_problem`` refuses, in document order; paths read ``rules[0].clauses[1].values[2]``."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return (where or "body", problem)
        elif isinstance(item, dict):
            children: list[tuple[Any, str]] = []
            for key, child in item.items():
                inner = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and (problem := text_problem(key)) is not None:
                    return (where or "body", problem + KEY_SUFFIX)
                children.append((child, inner))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([(child, f"{where}[{i}]") for i, child in enumerate(item)]))
    return None


_ESCAPES_TO_CHECK = (b"\\u0000", b"\\ud", b"\\uD")
"""A NUL or a surrogate can only be in a JSON text as a ``\\u`` escape (raw control characters
and ill-formed UTF-8 are not JSON): a body without these bytes holds neither."""


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def unstorable_in_json(raw: bytes) -> tuple[str, str] | None:
    """``unstorable_text`` for a JSON body still in bytes: the field of the first NUL or lone
    surrogate, or None. Nearly every body is ruled out by a byte search; the rest are read by
    the standard library, which (unlike msgspec, which refuses the whole body) reads a lone
    surrogate into the string, so the answer can name the field that holds it."""
    if not any(escape in raw for escape in _ESCAPES_TO_CHECK):
        return None
    try:
        value = json.loads(raw, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return None  # not JSON: the decoder's own answer (400) stands
    return unstorable_text(value)
