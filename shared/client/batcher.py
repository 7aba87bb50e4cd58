"""What both server clients share: validation, the bounded queue, counters, encoding, retries.

The sending side is written sans-I/O: :meth:`BatchingCore._sender` is a generator that yields
:class:`Wait`, :class:`Sleep` and :class:`Post` steps and is sent back what came of each (a
:class:`Reply`, an exception, or nothing). The threaded client runs it on a daemon thread with
``httpx.Client``, the asyncio client in a task with ``httpx.AsyncClient``; the constructor (options,
defaults, checks), ``track()``, ``flush()``'s markers and the batching, retry and accounting rules
live here once, and the twins differ only in that I/O.

Why every event carries an ``eventId``: a POST whose answer is lost (timeout, reset connection,
a relay restarting) may or may not have been stored. Resending is only safe if the server can
recognise the events it already has, and it de-duplicates on ``eventId`` forever. So ``track()``
fills in an id when the caller gives none, and a retry always resends the same encoded bytes.
A generated id only protects this client's own retries: when the application itself may report
the same thing twice (a payment webhook delivered again, a job re-run), it should pass an id
derived from that thing, such as the order id.

Retry policy: transport errors, 408, 429 and 5xx are transient. The same batch is resent after
an exponential backoff with full jitter (a uniform delay in ``[0, min(30 s, 0.1 s · 2^attempt))``,
so a fleet of backends does not retry in lockstep), or after exactly ``Retry-After`` seconds when
the server says so. By default it retries until the client is closed; ``close()`` then retries
only until its deadline. Any other 4xx is permanent: those events are counted in ``rejected``
and logged with the server's error details. A 422 that names the offending events
(``events[3].value``) rejects just those and resends the rest; a 413 splits the batch in two.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import threading
import time
from collections import deque
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeAlias, TypeVar

import msgspec

from shared.backoff import backoff_delay
from shared.clock import now_ms
from shared.wire.body import MAX_BODY_BYTES
from shared.wire.currencies import ISO_4217
from shared.wire.events import MAX_BATCH, MAX_PROPS_BYTES, MAX_VALUE, EventIn
from shared.wire.kinds import kind_problem

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("vane.client")

# the server's limits (shared.wire): events per POST /events, bytes per body, bytes of props
MAX_BODY: Final = MAX_BODY_BYTES
MAX_PROPS: Final = MAX_PROPS_BYTES
BACKOFF_BASE: Final = 0.1
BACKOFF_CAP: Final = 30.0
RETRY_AFTER_CAP: Final = 600.0
LAST_TRY_MIN: Final = 0.05  # while closing, no attempt is started with less time than this left
DROP_LOG_EVERY: Final = 10.0  # seconds between two "queue full" warnings

_HEAD: Final = b'{"events":['
_TAIL: Final = b"]}"
_EVENT_BUDGET: Final = MAX_BODY - len(_HEAD) - len(_TAIL)
_FIELD_INDEX = re.compile(r"^events\[(\d+)\]")

# unit, event, value, currency, props, url, ts, eventId, unitKind: a tuple is the cheapest thing
# to queue.
Item: TypeAlias = tuple[
    str, str, int | None, str | None, dict[str, Any] | None, str | None, int, str, str | None
]


class _Ack(msgspec.Struct):
    accepted: int = 0
    duplicates: int = 0


_encode = msgspec.json.Encoder().encode
_decode_ack = msgspec.json.Decoder(_Ack).decode
_decode_json = msgspec.json.Decoder().decode


@dataclass(slots=True, frozen=True)
class Wait:
    """Idle until woken (queue full, flush, close) or ``seconds`` pass; then clear the wake-up."""

    seconds: float


@dataclass(slots=True, frozen=True)
class Sleep:
    """Back off before a retry; ``interruptible`` sleeps end early when the client is closed."""

    seconds: float
    interruptible: bool


@dataclass(slots=True, frozen=True)
class Post:
    body: bytes
    timeout: float


@dataclass(slots=True, frozen=True)
class Reply:
    status: int
    retry_after: str | None
    content: bytes

    @classmethod
    def of(cls, response: httpx.Response) -> Reply:
        """What the sender reads of an answer, from either flavour's ``httpx`` response."""
        return cls(response.status_code, response.headers.get("retry-after"), response.content)


