"""``VaneProvider`` and ``AsyncVaneProvider``: OpenFeature providers that evaluate in-process.

The provider follows the snapshot feed of its server key's environment (``GET
{base_url}/api/v1/snapshot/stream`` on a relay; see ``relay.routes.feed``) and evaluates every
flag locally with ``shared.engine``: no request per evaluation. Answers are exactly a relay's OFREP
answers (value, variant, reason, error code, ``{"version"}`` metadata).

Lifecycle, in OpenFeature's events: ``initialize`` waits (``init_timeout``) for the first snapshot,
so ``PROVIDER_READY`` means flags are served; each change emits ``PROVIDER_CONFIGURATION_CHANGED``
with ``flagsChanged``; a lost connection emits ``PROVIDER_STALE`` while the last snapshot keeps
being served, and ``PROVIDER_READY`` once caught up again; a refused key emits ``PROVIDER_ERROR``.
The feed reconnects with capped, jittered backoff and resumes from the version it holds.

``evaluate(key, context, default)`` is the hot-loop API: one engine call, no OpenFeature hooks.
First exposures of flags that have metrics are reported through a ``VaneClient`` (``client=``,
shared with the application's own ``track()`` calls, or one of the provider's own), as relays do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import httpx
from openfeature.evaluation_context import EvaluationContext
from openfeature.event import ProviderEventDetails
from openfeature.exception import ErrorCode
from openfeature.flag_evaluation import FlagResolutionDetails, Reason
from openfeature.provider import AbstractProvider, Metadata

from shared.backoff import Backoff
from shared.client.async_client import AsyncVaneClient
from shared.client.batcher import BatchingCore, TransportT
from shared.client.flags import Details, FeedOutOfStep, FirstExposures, FlagSet, SseParser, details
from shared.client.sync_client import VaneClient
from shared.clock import now_ms
from shared.engine import CompileError, evaluate, exposure_unit, unit_key
from shared.wire.kinds import USER, kind_problem

logger = logging.getLogger("vane.provider")

T = TypeVar("T")
ClientT = TypeVar("ClientT", bound=BatchingCore[Any])  # VaneClient or AsyncVaneClient
FEED_PATH = "/api/v1/snapshot/stream"
_REFUSED = (401, 403)  # the feed's answers to a key that may not read it
_MISSING = Details(None, None, "ERROR", "PROVIDER_NOT_READY", "no snapshot yet", 0)
_ERROR_CODES = {
    "FLAG_NOT_FOUND": ErrorCode.FLAG_NOT_FOUND,
    "PARSE_ERROR": ErrorCode.PARSE_ERROR,
    "TARGETING_KEY_MISSING": ErrorCode.TARGETING_KEY_MISSING,
    "GENERAL": ErrorCode.GENERAL,
    "PROVIDER_NOT_READY": ErrorCode.PROVIDER_NOT_READY,
}


def feed_url(base_url: str) -> str:
    return base_url.rstrip("/") + FEED_PATH


def context_of(evaluation_context: EvaluationContext | None) -> dict[str, Any]:
    """An OpenFeature evaluation context as the engine reads it (``targetingKey`` + attributes)."""
    if evaluation_context is None:
        return {}
    context = dict(evaluation_context.attributes)
    if evaluation_context.targeting_key is not None:
        context["targetingKey"] = evaluation_context.targeting_key
    return context


class _Core(AbstractProvider, Generic[ClientT, TransportT]):
    """What both flavours share: the constructor, the flag set, resolution, events, exposures.

    A flavour names its client class (``_client_class``), opens its ``httpx`` client in
    :meth:`_open`, and follows the feed with its kind of I/O.
    """

    _client_class: type[ClientT]

    def __init__(
        self,
        base_url: str,
        server_key: str,
        *,
        client: ClientT | None = None,
        track_exposures: bool = True,
        init_timeout: float = 10.0,
        read_timeout: float = 45.0,
        transport: TransportT | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {server_key}", "Accept": "text/event-stream"}
        self.flags = FlagSet()
        self.exposures = FirstExposures() if track_exposures else None
        self.init_timeout = init_timeout
        self.read_timeout = read_timeout
        self.connected = False
        self.stale = False
        self.ready_event = threading.Event()
        self.last_error: str | None = None
        self._initialized = False  # initialize() returned (the SDK emitted READY or ERROR)
        self._own_client = client is None and track_exposures
        self.client = client or (
            self._client_class(base_url, server_key, transport=transport)
            if track_exposures
            else None
        )
        self._open(httpx.Timeout(10.0, read=read_timeout), transport)

    def _open(self, timeout: httpx.Timeout, transport: TransportT | None) -> None:
        """Last in the constructor: open the feed's ``httpx`` client (and the thread's state)."""
        raise NotImplementedError

    def get_metadata(self) -> Metadata:
        return Metadata(name="vane")

    # --- the feed ---------------------------------------------------------------------------

    def _request_headers(self) -> dict[str, str]:
        version = self.flags.version
        return self.headers if version is None else {**self.headers, "Last-Event-ID": str(version)}

    def _on_line(self, parser: SseParser, line: str) -> None:
        event = parser.feed(line)
        if event is None:
            return
        name, _, data = event
        first = self.flags.version is None
        try:
            changed = self.flags.apply(name, data)
        except CompileError as exc:  # never expected: the control plane validates every write
            logger.error("vane provider: refusing a snapshot that does not compile: %s", exc)
            return
        if name not in {"snapshot", "patch", "current"}:
            return
        if self.stale:  # back in step after a lost connection
            self.stale = False
            self.emit_provider_ready(ProviderEventDetails(message="caught up with the feed"))
        elif first and self._initialized and not self.ready_event.is_set():
            # initialize() gave up waiting (the SDK said ERROR); the first snapshot came since
            self.emit_provider_ready(ProviderEventDetails(message="first snapshot received"))
        if changed and not first:
            self.emit_provider_configuration_changed(ProviderEventDetails(flags_changed=changed))
        self.ready_event.set()

    def _lost(self, reason: str) -> None:
        self.connected = False
        self.last_error = reason
        if self.ready_event.is_set() and not self.stale:
            self.stale = True
            self.emit_provider_stale(ProviderEventDetails(message=f"feed lost: {reason}"))

    def _following(self, status: int, backoff: Backoff) -> SseParser:
        """The feed answered ``status`` (not a refusal): a parser for its lines if it is 200."""
        if status != 200:
            raise ConnectionError(f"HTTP {status}")
        self.connected = True
        backoff.reset()
        return SseParser()

    def _interrupted(self, exc: Exception) -> bool:
        """The feed failed with ``exc``: True to reconnect at once, False after a backoff."""
        if isinstance(exc, FeedOutOfStep):  # the relay sends a full snapshot on reconnecting
            logger.info("vane provider: %s; reloading the snapshot", exc)
            return True
        self._lost(str(exc) or type(exc).__name__)
        return False

    def _refused(self, status: int, body: bytes) -> None:
        text = body.decode("utf-8", "replace")
        message = f"the relay refused the server key ({status}): {text[:200]}"
        self.last_error = message
        logger.error("vane provider: %s", message)
        self.emit_provider_error(
            ProviderEventDetails(message=message, error_code=ErrorCode.GENERAL)
        )

    def _wait_ready(self) -> None:
        if not self.ready_event.wait(self.init_timeout):
            raise ConnectionError(
                f"no snapshot from {feed_url(self.base_url)} within {self.init_timeout} s"
                + (f": {self.last_error}" if self.last_error else "")
            )

    # --- evaluation -------------------------------------------------------------------------

    def evaluate(self, flag_key: str, context: Mapping[str, Any], default: T) -> T:
        """The flag's value for ``context`` (a dict with ``targetingKey`` or ``key``), or
        ``default`` when it cannot be evaluated. The fast path: no OpenFeature hooks."""
        compiled = self.flags.compiled
        if compiled is None:
            return default
        evaluation = evaluate(compiled, flag_key, context, now_ms())
        if self.exposures is not None and evaluation.variation is not None:
            self._report(flag_key, context, evaluation)
        value = evaluation.value
        return default if evaluation.variation is None else value

    def resolve(
        self, flag_key: str, context: Mapping[str, Any], default: T, kind: Callable[[Any], bool]
    ) -> FlagResolutionDetails[T]:
        compiled, snapshot = self.flags.compiled, self.flags.snapshot
        if compiled is None or snapshot is None:
            found = _MISSING
        else:
            evaluation = evaluate(compiled, flag_key, context, now_ms())
            if self.exposures is not None and evaluation.variation is not None:
                self._report(flag_key, context, evaluation)
            found = details(evaluation, snapshot.version)
        if found.error_code is not None:
            return FlagResolutionDetails(
                value=default,
                reason=Reason.ERROR,
                error_code=_ERROR_CODES.get(found.error_code, ErrorCode.GENERAL),
                error_message=found.error_message,
            )
        if not kind(found.value):
            return FlagResolutionDetails(
                value=default,
                reason=Reason.ERROR,
                error_code=ErrorCode.TYPE_MISMATCH,
                error_message=f"flag {flag_key!r} is {type(found.value).__name__}",
            )
        return FlagResolutionDetails(
            value=found.value,
            variant=found.variant,
            reason=found.reason,
            flag_metadata={"version": found.version},
        )

    def resolve_boolean_details(
        self,
        flag_key: str,
        default_value: bool,
        evaluation_context: EvaluationContext | None = None,
    ) -> FlagResolutionDetails[bool]:
        return self.resolve(flag_key, context_of(evaluation_context), default_value, _is_bool)

    def resolve_string_details(
        self, flag_key: str, default_value: str, evaluation_context: EvaluationContext | None = None
    ) -> FlagResolutionDetails[str]:
        return self.resolve(flag_key, context_of(evaluation_context), default_value, _is_str)

    def resolve_integer_details(
        self, flag_key: str, default_value: int, evaluation_context: EvaluationContext | None = None
    ) -> FlagResolutionDetails[int]:
        return self.resolve(flag_key, context_of(evaluation_context), default_value, _is_int)

    def resolve_float_details(
        self,
        flag_key: str,
        default_value: float,
        evaluation_context: EvaluationContext | None = None,
    ) -> FlagResolutionDetails[float]:
        found = self.resolve(flag_key, context_of(evaluation_context), default_value, _is_number)
        if found.error_code is None:
            found.value = float(found.value)
        return found

    def resolve_object_details(
        self,
        flag_key: str,
        default_value: Sequence[Any] | Mapping[str, Any],
        evaluation_context: EvaluationContext | None = None,
    ) -> FlagResolutionDetails[Sequence[Any] | Mapping[str, Any]]:
        return self.resolve(flag_key, context_of(evaluation_context), default_value, _is_object)

    # --- exposures --------------------------------------------------------------------------

    def _report(self, flag_key: str, context: Mapping[str, Any], evaluation: Any) -> None:
        snapshot = self.flags.snapshot
        if snapshot is None or self.exposures is None:
            return
        for unit, kind, event, props, event_id in self.exposures.new(
            snapshot, flag_key, context, evaluation
        ):
            if not self._track(unit, kind, event, props, event_id):
                self.exposures.forget(event_id)

    def _track(
        self, unit: str, kind: str | None, event: str, props: dict[str, Any], event_id: str
    ) -> bool:
        return self.client is not None and self.client.track(
            unit, event, props=props, event_id=event_id, unit_kind=kind
        )


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_object(value: Any) -> bool:
    return isinstance(value, dict | list)


class VaneProvider(_Core[VaneClient, httpx.BaseTransport]):
    """The threaded flavour: the feed runs on a daemon thread; evaluation is lock-free.

    ``client``: the ``VaneClient`` that reports first exposures (and that the application may use
    for its own ``track()``), so one queue and one connection pool serve both; by default the
    provider opens its own, closed with it.
    """

    _client_class = VaneClient

    def _open(self, timeout: httpx.Timeout, transport: httpx.BaseTransport | None) -> None:
        self._http = httpx.Client(timeout=timeout, transport=transport)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: httpx.Response | None = None

    def initialize(self, evaluation_context: EvaluationContext) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="vane-provider", daemon=True)
            self._thread.start()
        try:
            self._wait_ready()
        finally:
            self._initialized = True

    def shutdown(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._http.close()
        if self._own_client and self.client is not None:
            self.client.close()

    def track(
        self,
        tracking_event_name: str,
        evaluation_context: EvaluationContext | None = None,
        tracking_event_details: Any = None,
    ) -> None:
        """OpenFeature's tracking API: the event goes to Vane's one event store. Its unit is the
        context's user; the detail attribute ``unitKind`` makes it the context's unit of that
        kind (an organization's, for an experiment randomized on accounts)."""
        context = context_of(evaluation_context)
        value = getattr(tracking_event_details, "value", None)
        extra = dict(getattr(tracking_event_details, "attributes", {}) or {})
        kind = extra.pop("unitKind", None)
        found: tuple[str, str | None] | None
        if isinstance(kind, str):  # that kind's unit
            key = unit_key(context, kind)
            found = None if key is None or kind_problem(kind) else (key, kind)
        else:  # the user, or the one kind of a single-kind context, as an exposure records
            found = exposure_unit(context)
        if self.client is None or found is None:
            return
        unit, unit_kind = found
        self.client.track(
            unit,
            tracking_event_name,
            value=int(value) if isinstance(value, int | float) else None,
            props=extra or None,
            unit_kind=None if unit_kind == USER else unit_kind,
        )

    def _run(self) -> None:
        backoff = Backoff(base=0.1, cap=10.0)
        while not self._stop.is_set():
            try:
                with self._http.stream(
                    "GET", feed_url(self.base_url), headers=self._request_headers()
                ) as response:
                    self._response = response
                    if response.status_code in _REFUSED:
                        self._refused(response.status_code, response.read())
                    else:
                        parser = self._following(response.status_code, backoff)
                        for line in response.iter_lines():
                            self._on_line(parser, line)
                        raise ConnectionError("the feed ended")
            except Exception as exc:
                if self._stop.is_set():
                    return
                if self._interrupted(exc):
                    continue
            finally:
                self._response = None
            self._stop.wait(backoff.failed())


class AsyncVaneProvider(_Core[AsyncVaneClient, httpx.AsyncBaseTransport]):
    """The asyncio flavour: the feed is a task on the application's event loop.

    ``await provider.start()`` (waits for the first snapshot) before ``api.set_provider``; the SDK's
    ``initialize`` then finds it ready. ``client`` is an ``AsyncVaneClient`` to share.
    """

    _client_class = AsyncVaneClient

    def _open(self, timeout: httpx.Timeout, transport: httpx.AsyncBaseTransport | None) -> None:
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Follow the feed and wait (``init_timeout``) for the first snapshot."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        deadline = time.monotonic() + self.init_timeout
        while not self.ready_event.is_set():
            if time.monotonic() > deadline:
                self._wait_ready()  # raises, naming the last error
            await asyncio.sleep(0.01)

    def initialize(self, evaluation_context: EvaluationContext) -> None:
        self._initialized = True
        if self._task is None:
            with contextlib.suppress(RuntimeError):  # outside a loop: start() must be awaited
                self._task = asyncio.get_running_loop().create_task(self._run())
        if not self.ready_event.is_set():
            raise ConnectionError("no snapshot yet: await provider.start() before set_provider")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None
        await self._http.aclose()
        if self._own_client and self.client is not None:
            await self.client.aclose()

    def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        backoff = Backoff(base=0.1, cap=10.0)
        while True:
            try:
                async with self._http.stream(
                    "GET", feed_url(self.base_url), headers=self._request_headers()
                ) as response:
                    if response.status_code in _REFUSED:
                        self._refused(response.status_code, await response.aread())
                    else:
                        parser = self._following(response.status_code, backoff)
                        async for line in response.aiter_lines():
                            self._on_line(parser, line)
                        raise ConnectionError("the feed ended")
            except Exception as exc:
                if self._interrupted(exc):
                    continue
            await asyncio.sleep(backoff.failed())
