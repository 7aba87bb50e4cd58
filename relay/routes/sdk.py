"""Vane's own browser API: ``POST /sdk/v1/flags`` → resolved values of every client-side flag.

``{"context": {...}}`` → ``{"flags": {key: {"value", "variation", "reason"[, "variationName"]}}}``
with Vane's reasons (``RULE_MATCH``, ``FALLTHROUGH``, ...). Values only: no rule ids or indexes,
no clauses, no segments.

A context without a usable key (``key`` or ``targetingKey``, a non-empty string) is not a request
error here: the answer is 200 and every flag's entry is ``{"value": null, "variation": null,
"reason": "ERROR", "errorCode": "TARGETING_KEY_MISSING"}``, as the engine reports it, so a page
falls back to its code defaults flag by flag exactly as it would for one unknown flag.
"""

from __future__ import annotations

from relay.http import Headers, Request, Response, Router, vane_error, vane_error_body
from relay.routes import evaluation
from relay.routes.admission import Admission, Gate
from relay.routes.contexts import ContextError
from shared.clock import now_ms


def register(router: Router, gate: Gate) -> None:
    routes = SdkRoutes(gate)
    router.add("POST", "/sdk/v1/flags", routes.flags, cors=True)


def _context_failure(exc: ContextError, headers: Headers) -> Response:
    """400 ``malformed_json`` for a body that is not JSON, else 422 naming ``context``."""
    if exc.malformed:
        return Response(400, vane_error(400, exc.message, code="malformed_json"), headers)
    body = vane_error(422, f"context: {exc.message}", details=(("context", exc.message),))
    return Response(422, body, headers)


class SdkRoutes:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def flags(self, request: Request) -> Response:
        admitted = await self.gate.admit_context(request, vane_error_body, _context_failure)
        if not isinstance(admitted, Admission):
            return admitted
        state, view, context = admitted.state, admitted.view, admitted.context
        evaluations = await evaluation.all_flags(
            state,
            context,
            now_ms(),
            client_side_only=not admitted.trusted,
            context_bytes=len(admitted.raw),
        )
        parts = view.sdk_items(evaluations)
        self.gate.metrics.count_evaluations(state.environment, len(parts))
        self.gate.evaluated(state, context, evaluations)
        return Response(200, b'{"flags":{' + b",".join(parts) + b"}}", admitted.headers)