Step: TypeAlias = Wait | Sleep | Post
Outcome: TypeAlias = Reply | Exception | None


class _Settable(Protocol):
    def set(self) -> None: ...


DoneT = TypeVar("DoneT", bound=_Settable)  # a threading.Event or an asyncio.Event
TransportT = TypeVar("TransportT")  # httpx.BaseTransport or httpx.AsyncBaseTransport


class FlushMarker(Generic[DoneT]):
    """Queued by ``flush()``; resolved once every event queued before it has been dealt with.

    ``baseline`` is the failure count when it was queued: if it grew by the time the marker is
    reached, something queued before the flush was rejected or abandoned. ``done`` is what the
    flushing caller waits on (the thread's or the task's kind of event); resolving sets it.
    """

    __slots__ = ("baseline", "done", "ok")

    def __init__(self, baseline: int, done: DoneT) -> None:
        self.baseline = baseline
        self.done = done
        self.ok = False

    def resolve(self, ok: bool) -> None:
        self.ok = ok
        self.done.set()


class BatchingCore(Generic[TransportT]):
    """Queue, counters and the sending protocol; subclasses add the thread or the task.

    The constructor (its options, defaults and checks) is both clients' one definition; a
    subclass opens its side in :meth:`_open`, and drives :meth:`_steps` with its kind of I/O.
    """

    def __init__(
        self,
        base_url: str,
        server_key: str,
        *,
        batch_size: int = 500,
        flush_interval: float = 1.0,
        max_queue: int = 100_000,
        timeout: float = 10.0,
        max_retries: int | None = None,
        transport: TransportT | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not isinstance(server_key, str) or not server_key:
            raise ValueError("server_key must be a non-empty string (ssk_live_…)")
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}")
        if not flush_interval > 0:
            raise ValueError("flush_interval must be positive")
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        if not timeout > 0:
            raise ValueError("timeout must be positive")
        if max_retries is not None and max_retries < 0:
            raise ValueError("max_retries must be None (retry until closed) or >= 0")
        self.events_url = events_url(base_url)
        self.headers = {
            "Authorization": f"Bearer {server_key}",
            "Content-Type": "application/json",
            "User-Agent": "vane-python",
        }
        self._batch_size = batch_size
        self._flush_interval = float(flush_interval)
        self._max_queue = max_queue
        self._timeout = float(timeout)
        self._max_retries = max_retries
        self._transport = transport
        self._queue: deque[Item | FlushMarker[Any]] = deque()
        self._lock = threading.Lock()
        self._new_id_source()
        # track() compares the queue length with _capacity only; close() sets it to 0.
        self._capacity = max_queue
        self._closed = False  # set by close(): track() refuses
        self._closing = False  # read by the sender: drain, then stop
        self._deadline = math.inf
        self._gave_up = False
        self._flush_requested = False
        self._wake_pending = False
        self._needs_start = False
        self._markers_queued = 0
        self._inflight = 0
        self._failed = 0
        self._last_drop_log = -math.inf
        self._sent = 0
        self._duplicates = 0
        self._dropped = 0
        self._rejected = 0
        self._retries = 0
        self._open()

    # -- counters ---------------------------------------------------------------------------

    @property
    def queued(self) -> int:
        """Events tracked but not yet acknowledged, rejected or dropped (queue + in flight)."""
        return max(0, len(self._queue) - self._markers_queued + self._inflight)

    @property
    def sent(self) -> int:
        """Events the server acknowledged (accepted plus duplicates)."""
        return self._sent

    @property
    def duplicates(self) -> int:
        """Acknowledged events the server already had (same eventId)."""
        return self._duplicates

    @property
    def dropped(self) -> int:
        """Events lost on this side: queue full, closed, retries exhausted, close deadline."""
        return self._dropped

    @property
    def rejected(self) -> int:
        """Events refused for good: a 4xx other than 408/429, or not encodable / too large."""
        return self._rejected

    @property
    def retries(self) -> int:
        """Requests resent after a transient failure."""
        return self._retries

    # -- the application's side -------------------------------------------------------------

    def track(
        self,
        unit: str,
        event: str,
        *,
        value: int | None = None,
        currency: str | None = None,
        props: Mapping[str, Any] | None = None,
        url: str | None = None,
        ts: int | None = None,
        event_id: str | None = None,
        unit_kind: str | None = None,
    ) -> bool:
        """Queue one event; True if queued, False if dropped (queue full or client closed).

        ``value`` is an integer in minor units (4999 for 49.99); ``ts`` epoch milliseconds
        (default now); ``event_id`` a stable idempotency key (default: a unique generated one);
        ``unit_kind`` the context kind ``unit`` is a key of (``"organization"`` for an
        experiment randomized on accounts; default a user).
        ``props`` is encoded later, on the sending side: do not mutate it after the call.
        Raises ``ValueError``/``TypeError`` for a malformed event, which is never queued.
        """
        if type(unit) is not str or not unit or type(event) is not str or not event:
            _refuse_names(unit, event)
        if value is not None and (type(value) is not int or not -MAX_VALUE <= value <= MAX_VALUE):
            value = _coerce_value(value)
        if ts is None:
            ts = now_ms()
        elif type(ts) is not int:
            ts = _coerce_ts(ts)
        if event_id is None:
            event_id = f"{self._id_prefix}{next(self._id_counter):x}"
        elif type(event_id) is not str or not event_id:
            raise TypeError(f"event_id must be a non-empty string, got {event_id!r}")
        if currency is not None or props is not None or url is not None:
            props = _check_optional(currency, props, url)
        if unit_kind is not None and (problem := kind_problem(unit_kind)) is not None:
            raise ValueError(f"unit_kind: {problem}")
        if self._needs_start:
            self._start()
        queue = self._queue
        # No lock: threads racing here can overshoot max_queue by one event each.
        if len(queue) >= self._capacity:
            return self._drop()
        queue.append((unit, event, value, currency, props, url, ts, event_id, unit_kind))
        if len(queue) >= self._batch_size and not self._wake_pending:
            self._wake_pending = True
            self._wake()
        return True

    def _wake(self) -> None:
        """Wake the sender (queue reached batch_size, flush, close)."""
        raise NotImplementedError

    def _start(self) -> None:
        """Start the sender lazily (the asyncio client needs a running loop)."""

    def _open(self) -> None:
        """Last in the constructor: set up the sending side (a thread, or a task to come)."""
        raise NotImplementedError

    def _sender_running(self) -> bool:
        """Whether the thread or task that sends is alive."""
        raise NotImplementedError

    def _new_id_source(self) -> None:
        # 12 random bytes per client instance and a counter: unique across processes and
        # restarts, and ~10x cheaper per call than uuid4().
        self._id_prefix = os.urandom(12).hex()
        self._id_counter = itertools.count()

    def _drop(self) -> bool:
        with self._lock:
            self._dropped += 1
            now = time.monotonic()
            log = now - self._last_drop_log >= DROP_LOG_EVERY
            if log:
                self._last_drop_log = now
        if log:
            if self._closed:
                logger.warning("vane: track() after close(); event dropped")
            else:
                logger.warning(
                    "vane: event queue full (%d); dropping events (%d so far)",
                    self._max_queue,
                    self._dropped,
                )
        return False

    def _flush_marker(self, done: DoneT) -> FlushMarker[DoneT] | None:
        """Queue a marker for ``flush()`` to wait on ``done`` for; None when there is nothing to
        wait for (closing, or no sender running): ``flush()`` then answers ``queued == 0``."""
        if self._needs_start:
            self._start()
        if self._closing or not self._sender_running():
            return None
        marker = FlushMarker(self._failed, done)
        self._queue_marker(marker)
        return marker

    def _queue_marker(self, marker: FlushMarker[Any]) -> None:
        with self._lock:
            self._markers_queued += 1
            self._queue.append(marker)
            self._flush_requested = True
        self._wake()

    def _begin_close(self, timeout: float) -> bool:
        """Stop accepting events and give the sender a deadline; False if already closed."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            self._capacity = 0
            self._deadline = time.monotonic() + max(0.0, timeout)
            self._closing = True
        return True

    def _drop_leftovers(self) -> None:
        """After the sender stopped: count events that raced past close() as dropped."""
        left = 0
        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, FlushMarker):
                item.resolve(False)
            else:
                left += 1
        self._markers_queued = 0
        if left:
            with self._lock:
                self._dropped += left
            logger.error("vane: %d event(s) tracked during close() were not sent", left)

    def _reset_after_fork(self) -> None:
        """In a forked child: the parent's queue is the parent's; start afresh with new ids."""
        self._lock = threading.Lock()
        self._new_id_source()
        self._queue.clear()
        self._markers_queued = 0
        self._inflight = 0
        self._flush_requested = False
        self._wake_pending = False
        self._sent = self._duplicates = self._dropped = self._rejected = self._retries = 0
        self._failed = 0

    # -- the sending side (sans-I/O) --------------------------------------------------------

    def _steps(self) -> Generator[Step | None, Outcome, None]:
        """The sender as a driver runs it: ``send()`` it each step's outcome (None to begin)
        until it gives None. An unexpected error in the sender is logged and ends it."""
        try:
            yield from self._sender()
        except Exception:
            logger.exception("vane: event sender stopped by an unexpected error")
        yield None

    def _sender(self) -> Generator[Step, Outcome, None]:
        """Run until closed: send full batches at once, the rest every flush_interval."""
        queue = self._queue
        next_due = time.monotonic() + self._flush_interval
        while True:
            closing = self._closing
            force = closing or self._flush_requested or time.monotonic() >= next_due
            if force:
                self._flush_requested = False
            while queue and (force or len(queue) >= self._batch_size):
                events, markers = self._take()
                if events:
                    yield from self._deliver(events)
                for marker in markers:
                    marker.resolve(self._failed == marker.baseline)
                if self._gave_up:
                    return
            if self._closing:
                if not queue:
                    return
                continue
            if force:
                next_due = time.monotonic() + self._flush_interval
            yield Wait(max(0.0, next_due - time.monotonic()))
            self._wake_pending = False

    def _take(self) -> tuple[list[Item], list[FlushMarker[Any]]]:
        """Up to batch_size events from the head of the queue, stopping after a flush marker."""
        queue = self._queue
        events: list[Item] = []
        markers: list[FlushMarker[Any]] = []
        limit = self._batch_size
        while queue and len(events) < limit:
            item = queue.popleft()
            if type(item) is tuple:
                events.append(item)
            else:
                assert isinstance(item, FlushMarker)
                markers.append(item)
                with self._lock:
                    self._markers_queued -= 1
                break
        self._inflight += len(events)
        return events, markers

    def _deliver(self, events: list[Item]) -> Generator[Step, Outcome, None]:
        parts = self._encode_events(events)
        chunk: list[bytes] = []
        size = 0
        for part in parts:
            if chunk and size + len(part) + 1 > _EVENT_BUDGET:
                yield from self._deliver_chunk(chunk)
                if self._gave_up:
                    return
                chunk, size = [], 0
            chunk.append(part)
            size += len(part) + 1
        if chunk:
            yield from self._deliver_chunk(chunk)

    def _encode_events(self, events: list[Item]) -> list[bytes]:
        parts: list[bytes] = []
        for item in events:
            try:
                unit, event, value, currency, props, url, ts, event_id, unit_kind = item
                part = _encode(  # the event's wire shape is the one the servers read
                    EventIn(
                        unit=unit,
                        unit_kind=unit_kind,
                        event=event,
                        value=value,
                        currency=currency,
                        props=props,
                        url=url,
                        ts=ts,
                        event_id=event_id,
                    )
                )
                if (
                    len(part) > MAX_PROPS
                    and item[4] is not None
                    and len(_encode(item[4])) > MAX_PROPS
                ):
                    raise ValueError(f"props are over {MAX_PROPS} bytes once encoded")
                if len(part) > _EVENT_BUDGET:
                    raise ValueError(f"the event is over {MAX_BODY} bytes once encoded")
            except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
                self._inflight -= 1
                self._failed += 1
                self._rejected += 1
                logger.warning(
                    "vane: event %r (unit %r, eventId %s) not sent: %s",
                    item[1],
                    item[0],
                    item[7],
                    exc,
                )
                continue
            parts.append(part)
        return parts

    def _deliver_chunk(self, parts: list[bytes]) -> Generator[Step, Outcome, None]:
        pending = [parts]
        while pending:
            parts = pending.pop()
            attempt = 0
            while parts:
                if self._closing and time.monotonic() >= self._deadline:
                    self._give_up()
                    return
                outcome = yield Post(_HEAD + b",".join(parts) + _TAIL, self._request_timeout())
                if isinstance(outcome, Reply) and 200 <= outcome.status < 300:
                    self._acknowledge(len(parts), outcome, attempt)
                    break
                if not isinstance(outcome, Reply) or _transient(outcome.status):
                    if self._max_retries is not None and attempt >= self._max_retries:
                        self._settle(len(parts), dropped=True)
                        logger.error(
                            "vane: %d event(s) dropped after %d retries: %s",
                            len(parts),
                            attempt,
                            _describe(outcome),
                        )
                        break
                    delay = _retry_after(outcome) or _backoff(attempt)
                    (logger.warning if attempt == 0 else logger.debug)(
                        "vane: sending %d event(s) failed (%s); retry %d in %.2f s",
                        len(parts),
                        _describe(outcome),
                        attempt + 1,
                        delay,
                    )
                    attempt += 1
                    self._retries += 1
                    if not (yield from self._backoff_sleep(delay)):
                        self._give_up()
                        return
                    continue
                if outcome.status == 413 and len(parts) > 1:
                    half = len(parts) // 2
                    pending += [parts[half:], parts[:half]]
                    break
                bad = _invalid_indices(outcome, len(parts)) if outcome.status == 422 else set()
                refused = len(bad) if bad else len(parts)
                self._settle(refused, dropped=False)
                logger.warning(
                    "vane: server refused %d of %d event(s): %s",
                    refused,
                    len(parts),
                    _describe(outcome),
                )
                parts = [p for i, p in enumerate(parts) if i not in bad] if bad else []
                attempt = 0

    def _backoff_sleep(self, delay: float) -> Generator[Step, Outcome, bool]:
        """Sleep before a retry; False when the close deadline leaves no time for another try.

        While closing, each wait is cut to half of the time left, so a last attempt still fits.
        """
        wake_at = time.monotonic() + delay
        while True:
            now = time.monotonic()
            if self._closing:
                remaining = self._deadline - now
                if remaining < LAST_TRY_MIN:
                    return False
                wake_at = min(wake_at, now + remaining / 2)
            if now >= wake_at:
                return True
            yield Sleep(wake_at - now, interruptible=not self._closing)

    def _request_timeout(self) -> float:
        if not self._closing:
            return self._timeout
        return max(LAST_TRY_MIN, min(self._timeout, self._deadline - time.monotonic()))

    def _acknowledge(self, count: int, reply: Reply, attempt: int) -> None:
        try:
            ack = _decode_ack(reply.content)
            acknowledged, duplicates = ack.accepted + ack.duplicates, ack.duplicates
        except (msgspec.DecodeError, msgspec.ValidationError):
            acknowledged, duplicates = count, 0
        if acknowledged != count:
            logger.warning("vane: sent %d event(s), server acknowledged %d", count, acknowledged)
        self._sent += acknowledged
        self._duplicates += duplicates
        self._inflight -= count
        if attempt:
            logger.info("vane: %d event(s) delivered after %d retries", count, attempt)

    def _settle(self, count: int, *, dropped: bool) -> None:
        self._inflight -= count
        self._failed += count
        if dropped:
            with self._lock:
                self._dropped += count
        else:
            self._rejected += count

    def _give_up(self) -> None:
        """The close deadline passed: everything in flight or queued is lost."""
        self._gave_up = True
        left = self._inflight
        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, FlushMarker):
                item.resolve(False)
            else:
                left += 1
        self._markers_queued = 0
        self._inflight = 0
        self._failed += left
        with self._lock:
            self._dropped += left
        logger.error("vane: close() deadline passed; %d event(s) not delivered", left)


def events_url(base_url: str) -> str:
    """``{base_url}/api/v1/events``, accepting a base that already ends with ``/api/v1``."""
    base = base_url.rstrip("/")
    if base.endswith("/api/v1"):
        base = base[: -len("/api/v1")]
    return f"{base}/api/v1/events"


def _transient(status: int) -> bool:
    return status in (408, 429) or status >= 500


def _backoff(attempt: int) -> float:
    return backoff_delay(attempt, base=BACKOFF_BASE, cap=BACKOFF_CAP)


def _retry_after(outcome: Outcome) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), if any."""
    if not isinstance(outcome, Reply) or not outcome.retry_after:
        return None
    text = outcome.retry_after.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(text).timestamp() - time.time()
        except (TypeError, ValueError, IndexError):
            return None
    if math.isnan(seconds):
        return None
    # 0 would fall back to the backoff; a tiny positive delay keeps "retry now" meaning now.
    return min(max(seconds, 1e-3), RETRY_AFTER_CAP)


