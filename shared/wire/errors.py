"""Vane's error envelope, the one shape both processes answer with (pure):
``{"error": {"code", "message", "details": [{"field", "message"}]}}``.

``code`` is stable and machine-readable (by default the status's name below); ``details`` name
the fields a 422 is about. OFREP's endpoints answer OFREP's own error shape instead.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    412: "precondition_failed",
    413: "payload_too_large",
    422: "validation_error",
    429: "rate_limited",
    500: "internal_error",
    503: "unavailable",
}


class FieldError(msgspec.Struct):
    field: str
    message: str


class Problem(msgspec.Struct, omit_defaults=True):
    code: str
    message: str
    details: list[FieldError]
    current_version: int | msgspec.UnsetType = msgspec.field(
        default=msgspec.UNSET, name="currentVersion"
    )  # 412 only: the version an If-Match must name


class ErrorResponse(msgspec.Struct):
    """Every error answer: ``{"error": {"code", "message", "details": [{"field", "message"}]}}``."""

    error: Problem


def status_code_name(status: int) -> str:
    return STATUS_CODES.get(status, "error")


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    details: Iterable[FieldError | tuple[str, str]] = (),
    current_version: int | msgspec.UnsetType = msgspec.UNSET,
) -> ErrorResponse:
    return ErrorResponse(
        Problem(
            code or status_code_name(status),
            message,
            [d if isinstance(d, FieldError) else FieldError(*d) for d in details],
            current_version,
        )
    )


_encode = msgspec.json.Encoder().encode


def encode_error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    details: Iterable[FieldError | tuple[str, str]] = (),
) -> bytes:
    """:func:`error_response` as JSON bytes."""
    return _encode(error_response(status, message, code=code, details=details))
