"""The gate of every browser (``pk_``) endpoint, and what it hands to the handler.

Admission, in order: a key (``Authorization: Bearer``, OFREP's ``X-API-Key``, or a public key as
``?key=`` in the query, which spares a page's request its CORS preflight; none or unknown is 401),
of kind ``public`` (else 403), called from an origin its allow-list admits (else 403 *without*
an allow-origin header, so the page cannot read the answer), within its rate limit (else 429 with
``Retry-After``), with a body of at most 1 MiB (else 413), for an environment the relay holds a
snapshot of (else 503). Every answer carries the CORS header set; the origin is
reflected on all of them except the allow-list refusal.

The evaluation endpoints (OFREP, ``/sdk/v1/flags``) start in one place, ``Gate.admit_context``:
admitted, then the body's evaluation context, or the route's own answer to a body without one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgspec

from relay.http import ErrorBody, Headers, PayloadTooLarge, Request, Response, cors_headers
from relay.prometheus import RelayMetrics
from relay.routes.callers import bearer_token, origin_allowed, unknown_key
from relay.routes.contexts import ContextError, parse_context
from relay.routes.ratelimit import RateGate
from relay.routes.views import View, Views
from relay.settings import RelaySettings
from relay.store import Caller, EnvironmentState, Store
from shared.engine import Evaluation, exposure_unit
from shared.keys import SERVER_KEY_FROM_PAGE
from shared.wire.protocol import AccessKey


class Admission:
    """A request that passed the gate: a public key, or (where backends are admitted) a server
    key bound to the environment, which is ``trusted`` to see server-side flags too."""

    __slots__ = ("body", "caller", "headers", "state", "trusted", "view")

    def __init__(
        self,
        caller: Caller,
        state: EnvironmentState,
        view: View,
        body: bytes,
        headers: Headers,
        trusted: bool = False,
    ) -> None:
        self.caller = caller
        self.state = state
        self.view = view
        self.body = body
        self.headers = headers  # CORS set for this request; extend, do not share
        self.trusted = trusted


class Evaluating(Admission):
    """An admitted evaluation request (``Gate.admit_context``): its body's evaluation context,
    and the context's raw bytes (their length decides where to evaluate; the bulk ETag hashes
    them)."""

    __slots__ = ("context", "raw")

    def __init__(self, admitted: Admission, context: dict[str, Any], raw: msgspec.Raw) -> None:
        super().__init__(
            admitted.caller,
            admitted.state,
            admitted.view,
            admitted.body,
            admitted.headers,
            trusted=admitted.trusted,
        )
        self.context = context
        self.raw = raw


ContextRefusal = Callable[[ContextError, Headers], Response]
"""A route's answer to a body whose evaluation context it cannot use (in its error shape)."""


class ExposureReporter(Protocol):
    def report(
        self,
        state: EnvironmentState,
        unit: tuple[str, str | None] | None,  # the key, and its kind (None: a user)
        evaluations: Mapping[str, Evaluation],
    ) -> None: ...


class Gate:
    """The gate of the relay's client endpoints and what they share: it admits public keys
    (``pk_``, browsers), and server keys bound to the environment where a route admits
    backends (``admit(..., backends=True)``: OFREP, the SDK's flags, assignments)."""

    def __init__(self, store: Store, settings: RelaySettings, metrics: RelayMetrics) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.views = Views()
        self.rates = RateGate(settings.rate_limit_per_s, settings.rate_limit_burst)
        self.exposures: ExposureReporter | None = None  # set by the experiments routes

    def evaluated(
        self,
        state: EnvironmentState,
        context: dict[str, Any],
        evaluations: Mapping[str, Evaluation],
    ) -> None:
        """Tell the exposure reporter (if any) what a context was served."""
        if self.exposures is not None:
            self.exposures.report(state, exposure_unit(context), evaluations)

    async def admit(
        self, request: Request, error_body: ErrorBody, *, backends: bool = False
    ) -> Admission | Response:
        """Check the key, origin, rate and body; take the environment's state once.

        ``backends``: a server key bound to an environment is admitted too (evaluation and
        assignment endpoints), never from a page: with an ``Origin`` header it is refused.
        """
        headers = request.headers
        origin = headers.get(b"origin")
        token = bearer_token(headers)
        in_query = token is None
        if in_query:
            token = request.query("key") or None
        if token is None:
            message = "a public key is required: Authorization: Bearer pk_..."
            return Response(401, error_body(401, message), cors_headers(origin))
        caller = self.store.caller(token)
        if caller is None:
            return unknown_key(self.store, error_body, cors_headers(origin))
        if in_query and caller.key.kind != "public":
            message = "only a public key may be sent as ?key=; send others in Authorization"
            return Response(403, error_body(403, message), cors_headers(origin))
        trusted = backends and caller.key.kind == "server"
        refused = (
            self.check_server_key(caller.key, origin, error_body)
            if trusted
            else self.check_key(caller.key, origin, error_body, backends=backends)
        )
        if refused is not None:
            return refused
        try:
            body = await request.body()
        except PayloadTooLarge:
            message = "request body is larger than the limit of 1 MiB"
            return Response(413, error_body(413, message), cors_headers(origin))
        state = self.store.get(caller.environment)
        if state is None:
            return Response(503, error_body(503, "relay has no snapshot yet"), cors_headers(origin))
        view = self.views.of(state)
        return Admission(caller, state, view, body, cors_headers(origin), trusted=trusted)

    async def admit_context(
        self, request: Request, error_body: ErrorBody, refuse: ContextRefusal
    ) -> Evaluating | Response:
        """The start of an evaluation endpoint: ``admit(..., backends=True)``, then the body's
        evaluation context (``contexts.parse_context``); or the answer to send, the gate's
        refusal or ``refuse``'s answer to a context that cannot be used."""
        admitted = await self.admit(request, error_body, backends=True)
        if not isinstance(admitted, Admission):
            return admitted
        try:
            context, raw = parse_context(admitted.body)
        except ContextError as exc:
            return refuse(exc, admitted.headers)
        return Evaluating(admitted, context, raw)

    def check_server_key(
        self, key: AccessKey, origin: bytes | None, error_body: ErrorBody
    ) -> Response | None:
        """A server key: never from a page, and only one bound to an environment evaluates."""
        if origin is not None:  # the page may read why: a server key does not belong in it
            return Response(403, error_body(403, SERVER_KEY_FROM_PAGE), cors_headers(origin))
        if key.environment is None:
            message = (
                "this server key is not bound to an environment; issue one with "
                "'vane keys create --kind server --env <environment>' to evaluate flags"
            )
            return Response(403, error_body(403, message), cors_headers(None))
        return None

    def check_key(
        self,
        key: AccessKey,
        origin: bytes | None,
        error_body: ErrorBody,
        *,
        backends: bool = False,
    ) -> Response | None:
        """The key's kind, origin allow-list and rate limit; a refusal, or None to go on."""
        if key.kind != "public":
            message = (
                "this endpoint needs a public key (pk_) or a server key (ssk_) bound to an "
                "environment"
                if backends
                else "only public (pk_) keys may call browser endpoints"
            )
            return Response(403, error_body(403, message), cors_headers(origin))
        if origin is not None and not origin_allowed(key, origin):
            message = "this key may not be used from this origin"
            return Response(403, error_body(403, message), cors_headers(None))
        return self.rates.check(key.id, origin, error_body)
