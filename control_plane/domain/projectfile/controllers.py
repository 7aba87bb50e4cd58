"""``GET /export``, ``POST /plan``, ``POST /apply`` and the document's JSON Schema."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

import msgspec
import yaml
from litestar import Controller, MediaType, Request, Response, get, post
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIResponse, Operation
from litestar.params import JSONBody, QueryParameter

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx
from control_plane.domain.projectfile import schemas as s
from control_plane.domain.projectfile import services
from control_plane.domain.projectfile.collector import paused_per_request
from control_plane.domain.projectfile.export import document_builtins
from control_plane.errors import ApiError, FieldError, StrictBody

YAML = "application/yaml"
DOCUMENT_MAX_BYTES = 32 << 20  # a project of 10,000 flags is a few MB; a 50 MB body is 413
PREFIX = "document."


T = TypeVar("T", bound=msgspec.Struct)


class DocumentBody(StrictBody[T]):
    """As ``StrictBody``, with a problem inside the document named by its path in the
    document (``flags[3].type``), as a file's author reads it."""

    def decode_bytes(self, value: bytes) -> Any:
        try:
            return super().decode_bytes(value)
        except ApiError as exc:
            if exc.status != 422:
                raise
            details = [FieldError(_named(value, d.field), d.message) for d in exc.details]
            message = f"{details[0].field}: {details[0].message}" if details else exc.message
            raise ApiError(422, message, details=details) from exc


AN_ENVIRONMENT = re.compile(r"^flags\[(\d+)\]\.environments\[\.\.\.\]")


def _named(raw: bytes, field: str) -> str:
    """``field`` in the document's terms: without ``document.``, and with the environment a
    flag's setting is under named where msgspec says ``[...]``."""
    field = field.removeprefix(PREFIX)
    found = AN_ENVIRONMENT.match(field)
    if found is None:
        return field
    try:
        settings = msgspec.json.decode(raw)["document"]["flags"][int(found[1])]["environments"]
        env = next(k for k, v in settings.items() if not _valid(v))
    except (msgspec.DecodeError, LookupError, TypeError, StopIteration):
        return field
    return f"flags[{found[1]}].environments.{env}" + field[found.end() :]


def _valid(setting: Any) -> bool:
    try:
        msgspec.convert(setting, s.FlagEnvironmentDoc, strict=True)
    except msgspec.ValidationError:
        return False
    return True


def to_yaml(value: Any) -> bytes:
    text: str = yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=100)
    return text.encode()


def project_schema() -> dict[str, Any]:
    """The document's JSON Schema, generated from the structs the API decodes it with."""
    schema: dict[str, Any] = msgspec.json.schema(s.ProjectDoc)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "/schema/project.json",
        "title": "Vane project document",
        **schema,
    }


@get(
    "/schema/project.json", include_in_schema=False, media_type=MediaType.JSON, sync_to_thread=False
)
def project_json_schema() -> dict[str, Any]:
    return project_schema()


@dataclass
class ExportOperation(Operation):
    """The export's OpenAPI operation: the document is answered as JSON or as YAML."""

    def __post_init__(self) -> None:
        ok = (self.responses or {}).get("200")
        if isinstance(ok, OpenAPIResponse) and ok.content:
            schema = next(iter(ok.content.values())).schema
            ok.content = {
                media: OpenAPIMediaType(schema=schema) for media in (MediaType.JSON, YAML)
            }


def _wants_yaml(request: Request[Any, Any, Any], fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "yaml"
    accept = request.headers.get("accept", "")
    return YAML in accept or "text/yaml" in accept or "application/x-yaml" in accept


class ProjectFileController(Controller):
    path = ""
    tags = ["flags as code"]
    guards = [requires(KeyKind.MANAGEMENT)]
    middleware = [paused_per_request]

    @get(
        "/export",
        summary="The project as one document (YAML with ?format=yaml or Accept: application/yaml)",
        responses={200: ResponseSpec(data_container=s.ProjectDoc, description="The document")},
        operation_class=ExportOperation,
    )
    async def export(
        self,
        ctx: Ctx,
        request: Request[Any, Any, Any],
        fmt: Annotated[
            Literal["json", "yaml"] | None, QueryParameter(name="format", required=False)
        ] = None,
    ) -> Response[bytes]:
        document = document_builtins(await services.export_project(ctx))
        if _wants_yaml(request, fmt):
            return Response(to_yaml(document), media_type=YAML)
        return Response(msgspec.json.encode(document), media_type=MediaType.JSON)

    @post(
        "/plan",
        status_code=200,
        dto=DocumentBody[s.PlanIn],
        return_dto=None,
        request_max_body_size=DOCUMENT_MAX_BYTES,
        summary="What applying a document would create, change (field by field) or leave alone",
    )
    async def plan(self, ctx: Ctx, data: JSONBody[s.PlanIn], state: State) -> s.Plan:
        return await services.plan_project(ctx, data, state.settings.webhook_private)

    @post(
        "/apply",
        status_code=200,
        dto=DocumentBody[s.ApplyIn],
        return_dto=None,
        request_max_body_size=DOCUMENT_MAX_BYTES,
        summary="Apply a document in one transaction (409 if anything moved since the plan)",
    )
    async def apply(self, ctx: Ctx, data: JSONBody[s.ApplyIn], state: State) -> s.Applied:
        return await services.apply_project(ctx, data, state.settings.webhook_private)