def _invalid_indices(reply: Reply, count: int) -> set[int]:
    """Indices named by a 422's details (``events[3].value``); empty if any detail names none."""
    try:
        details = _decode_json(reply.content)["error"]["details"]
        fields = [str(detail["field"]) for detail in details]
    except (msgspec.DecodeError, KeyError, TypeError):
        return set()
    indices: set[int] = set()
    for field in fields:
        match = _FIELD_INDEX.match(field)
        if match is None or int(match.group(1)) >= count:
            return set()
        indices.add(int(match.group(1)))
    return indices


def _describe(outcome: Outcome) -> str:
    if outcome is None:
        return "no answer"
    if isinstance(outcome, Exception):
        return f"{type(outcome).__name__}: {outcome}"
    text = f"HTTP {outcome.status}"
    try:
        error = _decode_json(outcome.content)["error"]
        text += f" {error.get('code')}: {error.get('message')}"
        if error.get("details"):
            text += f" {msgspec.json.encode(error['details']).decode()[:1000]}"
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError):
        body = outcome.content[:300].decode("utf-8", "replace").strip()
        if body:
            text += f" {body}"
    return text


def _refuse_names(unit: object, event: object) -> None:
    for name, given in (("unit", unit), ("event", event)):
        if not isinstance(given, str):
            raise TypeError(f"{name} must be a string, got {type(given).__name__}")
        if not given:
            raise ValueError(f"{name} must not be empty")


def _coerce_value(value: object) -> int:
    if isinstance(value, float):
        raise ValueError(
            f"value must be an integer amount in minor units (send minor units: 4999 for 49.99), got {value!r}"
        )
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"value must be an int in minor units, got {type(value).__name__}")
    if abs(value) > MAX_VALUE:
        raise ValueError(f"value must be at most {MAX_VALUE} in absolute value, got {value}")
    return int(value)


def _coerce_ts(ts: object) -> int:
    if isinstance(ts, bool) or not isinstance(ts, int):
        raise TypeError(f"ts must be an int (epoch milliseconds), got {type(ts).__name__}")
    return int(ts)


def _check_optional(
    currency: object, props: Mapping[str, Any] | None, url: object
) -> dict[str, Any] | None:
    if currency is not None and not (isinstance(currency, str) and currency in ISO_4217):
        raise ValueError(f"currency must be an ISO 4217 code such as 'EUR', got {currency!r}")
    if url is not None and not isinstance(url, str):
        raise TypeError(f"url must be a string, got {type(url).__name__}")
    if props is None or type(props) is dict:
        return props
    if isinstance(props, Mapping):
        return dict(props)
    raise TypeError(f"props must be a mapping, got {type(props).__name__}")
