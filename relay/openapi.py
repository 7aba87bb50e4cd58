"""The relay's OpenAPI document, served at ``GET /openapi.json``.

OFREP's operations come from the protocol's own document (``ofrep-openapi.json``, a JSON copy of
open-feature/protocol's ``service/openapi.yaml``, Apache-2.0, provenance in its ``x-source``), with
three changes: 503 while the relay holds no snapshot yet; the reasons of OpenFeature's
specification (OFREP's own list leaves out ``DEFAULT``, which a fallthrough is); and the value of
a success as ``anyOf`` its types (as ``oneOf`` no value can pass: see ``document``). Vane's own browser and event
endpoints are described here, with Vane's error schema. The event stream
(``/ofrep/v1/events``) is left out: it is a stream, not a request and answer.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from importlib import resources
from typing import Any

from shared.wire import events

_ERROR_STATUSES = {
    400: "The body is not JSON (empty, malformed, not UTF-8 or nested too deeply)",
    401: "No key, or an unknown or revoked one",
    403: "A key of the wrong kind, or an origin the public key does not allow",
    413: "The body is larger than 1 MiB",
    422: "Invalid input: each detail names its field",
    429: "Rate limited: retry after the Retry-After header's seconds",
    503: "No snapshot yet, or the event spool is full: retry after Retry-After",
}


OPENFEATURE_REASONS = [
    "STATIC",
    "DEFAULT",
    "TARGETING_MATCH",
    "SPLIT",
    "CACHED",
    "DISABLED",
    "UNKNOWN",
    "STALE",
    "ERROR",
]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(s): _json(_ref("VaneError"), _ERROR_STATUSES[s]) for s in statuses}


_PUBLIC: list[dict[str, list[str]]] = [{"BearerAuth": []}, {"ApiKeyAuth": []}]

_PAGE_EXPERIMENTS = {"type": "array", "items": {"$ref": "#/components/schemas/PageExperiment"}}

_SCHEMAS: dict[str, Any] = {
    "VaneError": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message", "details"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "details": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["field", "message"],
                            "properties": {
                                "field": {"type": "string"},
                                "message": {"type": "string"},
                            },
                        },
                    },
                },
            }
        },
    },
    "FlagsRequest": {
        "type": "object",
        "required": ["context"],
        "properties": {"context": {"type": "object", "additionalProperties": True}},
    },
    "Flags": {
        "type": "object",
        "required": ["flags"],
        "properties": {
            "flags": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "required": ["value", "variation", "reason"],
                    "properties": {
                        "value": {},
                        "variation": {"type": ["integer", "null"]},
                        "reason": {"type": "string"},
                        "variationName": {"type": "string"},
                        "errorCode": {"type": "string"},
                    },
                },
            }
        },
    },
    "ExperimentsRequest": {
        "type": "object",
        "required": ["unit"],
        "additionalProperties": False,
        "properties": {
            "unit": {"type": "string", "minLength": 1, "maxLength": 200},
            "url": {"type": ["string", "null"]},
            "expose": {
                "type": "boolean",
                "default": True,
                "description": "false: list without recording exposures (the browser tracker "
                "records one when the page shows the element)",
            },
            "units": {
                "type": ["object", "null"],
                "additionalProperties": {"type": "string"},
                "description": "keys of other context kinds than the user "
                '({"organization": "acme"})',
            },
            "context": {
                "type": ["object", "null"],
                "description": "the unit's context (LaunchDarkly's shape): the experiments' "
                "dimensions are read from it",
            },
            "ts": {
                "type": ["integer", "null"],
                "description": "epoch ms by the page's clock when it showed the variant: the "
                "exposure's time, put on the relay's clock as an event batch's ts is "
                "(default: the relay's time of receipt)",
            },
            "sentAt": {
                "type": ["integer", "null"],
                "description": "epoch ms by the page's clock when it sent the request",
            },
        },
    },
    "Selectors": {
        "type": "object",
        "required": ["selectors"],
        "properties": {
            "selectors": {"type": "array", "items": {"type": "string"}},
            "experiments": {
                **_PAGE_EXPERIMENTS,
                "description": "with ?unit=: the page's experiments with the unit's variant, "
                "as POST /sdk/v1/experiments lists them with expose: false",
            },
        },
    },
    "PageExperiment": {
        "type": "object",
        "required": ["key", "type", "variant", "goal", "content"],
        "properties": {
            "key": {"type": "string"},
            "type": {"enum": ["element", "cta"]},
            "variant": {"type": "string"},
            "goal": {"type": "string"},
            "content": {"type": "string"},
            "selector": {"type": "string"},
            "href": {"type": "string"},
            "bg": {"type": "string"},
            "color": {"type": "string"},
        },
    },
    "Experiments": {
        "type": "object",
        "required": ["experiments"],
        "properties": {
            "experiments": _PAGE_EXPERIMENTS,
        },
    },
    "Assignment": {
        "type": "object",
        "required": ["experiment", "variant", "assigned", "reason", "content"],
        "properties": {
            "experiment": {"type": "string"},
            "variant": {"type": "string"},
            "assigned": {"type": "boolean"},
            "reason": {"type": "string"},
            "content": {"type": ["string", "null"]},
        },
    },
    "Event": {
        "type": "object",
        "required": ["unit", "event"],
        "additionalProperties": False,
        "properties": {
            "unit": {"type": "string", "minLength": 1, "maxLength": events.MAX_TEXT},
            "event": {"type": "string", "minLength": 1, "maxLength": events.MAX_TEXT},
            "value": {
                "type": "integer",
                "minimum": -events.MAX_VALUE,
                "maximum": events.MAX_VALUE,
                "description": "minor units (cents): 4999 for 49.99",
            },
            "currency": {"type": "string", "description": "ISO 4217, e.g. EUR"},
            "props": {"type": "object", "additionalProperties": True},
            "url": {"type": "string", "maxLength": events.MAX_URL},
            "ts": {"type": "integer", "description": "epoch milliseconds"},
            "eventId": {"type": "string", "minLength": 1, "maxLength": events.MAX_TEXT},
        },
    },
    "EventBatch": {
        "type": "object",
        "required": ["events"],
        "additionalProperties": False,
        "properties": {
            "events": {
                "type": "array",
                "minItems": 1,
                "maxItems": events.MAX_BATCH,
                "items": _ref("Event"),
            },
            "sentAt": {
                "type": "integer",
                "minimum": events.EARLIEST_TS,
                "description": "the sender's clock (epoch ms) when it sent the batch: each ts "
                "is read on that clock and moved onto the relay's",
            },
        },
    },
    "Ack": {
        "type": "object",
        "required": ["accepted", "duplicates", "spooled"],
        "properties": {
            "accepted": {"type": "integer"},
            "duplicates": {
                "type": "integer",
                "description": "repeats of an eventId in the request",
            },
            "spooled": {"type": "boolean"},
        },
    },
}


def _post(summary: str, request: str, answer: str, security: Any, *errors: int) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "security": security,
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(request)}},
            },
            "responses": {"200": _json(_ref(answer), "OK"), **_errors(*errors)},
        }
    }


_BROWSER_ERRORS = (400, 401, 403, 413, 422, 429, 503)
_SERVER_ERRORS = (400, 401, 403, 413, 422, 503)
_SERVER: list[dict[str, list[str]]] = [{"BearerAuth": []}]


def _vane_paths() -> dict[str, Any]:
    paths = {
        "/sdk/v1/flags": _post(
            "Every client-side flag's value for a context (public key)",
            "FlagsRequest",
            "Flags",
            _PUBLIC,
            *_BROWSER_ERRORS,
        ),
        "/sdk/v1/experiments": _post(
            "The element and cta experiments running on a page, with the unit's variant; "
            "records each first exposure (public key)",
            "ExperimentsRequest",
            "Experiments",
            _PUBLIC,
            *_BROWSER_ERRORS,
        ),
        "/sdk/v1/experiments/{key}/assign": {
            "post": {
                **_post(
                    "One experiment's variant for a unit; records its first exposure (public "
                    "key, or a server key bound to an environment, never from a page)",
                    "ExperimentsRequest",
                    "Assignment",
                    [*_PUBLIC],
                    *_BROWSER_ERRORS,
                )["post"],
                "parameters": [
                    {"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
            }
        },
        "/sdk/v1/events": _post(
            "Browser events (public key; also ?key= for sendBeacon). Names starting with $ are "
            "reserved; eventIds live in the browsers' own namespace",
            "EventBatch",
            "Ack",
            _PUBLIC,
            *_BROWSER_ERRORS,
        ),
    }
    for path, media, what in (
        ("/sdk/v1/vane.js", "text/javascript", "The browser tracker (docs/browser.md)"),
        ("/sdk/v1/vane.d.ts", "application/typescript", "The tracker's TypeScript declarations"),
    ):
        paths[path] = {
            "get": {
                "summary": f"{what}; no key. ETag (304 on If-None-Match), gzip when asked",
                "security": [],
                "responses": {
                    "200": {
                        "description": "OK",
                        "content": {media: {"schema": {"type": "string"}}},
                    },
                    "304": {"description": "Not modified (If-None-Match)"},
                },
            }
        }
    paths["/sdk/v1/selectors"] = {
        "get": {
            "summary": "The CSS selectors of the element and cta experiments running on a page, "
            "which the tracker hides until it has applied them, and with ?unit= the unit's "
            "variants there (public key, also as ?key=)",
            "security": _PUBLIC,
            "parameters": [
                {"name": "key", "in": "query", "required": False, "schema": {"type": "string"}},
                {
                    "name": "url",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string", "maxLength": 2048},
                },
                {
                    "name": "unit",
                    "in": "query",
                    "required": False,
                    "description": "also answer the unit's variants (experiments)",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
                },
            ],
            "responses": {
                "200": _json(_ref("Selectors"), "OK"),
                "304": {"description": "Not modified (If-None-Match)"},
                **_errors(401, 403, 422, 429, 503),
            },
        }
    }
    for prefix in ("/api/v1", "/v1"):
        paths[f"{prefix}/track"] = _post(
            "One event (server or management key)", "Event", "Ack", _SERVER, *_SERVER_ERRORS
        )
        paths[f"{prefix}/events"] = _post(
            "A batch of up to 1000 events (server or management key)",
            "EventBatch",
            "Ack",
            _SERVER,
            *_SERVER_ERRORS,
        )
    return paths


@cache
def document() -> bytes:
    """The relay's OpenAPI document, encoded once."""
    source = resources.files("relay").joinpath("ofrep-openapi.json").read_text()
    doc: dict[str, Any] = json.loads(source)
    doc = copy.deepcopy(doc)
    doc["info"] = {
        "title": "Vane relay",
        "version": "1.0.0",
        "description": "OFREP (from the OpenFeature protocol's own document) and Vane's browser "
        "and event endpoints. " + doc.get("x-source", ""),
    }
    unavailable = {
        "description": "The relay holds no snapshot yet (a first start): retry after Retry-After",
        "content": {"application/json": {"schema": _ref("generalErrorResponse")}},
    }
    for item in doc["paths"].values():
        item["post"]["responses"]["503"] = unavailable
    # OFREP lists five reasons; OpenFeature defines more, and a fallthrough is DEFAULT there (as
    # flagd answers too): the relay's answers use OpenFeature's reasons.
    success = doc["components"]["schemas"]["evaluationSuccess"]["allOf"]
    success[0]["properties"]["reason"]["enum"] = OPENFEATURE_REASONS
    # The value is "one of" boolean, string, integer, float, object or code default, but an
    # integer is also a float and the code default (no properties) matches every value, so no
    # value passes "oneOf": read it as "anyOf", as the text describes.
    success[1] = {"anyOf": success[1]["oneOf"]}
    doc["paths"].update(_vane_paths())
    doc["components"]["schemas"].update(_SCHEMAS)
    too_large = {
        "description": "The request line and headers exceed the relay's HTTP buffer (8 KiB, "
        "VANE_RELAY_HTTP_BUFFER_BYTES); answered by the HTTP server itself"
    }
    for item in doc["paths"].values():
        for operation in item.values():
            operation["responses"].setdefault("431", too_large)
    return json.dumps(doc).encode()
