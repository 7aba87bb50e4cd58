"""What every browser (``pk_``) endpoint shares: admission, request contexts, cached encodings.

Admission, in order: a key (``Authorization: Bearer``, OFREP's ``X-API-Key``, or a public key as
``?key=`` in the query, which spares a page's request its CORS preflight; none or unknown is 401),
of kind ``public`` (else 403), called from an origin its allow-list admits (else 403 *without*
an allow-origin header, so the page cannot read the answer), within its rate limit (else 429 with
``Retry-After``), with a body of at most 1 MiB (else 413), for an environment the relay holds a
snapshot of (else 503). Every answer carries the CORS header set; the origin is
reflected on all of them except the allow-list refusal.

``View`` holds JSON fragments derived from one ``EnvironmentState``. The engine returns shared,
immutable ``Evaluation`` objects built at compile time, so the encoded form of each one (per flag,
per API) is computed once and joined into responses; the view keeps a reference to every
evaluation it has encoded (so an ``id()`` is never reused while cached) and is replaced with the
state.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from relay.http import (
    ErrorBody,
    Headers,
    PayloadTooLarge,
    Request,
    Response,
    cors_headers,
    json_encode,
)
from relay.metrics import RelayMetrics
from relay.settings import RelaySettings
from relay.store import Caller, EnvironmentState, Store
from shared.engine import Evaluation, Reason, context_key, ofrep_error_code, openfeature_reason
from shared.ratelimit import RateLimiter
from shared.wire.body import MalformedBody, decode
from shared.wire.protocol import AccessKey

__all__ = ["Admission", "Browser", "ContextError", "RateLimiter", "View", "parse_context"]

MAX_CACHED_PER_FLAG = 1024  # compile-time evaluations per flag are few; this only guards memory


def origin_allowed(key: AccessKey, origin: bytes) -> bool:
    """An empty allow-list, or one holding ``*``, admits every origin."""
    origins = key.origins
    if not origins or "*" in origins:
        return True
    return origin.decode("latin-1") in origins


def bearer_token(headers: dict[bytes, bytes]) -> str | None:
    auth = headers.get(b"authorization")
    if auth is not None:
        scheme, _, value = auth.partition(b" ")
        if scheme.lower() == b"bearer" and value.strip():
            return value.strip().decode("latin-1")
    api_key = headers.get(b"x-api-key")
    if api_key is not None and api_key.strip():
        return api_key.strip().decode("latin-1")
    return None


# --------------------------------------------------------------------------------- contexts


class _Body(msgspec.Struct):
    context: msgspec.Raw = msgspec.Raw()


_body_decoder = msgspec.json.Decoder(_Body)
_context_decoder = msgspec.json.Decoder(dict[str, Any])
_any_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder()


class ContextError(Exception):
    """A request body the endpoint cannot use; ``malformed`` when it is not JSON at all."""

    def __init__(self, message: str, *, malformed: bool) -> None:
        super().__init__(message)
        self.message = message
        self.malformed = malformed


def parse_context(body: bytes) -> tuple[dict[str, Any], msgspec.Raw]:
    """The ``context`` object of ``{"context": {...}}`` and its raw bytes (for ETags)."""
    try:
        raw = decode(body, _body_decoder).context
    except MalformedBody as exc:
        raise ContextError(exc.message, malformed=True) from exc
    except msgspec.ValidationError as exc:
        # msgspec may report a type mismatch before it sees that the JSON is broken (``[``)
        try:
            decode(body, _any_decoder)
        except MalformedBody as broken:
            raise ContextError(broken.message, malformed=True) from exc
        raise ContextError(f"request body must be a JSON object: {exc}", malformed=False) from exc
    if not raw:
        raise ContextError("context is required", malformed=False)
    try:
        context = decode(raw, _context_decoder)
    except MalformedBody as exc:
        raise ContextError(exc.message, malformed=True) from exc
    except msgspec.ValidationError as exc:
        raise ContextError("context must be an object", malformed=False) from exc
    return context, raw


def targeting_key_problem(context: dict[str, Any]) -> tuple[str, str] | None:
    """``(errorCode, errorDetails)`` when the context has no usable key, else None.

    A key of the wrong type is INVALID_CONTEXT; no key at all is TARGETING_KEY_MISSING (the
    engine accepts ``key`` or OpenFeature's ``targetingKey``, a non-empty string).
    """
    for name in ("key", "targetingKey"):
        value = context.get(name)
        if value.__class__ is str and value:
            return None
    for name in ("key", "targetingKey"):
        value = context.get(name)
        if value is not None and not isinstance(value, str):
            return "INVALID_CONTEXT", f"context.{name} must be a string"
    return "TARGETING_KEY_MISSING", "context needs a non-empty targetingKey (or key)"


# ------------------------------------------------------------------------------------ views

_ERROR_DETAILS = {
    "FLAG_NOT_FOUND": "flag not found",
    "PARSE_ERROR": "the flag's configuration could not be compiled",
    "TARGETING_KEY_MISSING": "context needs a non-empty targetingKey (or key)",
    "GENERAL": "the flag could not be evaluated",
}


class View:
    """JSON fragments for one environment state: per flag and evaluation, for each API."""

    __slots__ = ("_pinned", "bulk_metadata", "etag_seed", "ofrep", "sdk", "state", "version_bytes")

    def __init__(self, state: EnvironmentState) -> None:
        self.state = state
        self.version_bytes = str(state.version).encode()
        self.etag_seed = state.etag.encode()
        self.bulk_metadata = b'"metadata":{"version":' + self.version_bytes + b"}"
        self.ofrep: dict[str, dict[int, bytes]] = {key: {} for key in state.compiled.flags}
        self.sdk: dict[str, dict[int, bytes]] = {key: {} for key in state.compiled.flags}
        self._pinned: list[Evaluation] = []

    def _remember(self, cache: dict[int, bytes], evaluation: Evaluation, item: bytes) -> None:
        if len(cache) < MAX_CACHED_PER_FLAG:
            cache[id(evaluation)] = item
            self._pinned.append(evaluation)

    def ofrep_item(self, key: str, evaluation: Evaluation) -> bytes:
        """One OFREP bulk item: ``evaluationSuccess`` or ``evaluationFailure`` (cached)."""
        cache = self.ofrep.get(key)
        if cache is not None:
            item = cache.get(id(evaluation))
            if item is not None:
                return item
        item = json_encode(self.ofrep_object(key, evaluation))
        if cache is not None:
            self._remember(cache, evaluation, item)
        return item

    def ofrep_object(self, key: str, evaluation: Evaluation) -> dict[str, Any]:
        metadata = {"version": self.state.version}
        code = ofrep_error_code(evaluation)
        if code is not None:
            return {
                "key": key,
                "errorCode": code,
                "errorDetails": _ERROR_DETAILS.get(code, _ERROR_DETAILS["GENERAL"]),
                "metadata": metadata,
            }
        variant = evaluation.variation_name or str(evaluation.variation)
        return {
            "key": key,
            "value": evaluation.value,
            "reason": openfeature_reason(evaluation),
            "variant": variant,
            "metadata": metadata,
        }

    def sdk_item(self, key: str, evaluation: Evaluation) -> bytes:
        """``"key":{value, variation, reason[, variationName | errorCode]}`` (cached)."""
        cache = self.sdk.get(key)
        if cache is not None:
            item = cache.get(id(evaluation))
            if item is not None:
                return item
        entry: dict[str, Any] = {
            "value": evaluation.value,
            "variation": evaluation.variation,
            "reason": evaluation.reason.value,
        }
        if evaluation.reason is Reason.ERROR:
            entry["errorCode"] = ofrep_error_code(evaluation)
        elif evaluation.variation_name:
            entry["variationName"] = evaluation.variation_name
        item = json_encode(key) + b":" + json_encode(entry)
        if cache is not None:
            self._remember(cache, evaluation, item)
        return item


class Views:
    """The current ``View`` per environment, rebuilt the first time a new state is seen."""

    def __init__(self) -> None:
        self._views: dict[str, View] = {}

    def of(self, state: EnvironmentState) -> View:
        view = self._views.get(state.environment)
        if view is None or view.state is not state:
            view = View(state)
            self._views[state.environment] = view
        return view


# -------------------------------------------------------------------------------- admission


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


class ExposureReporter(Protocol):
    def report(
        self, state: EnvironmentState, unit: str | None, evaluations: Mapping[str, Evaluation]
    ) -> None: ...


def unknown_key(
    store: Store, error_body: ErrorBody, headers: list[tuple[bytes, bytes]]
) -> Response:
    """401 for a key the snapshots do not list; 503 while the relay has no snapshot at all (it
    cannot know any key yet: a first start before the control plane answered)."""
    if not store.states:
        message = "the relay has not yet received its flags and keys from the control plane"
        return Response(503, error_body(503, message), [*headers, (b"retry-after", b"1")])
    return Response(401, error_body(401, "unknown or revoked key"), headers)


class Browser:
    """The gate and shared services of the ``pk_`` endpoints."""

    def __init__(self, store: Store, settings: RelaySettings, metrics: RelayMetrics) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.views = Views()
        self.limiter = (
            RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst)
            if settings.rate_limit_per_s > 0
            else None
        )
        self.exposures: ExposureReporter | None = None  # set by the experiments routes

    def evaluated(
        self,
        state: EnvironmentState,
        context: dict[str, Any],
        evaluations: Mapping[str, Evaluation],
    ) -> None:
        """Tell the exposure reporter (if any) what a context was served."""
        if self.exposures is not None:
            self.exposures.report(state, context_key(context), evaluations)

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

    def check_server_key(
        self, key: AccessKey, origin: bytes | None, error_body: ErrorBody
    ) -> Response | None:
        """A server key: never from a page, and only one bound to an environment evaluates."""
        if origin is not None:  # the page may read why: a server key does not belong in it
            message = "a server key is never accepted from a page (the request has an Origin)"
            return Response(403, error_body(403, message), cors_headers(origin))
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
        if self.limiter is not None:
            wait = self.limiter.retry_after(key.id, time.monotonic())
            if wait:
                headers = cors_headers(origin)
                headers.append((b"retry-after", str(wait).encode()))
                return Response(429, error_body(429, "rate limit exceeded"), headers)
        return None
