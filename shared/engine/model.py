"""Values the engine hands out: evaluation results, their reasons, and compile errors.

Every ``Evaluation`` an engine returns is built while compiling and shared between calls, so
evaluating allocates nothing. Treat an evaluation (and a JSON ``value`` inside it) as read-only.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec


class Reason(enum.StrEnum):
    """Why a flag served what it served (LaunchDarkly's reason kinds)."""

    OFF = "OFF"
    TARGET_MATCH = "TARGET_MATCH"
    RULE_MATCH = "RULE_MATCH"
    PREREQUISITE_FAILED = "PREREQUISITE_FAILED"
    FALLTHROUGH = "FALLTHROUGH"
    ERROR = "ERROR"


class ErrorKind(enum.StrEnum):
    """What went wrong when ``reason`` is ``ERROR``; the caller serves its own default value."""

    FLAG_NOT_FOUND = "FLAG_NOT_FOUND"
    # The flag did not compile (only in a snapshot compiled with ``strict=False``).
    MALFORMED_FLAG = "MALFORMED_FLAG"
    # The context has no usable key: no non-empty string ``key`` or ``targetingKey``.
    USER_NOT_SPECIFIED = "USER_NOT_SPECIFIED"
    # An unexpected failure inside the engine; never expected, reported rather than raised.
    EXCEPTION = "EXCEPTION"


class Evaluation(msgspec.Struct, frozen=True, omit_defaults=True):
    """The result of evaluating one flag for one context.

    ``value`` is ``None`` and ``variation`` is ``None`` when ``reason`` is ``ERROR``.
    ``in_rollout`` is true when the variation was picked by a percentage rollout.
    """

    reason: Reason
    value: Any = None
    variation: int | None = None
    variation_name: str | None = None
    rule_index: int | None = None
    rule_id: str | None = None
    prerequisite_key: str | None = None
    error_kind: ErrorKind | None = None
    in_rollout: bool = False


FLAG_NOT_FOUND = Evaluation(Reason.ERROR, error_kind=ErrorKind.FLAG_NOT_FOUND)
MALFORMED_FLAG = Evaluation(Reason.ERROR, error_kind=ErrorKind.MALFORMED_FLAG)
USER_NOT_SPECIFIED = Evaluation(Reason.ERROR, error_kind=ErrorKind.USER_NOT_SPECIFIED)
EXCEPTION = Evaluation(Reason.ERROR, error_kind=ErrorKind.EXCEPTION)


class CompileError(Exception):
    """A snapshot, flag or segment that cannot be compiled.

    ``path`` locates the offending value with wire (camelCase) names, for example
    ``flags.my-flag.rules[0].clauses[1].values[0]``; from ``validate_flag`` it is relative to
    the flag (``rules[0].clauses[1].values[0]``).
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(path, message)
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidAt(Exception):
    """Internal: a problem at a path relative to the flag or segment being compiled."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(path, message)
        self.path = path
        self.message = message


def join(prefix: str, path: str) -> str:
    """Join two path fragments with a dot, leaving out empty ones."""
    if not prefix:
        return path
    if not path:
        return prefix
    return f"{prefix}.{path}"
