"""One JSON error shape everywhere: ``{"error": {"code", "message", "details"}}``.

Request bodies are decoded strictly (no type coercion, unknown fields refused) by ``StrictBody``;
msgspec's messages are turned into details that name the field, e.g. ``rules[0].clauses[1].op``.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, TypeVar

import msgspec
from litestar import MediaType, Request, Response
from litestar.dto import DTOConfig, MsgspecDTO
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    ValidationException,
)
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Reference, Schema
from litestar.typing import FieldDefinition
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError

from shared.wire import body
from shared.wire.errors import ErrorResponse, error_response, status_code_name
from shared.wire.errors import FieldError as FieldError  # the domains raise with it
from shared.wire.events import convert_problem

logger = logging.getLogger("vane.errors")

_WHEN = {
    400: "The body is not JSON (empty, malformed, not UTF-8 or nested too deeply)",
    401: "No API key, or an unknown or revoked one",
    403: "A key of the wrong kind for this endpoint, or a role without the permission the "
    "operation needs (the detail `permission` names it)",
    404: "No such resource",
    409: "Conflicts with the current state (a duplicate key, a forbidden transition, ...)",
    412: "If-Match names a version that is no longer current (the answer carries the current "
    "one in `error.currentVersion` and `ETag`); nothing was written",
    413: "The body is larger than the limit",
    422: "Invalid input: each detail names its field",
    429: "Rate limited: retry after the Retry-After header's seconds",
}


def error_spec(description: str) -> ResponseSpec:
    """An error answer as the OpenAPI document shows it: Vane's error schema, and when."""
    return ResponseSpec(
        data_container=ErrorResponse, description=description, generate_examples=False
    )


ERROR_RESPONSES = {status: error_spec(text) for status, text in _WHEN.items()}
"""Documented on every operation, so the OpenAPI document shows each status Vane can answer with
Vane's own error schema (not the framework's default). A handler's own ``responses`` say more
of a status where it means more there (``domain.protection.GATED_RESPONSES``)."""
CONFLICT = _WHEN[409]
FORBIDDEN = _WHEN[403]


class ApiError(Exception):
    """An error a client should see, with the status, a stable code and field details."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: list[FieldError] | None = None,
        headers: dict[str, str] | None = None,
        current_version: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or status_code_name(status)
        self.message = message
        self.details = details or []
        self.headers = headers or {}
        self.current_version = current_version  # 412: the version If-Match must name

    def at(self, where: str, label: str | None = None) -> ApiError:
        """This refusal as one of a part of a larger body, at ``where`` (``changes[2]``,
        ``flags[7].environments.production``): each field named by its path from there (the
        part itself when none was), the message led by ``label`` (by default ``where``)."""
        details = [FieldError(f"{where}.{d.field}", d.message) for d in self.details]
        return ApiError(
            self.status,
            f"{label or where}: {self.message}",
            code=self.code,
            details=details or [FieldError(where, self.message)],
        )


def not_found(what: str, key: str) -> ApiError:
    return ApiError(404, f"{what} {key!r} not found")


def forbidden(message: str, *, permission: str) -> ApiError:
    """403: the caller's role lacks ``permission`` (named in a detail a client can read)."""
    return ApiError(403, message, details=[FieldError("permission", permission)])


def conflict(message: str) -> ApiError:
    return ApiError(409, message)


def stale_version(current: int) -> ApiError:
    """412 for a write whose ``If-Match`` is not the resource's current version."""
    return ApiError(
        412,
        f"If-Match does not name the current version ({current}): reload, then retry",
        details=[FieldError("If-Match", f"the current version is {current}")],
        headers={"ETag": etag(current)},
        current_version=current,
    )


def etag(version: int) -> str:
    return f'"{version}"'


def invalid(field: str, message: str) -> ApiError:
    return ApiError(422, f"{field}: {message}", details=[FieldError(field, message)])


def invalid_many(details: list[FieldError]) -> ApiError:
    first = details[0]
    more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
    return ApiError(422, f"{first.field}: {first.message}{more}", details=details)


def field_from_msgspec(error: msgspec.ValidationError) -> FieldError:
    field, message = convert_problem("", error)
    return FieldError(field=field or "body", message=message)


def malformed(exc: body.MalformedBody) -> ApiError:
    return ApiError(400, exc.message, code="malformed_json")


_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def decode_json_body(raw: bytes, model: type[Any], *, check_text: bool = True) -> Any:
    """Decode ``raw`` into ``model`` strictly; a body that is not JSON (empty, broken, not
    UTF-8, nested too deeply) is 400, a wrong shape or text no database stores 422."""
    decoder = _decoders.get(model)
    if decoder is None:
        decoder = _decoders[model] = msgspec.json.Decoder(model, strict=True)
    try:
        value = body.decode(raw, decoder)
    except msgspec.ValidationError as exc:
        raise invalid_many([field_from_msgspec(exc)]) from exc
    except body.MalformedBody as exc:
        if check_text:
            refuse_unstorable(raw)  # a lone surrogate, which msgspec refuses as not JSON
        raise malformed(exc) from exc
    if check_text:
        refuse_unstorable(raw)
    return value


