"""Decoding request bodies the same way on the control plane and the relay (pure).

msgspec raises three different things for a body that is not JSON at all: ``DecodeError`` for
broken syntax, ``UnicodeDecodeError`` for bytes that are not UTF-8, and ``RecursionError`` for
nesting deeper than the interpreter's stack allows. All three are the client's fault and answered
400; ``msgspec.ValidationError`` (well-formed JSON of the wrong shape, 422) passes through.

Free-form JSON that is stored and later decoded again elsewhere (event ``props``, flag values) is
held to ``MAX_DEPTH`` levels, far below the interpreter's limit, so that it decodes anywhere.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

MAX_DEPTH = 32
MAX_BODY_BYTES = 1 << 20  # a request body, by default, on either side
"""Nesting allowed in stored free-form JSON (event ``props``, json flag variations)."""

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
