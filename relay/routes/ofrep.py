"""The OpenFeature Remote Evaluation Protocol (``anchors/ofrep-openapi.yaml``) for public keys
(client-side flags) and server keys bound to an environment (every flag; never from a page).

* ``POST /ofrep/v1/evaluate/flags/{key}``: 200 ``evaluationSuccess``; 400 ``evaluationFailure``
  (``PARSE_ERROR`` for a body that is not JSON or a flag that did not compile,
  ``INVALID_CONTEXT``, ``TARGETING_KEY_MISSING``); 404 ``FLAG_NOT_FOUND`` for unknown, archived
  and (for public keys) server-side-only flags; 500 ``GENERAL``.
* ``POST /ofrep/v1/evaluate/flags``: 200 ``{"flags": [...], "metadata", "eventStreams"}`` with an
  ``ETag``; ``If-None-Match`` equal to it → 304; 400 ``bulkEvaluationFailure``.

Success items always carry ``variant`` (the variation's name, else its index) and ``metadata``
(``{"version": <snapshot version>}``); nothing about rules, segments or prerequisites.

The bulk ETag is a hash of the environment's snapshot identity, the public key id, the current
SSE token window (see ``sse``) and the raw ``context`` bytes: it changes with every snapshot
version, differs per context, and never lets a 304 keep an event-stream token alive past half
its lifetime. It is deterministic, so every relay serving the same version agrees.
"""

from __future__ import annotations

import functools
import hashlib
import time

from relay.http import Headers, Request, Response, Router, json_encode, ofrep_error_body
from relay.routes import evaluation
from relay.routes.admission import Admission, Gate
from relay.routes.contexts import ContextError, targeting_key_problem
from relay.routes.sse import EventStreams
from shared.clock import now_ms
from shared.engine import ofrep_error_code

BULK_PATH = "/ofrep/v1/evaluate/flags"
SINGLE_PATH = "/ofrep/v1/evaluate/flags/{key}"


def register(router: Router, gate: Gate, streams: EventStreams) -> None:
    routes = OfrepRoutes(gate, streams)
    router.add("POST", BULK_PATH, routes.bulk, error_body=ofrep_error_body, cors=True)
    router.add("POST", SINGLE_PATH, routes.single, error_body=ofrep_error_body, cors=True)


def _failure(code: str, details: str, key: str | None = None) -> bytes:
    if key is None:
        return json_encode({"errorCode": code, "errorDetails": details})
    return json_encode({"key": key, "errorCode": code, "errorDetails": details})


def _context_failure(exc: ContextError, headers: Headers, key: str | None = None) -> Response:
    """400: ``PARSE_ERROR`` for a body that is not JSON, else ``INVALID_CONTEXT``."""
    code = "PARSE_ERROR" if exc.malformed else "INVALID_CONTEXT"
    return Response(400, _failure(code, exc.message, key), headers)


def etag_matches(if_none_match: bytes, etag: bytes) -> bool:
    """RFC 9110 weak comparison against a list of entity tags (or ``*``)."""
    if if_none_match == etag:
        return True
    for candidate in if_none_match.split(b","):
        tag = candidate.strip()
        if tag == b"*" or tag.removeprefix(b"W/") == etag:
            return True
    return False


class OfrepRoutes:
    def __init__(self, gate: Gate, streams: EventStreams) -> None:
        self.gate = gate
        self.streams = streams
        self.metrics = gate.metrics

    async def bulk(self, request: Request) -> Response:
        admitted = await self.gate.admit_context(request, ofrep_error_body, _context_failure)
        if not isinstance(admitted, Admission):
            return admitted
        headers, context, raw = admitted.headers, admitted.context, admitted.raw
        problem = targeting_key_problem(context)
        if problem is not None:
            return Response(400, _failure(*problem), headers)

        state = admitted.state
        view = admitted.view
        key_id = admitted.caller.key.id
        now = time.time()
        digest = hashlib.blake2b(view.etag_seed, digest_size=16)
        digest.update(b"|%s|%d|" % (key_id.encode(), self.streams.tokens.window(now)))
        digest.update(raw)
        etag = b'"' + digest.hexdigest().encode() + b'"'
        headers.append((b"etag", etag))
        if_none_match = request.headers.get(b"if-none-match")
        if if_none_match is not None and etag_matches(if_none_match, etag):
            return Response(304, b"", headers[1:])  # no body, so no content type

        evaluations = await evaluation.all_flags(
            state,
            context,
            int(now * 1000),
            client_side_only=not admitted.trusted,
            context_bytes=len(raw),
        )
        parts = view.ofrep_items(evaluations)
        self.metrics.count_evaluations(state.environment, len(parts))
        self.gate.evaluated(state, context, evaluations)
        streams = (
            b"[]"  # a backend polls with If-None-Match; event streams are for pages
            if admitted.trusted
            else self.streams.entry(request, state.environment, key_id, state.version)
        )
        body = b"".join(
            (
                b'{"flags":[',
                b",".join(parts),
                b"],",
                view.bulk_metadata,
                b',"eventStreams":',
                streams,
                b"}",
            )
        )
        return Response(200, body, headers)

    async def single(self, request: Request) -> Response:
        key = request.param or ""
        refuse = functools.partial(_context_failure, key=key)
        admitted = await self.gate.admit_context(request, ofrep_error_body, refuse)
        if not isinstance(admitted, Admission):
            return admitted
        headers, context, raw = admitted.headers, admitted.context, admitted.raw
        state = admitted.state
        flag = state.compiled.flags.get(key)
        if flag is None or not (flag.client_side or admitted.trusted):
            return Response(
                404, _failure("FLAG_NOT_FOUND", f"flag {key!r} not found", key), headers
            )
        problem = targeting_key_problem(context)
        if problem is not None:
            return Response(400, _failure(*problem, key), headers)

        result = await evaluation.one_flag(state, key, context, now_ms(), len(raw))
        self.metrics.count_evaluations(state.environment, 1)
        self.gate.evaluated(state, context, {key: result})
        error = ofrep_error_code(result)
        if error is None:
            return Response(200, admitted.view.ofrep_item(key, result), headers)
        if error == "FLAG_NOT_FOUND":
            return Response(404, _failure(error, f"flag {key!r} not found", key), headers)
        if error == "GENERAL":
            return Response(500, _failure(error, "the flag could not be evaluated", key), headers)
        return Response(400, admitted.view.ofrep_item(key, result), headers)