def refuse_unstorable(raw: bytes) -> None:
    """422 naming the field of the first string (or key) in a JSON body that a database cannot
    store as text (``body.text_problem``): the one check every management body goes through."""
    found = body.unstorable_in_json(raw)
    if found is not None:
        raise invalid(*found)


T = TypeVar("T", bound=msgspec.Struct)


class StrictBody(MsgspecDTO[T]):
    """A request-body DTO that decodes strictly; use as ``dto=StrictBody[Model]``.

    Litestar's own decoding coerces types (``"5"`` becomes ``5``); flags are typed values, so
    Vane refuses instead. The OpenAPI schema is the model's own (camelCase) component.
    """

    # the body is decoded above, never by the DTO's transfer functions: generating their code
    # for each handler (the default backend) cost about 0.12 s of every app's start, 60 bodies
    config = DTOConfig(experimental_codegen_backend=False)
    check_text: ClassVar[bool] = True
    """Refuse text no database stores (``refuse_unstorable``); off only where a body has rules
    of its own for it (events: ``shared.wire.events``, the same for one event and a batch)."""

    def decode_bytes(self, value: bytes) -> Any:
        return decode_json_body(value, self.model_type, check_text=self.check_text)

    @classmethod
    def create_openapi_schema(
        cls, field_definition: FieldDefinition, handler_id: str, schema_creator: Any
    ) -> Reference | Schema:
        schema: Reference | Schema = schema_creator.for_field_definition(
            FieldDefinition.from_annotation(cls.model_type)
        )
        return schema


def _body(
    status: int, code: str, message: str, details: list[FieldError], current: int | None = None
) -> ErrorResponse:
    version = msgspec.UNSET if current is None else current
    return error_response(status, message, code=code, details=details, current_version=version)


def api_error_handler(_: Request[Any, Any, Any], exc: ApiError) -> Response[Any]:
    return Response(
        _body(exc.status, exc.code, exc.message, exc.details, exc.current_version),
        status_code=exc.status,
        media_type=MediaType.JSON,
        headers=exc.headers,
    )


def http_exception_handler(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    status = exc.status_code
    details: list[FieldError] = []
    message = exc.detail
    if isinstance(exc, ValidationException):
        # Litestar's own parameter validation (query and path parameters), and a missing body
        # (an empty body never reaches the DTO: Litestar passes it on as "no data").
        items = [
            item
            for item in (exc.extra if isinstance(exc.extra, list) else [])
            if isinstance(item, dict)
        ]
        if any(item.get("key") == "data" for item in items):
            return api_error_handler(request, ApiError(400, body.EMPTY, code="malformed_json"))
        for item in items:
            field = str(item.get("key") or item.get("source") or "request")
            details.append(FieldError(field, str(item.get("message") or "invalid")))
        status = 422 if details else 400
        message = f"{details[0].field}: {details[0].message}" if details else message
    elif isinstance(exc, RequestEntityTooLarge):
        message = "request body is larger than the limit of 1 MiB"
    elif isinstance(exc, NotFoundException) and exc.detail == "Not Found":
        message = f"no such endpoint: {request.method} {request.url.path}"
    elif isinstance(exc, MethodNotAllowedException):
        message = f"{request.method} is not allowed on {request.url.path}"
    elif isinstance(exc, NotAuthorizedException | PermissionDeniedException):
        pass
    code = status_code_name(status)
    headers = dict(exc.headers or {})
    return Response(
        _body(status, code, message, details),
        status_code=status,
        media_type=MediaType.JSON,
        headers=headers,
    )


def internal_error_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    where = f"{getattr(request, 'method', 'WEBSOCKET')} {getattr(getattr(request, 'url', None), 'path', '')}"
    logger.error("unhandled error on %s", where, exc_info=exc)
    return Response(
        _body(500, "internal_error", "internal error", []),
        status_code=500,
        media_type=MediaType.JSON,
    )


def database_unavailable_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The database cannot be reached (restarting, partitioned): 503 with ``Retry-After``, so a
    client retries the write instead of treating it as failed for good. Nothing was committed:
    the request's transaction never reached its commit, or its commit failed."""
    if isinstance(exc, DBAPIError) and not _unreachable(exc):
        return internal_error_handler(request, exc)
    logger.warning("database unavailable: %s", str(exc).splitlines()[0] if str(exc) else exc)
    return Response(
        _body(503, "unavailable", "the database is unavailable; retry shortly", []),
        status_code=503,
        media_type=MediaType.JSON,
        headers={"Retry-After": "1"},
    )


def _unreachable(exc: DBAPIError) -> bool:
    return exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError)


EXCEPTION_HANDLERS: dict[type[Exception] | int, Any] = {
    ApiError: api_error_handler,
    HTTPException: http_exception_handler,
    DBAPIError: database_unavailable_handler,
    SQLAlchemyTimeoutError: database_unavailable_handler,  # no pooled connection came free
    Exception: internal_error_handler,
}
