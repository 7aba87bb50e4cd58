"""Event records and their field rules, shared by the control plane and relays (pure).

``value`` is an integer in minor units (cents), ``ts`` epoch milliseconds; ``eventId`` makes a
delivery idempotent. Checks return ``(field, message)`` pairs so each side renders its own error.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import re
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from shared.clock import now_ms
from shared.wire import body
from shared.wire.currencies import ISO_4217
from shared.wire.kinds import kind_problem, qualified_unit

MAX_BATCH = 1000
MAX_VALUE = body.MAX_SAFE_INTEGER
"""Largest ``|value|`` in minor units (about 90 trillion euros): exact as a double, and a sum of
any number of them cannot overflow the types results are computed in."""
RESERVED_PREFIX = "$"
"""Event names starting with ``$`` are the system's own (``$exposure``, ``$flag_exposure``)."""
EXPERIMENT_EXPOSURE = "$exposure"
FLAG_EXPOSURE = "$flag_exposure"
EXPOSURE_EVENTS = frozenset({EXPERIMENT_EXPOSURE, FLAG_EXPOSURE})
BROWSER_ID_PREFIX = "browser:"
"""Event ids sent with a public key are stored under this prefix, apart from every id a server,
management key or relay sends, so a page can never shadow (de-duplicate away) a backend's event;
the prefix is reserved: other senders may not use it."""
MAX_PROPS_BYTES = 16 * 1024
MAX_TEXT = 200
MAX_URL = 2048
EARLIEST_TS = 946_684_800_000  # 2000-01-01: anything earlier is almost surely seconds, not ms
FUTURE_SLACK_MS = 24 * 3600 * 1000

_LONG_NUMBER = re.compile(rb"\d{16}")  # only such props can hold a number out of range
_ENCODED_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")  # an escaped NUL, not an escaped backslash
Source = Literal["server", "management", "relay", "browser"]
Problem = tuple[str, str]


class EventIn(
    msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True, omit_defaults=True
):
    unit: str
    event: str
    value: int | float | None = None  # a fractional value is refused with a message about cents
    currency: str | None = None
    props: dict[str, Any] | None = None
    url: str | None = None
    ts: int | None = None
    event_id: str | None = None
    source: Source | None = None  # relays say where a forwarded event came from
    # the context kind ``unit`` is a key of (None: a user); stored as ``kinds.qualified_unit``
    unit_kind: str | None = None


class EventIds:
    """``eventId``s for events that arrive without one, assigned where they are first stored
    (relay spool, control plane), so that a retried delivery is recognised. Unique without
    coordination: a random prefix per process, the time, a counter."""

    def __init__(self, tag: str) -> None:
        self._prefix = f"{tag}-{os.urandom(6).hex()}-"
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}{now_ms():x}-{next(self._counter):x}"


def _text(problems: list[Problem], field: str, value: str, limit: int = MAX_TEXT) -> None:
    if not value or value.isspace():  # blank (as ``not value.strip()``, without a copy)
        problems.append((field, "must not be blank"))
    elif len(value) > limit:
        problems.append((field, f"at most {limit} characters"))
    elif (problem := body.text_problem(value)) is not None:  # the one rule for stored text
        problems.append((field, problem))


def _unit(problems: list[Problem], prefix: str, item: EventIn) -> None:
    _text(problems, f"{prefix}unit", item.unit)
    if item.unit_kind is not None:
        if (problem := kind_problem(item.unit_kind)) is not None:
            problems.append((f"{prefix}unitKind", problem))
        elif len(qualified_unit(item.unit_kind, item.unit)) > MAX_TEXT:
            problems.append((f"{prefix}unit", f"at most {MAX_TEXT} characters with its kind"))


def check_event(item: EventIn, now_ms: int, prefix: str = "") -> list[Problem]:
    problems: list[Problem] = []
    _unit(problems, prefix, item)
    _text(problems, f"{prefix}event", item.event)
    value = item.value
    if isinstance(value, float) and not (math.isfinite(value) and value == int(value)):
        example = f" (for {value:g} send {round(value * 100)})" if math.isfinite(value) else ""
        problems.append(
            (
                f"{prefix}value",
                "value is an integer amount in minor units (cents): send 4999 for 49.99" + example,
            )
        )
    elif value is not None and abs(value) > MAX_VALUE:
        problems.append(
            (f"{prefix}value", f"at most {MAX_VALUE} in absolute value (an amount in minor units)")
        )
    if item.currency is not None and item.currency not in ISO_4217:
        problems.append((f"{prefix}currency", "an ISO 4217 code in capitals, e.g. EUR or USD"))
    if item.props is not None:
        encoded = msgspec.json.encode(item.props)
        if len(encoded) > MAX_PROPS_BYTES:
            problems.append((f"{prefix}props", "at most 16 KiB of JSON"))
        elif _ENCODED_NUL.search(encoded):
            problems.append((f"{prefix}props", body.NUL_RULE))
        elif body.encoded_depth_exceeds(encoded, item.props):
            problems.append((f"{prefix}props", f"nested at most {body.MAX_DEPTH} levels deep"))
        elif _LONG_NUMBER.search(encoded) and body.numbers_out_of_range(item.props):
            # an integer past 64 bits cannot be spooled or forwarded (msgpack) at all
            problems.append((f"{prefix}props", body.NUMBER_RULE))
    if item.url is not None:
        if len(item.url) > MAX_URL:
            problems.append((f"{prefix}url", f"at most {MAX_URL} characters"))
        elif (problem := body.text_problem(item.url)) is not None:
            problems.append((f"{prefix}url", problem))
    if item.ts is not None and not EARLIEST_TS <= item.ts <= now_ms + FUTURE_SLACK_MS:
        problems.append(
            (f"{prefix}ts", "epoch milliseconds, not in the future (seconds? multiply by 1000)")
        )
    if item.event_id is not None:
        _text(problems, f"{prefix}eventId", item.event_id)
    return problems


def exposure_event_id(kind: str, subject: str, unit: str, *rest: str) -> str:
    """The deterministic ``eventId`` of an exposure Vane records itself: ``kind:subject:unit``
    (``exp:<experiment>:<unit>``, ``holdout:<holdout>:<unit>``,
    ``flagexp:<flag>:<unit>:<variation>``), the same on every relay and client, so the control
    plane stores one exposure per unit however many saw it. When that would pass ``MAX_TEXT``
    characters (a long unit), the unit part is a hash of it under ``kind#`` (a short id never
    holds ``#`` there: kinds and keys are ``[a-z0-9_.-]``); should even that not fit, the whole id
    is hashed. Always a valid ``eventId``, and the same for the same parts."""
    tail = "".join(":" + part for part in rest)
    plain = f"{kind}:{subject}:{unit}{tail}"
    if len(plain) <= MAX_TEXT and "\x00" not in plain:
        return plain
    hashed = f"{kind}#:{subject}:{_digest(unit)}{tail}"
    if len(hashed) <= MAX_TEXT:
        return hashed
    return f"{kind}#:{_digest(plain)}"


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def recorded_exposure(
    event: str,
    unit: str,
    unit_kind: str | None,
    event_id: str,
    props: dict[str, Any],
    ts: int,
    url: str | None = None,
) -> dict[str, Any] | None:
    """An exposure Vane records itself (a relay's assignment or evaluation), as spooled and
    forwarded: held to the very rules (``check_event``, ``sender_problems``) every event sent to
    the control plane is, so the control plane never refuses one. None when it could not pass (a
    unit with a NUL, longer than ``MAX_TEXT`` with its kind): nothing is recorded, the
    evaluation is still answered."""
    item = EventIn(
        unit=unit,
        unit_kind=unit_kind,
        event=event,
        event_id=event_id,
        props=props,
        ts=ts,
        url=url or None,
        source="relay",
    )
    if check_event(item, ts) or sender_problems(item, "relay"):
        return None
    try:
        return msgspec.json.decode(msgspec.json.encode(item))  # type: ignore[no-any-return]
    except UnicodeEncodeError:  # a lone surrogate: no JSON (or msgpack) can carry it
        return None


def sender_problems(item: EventIn, sender: Source, prefix: str = "") -> list[Problem]:
    """What ``sender`` may not send: a ``$`` name from a page, or a system event name other than
    the exposures; an event id in the browsers' namespace from anyone else; ``source`` from anyone
    but a relay (which says where each forwarded event came from)."""
    problems: list[Problem] = []
    if item.event.startswith(RESERVED_PREFIX) and (
        sender == "browser" or item.event not in EXPOSURE_EVENTS
    ):
        problems.append(
            (
                f"{prefix}event",
                f"names starting with {RESERVED_PREFIX!r} are reserved for events Vane records "
                "itself"
                + ("" if sender == "browser" else f": {', '.join(sorted(EXPOSURE_EVENTS))}"),
            )
        )
    if (
        sender != "browser"
        and item.event_id is not None
        and item.event_id[: len(BROWSER_ID_PREFIX)].lower() == BROWSER_ID_PREFIX
    ):
        problems.append(
            (
                f"{prefix}eventId",
                f"ids starting with {BROWSER_ID_PREFIX!r} (in any case) are reserved for browsers",
            )
        )
    if sender != "relay" and item.source is not None:
        problems.append((f"{prefix}source", "only relays say where an event came from"))
    return problems


_AT = "- at `$"


def convert_problem(prefix: str, exc: msgspec.ValidationError) -> Problem:
    text = str(exc)
    message, _, path = text.partition(" " + _AT)
    path = path.rstrip("`").lstrip(".")
    for marker in ("missing required field `", "contains unknown field `"):
        if marker in message:
            name = message.split(marker, 1)[1].split("`", 1)[0]
            path = f"{path}.{name}" if path else name
    return (f"{prefix}{path}".rstrip("."), message)


def item_prefix(index: int) -> str:
    """How a problem with a batch's item ``index`` is named: ``events[3].unit``. A relay relies
    on it (``refused_items``) to resend a refused batch without the items named."""
    return f"events[{index}]."


_ITEM = re.compile(r"events\[(\d+)\]\.?")


def refused_items(details: Sequence[Problem], count: int) -> dict[int, list[str]] | None:
    """The items of a batch of ``count`` that a 422's ``(field, message)`` details name, each
    with what is wrong with it (``"unit: at most 200 characters"``); None when a detail names no
    item of the batch (the batch as a whole, e.g. ``events`` or ``sentAt``): then no item can be
    told apart from the rest."""
    named: dict[int, list[str]] = {}
    for field, message in details:
        match = _ITEM.match(field)
        if match is None or int(match.group(1)) >= count:
            return None
        rest = field[match.end() :]
        named.setdefault(int(match.group(1)), []).append(f"{rest}: {message}" if rest else message)
    return named or None


def parse_batch(
    raw_items: Sequence[Any], now_ms: int, shift_ms: int = 0
) -> tuple[list[EventIn], list[Problem]]:
    """Items checked one by one (each ``ts`` first moved by ``shift_ms``, see ``decode_batch``);
    any problem means the caller refuses the whole batch."""
    if not raw_items:
        return [], [("events", f"send 1 to {MAX_BATCH} events")]
    if len(raw_items) > MAX_BATCH:
        return [], [("events", f"at most {MAX_BATCH} events per batch (got {len(raw_items)})")]
    items: list[EventIn] = []
    problems: list[Problem] = []
    for index, raw in enumerate(raw_items):
        prefix = item_prefix(index)
        try:
            item = msgspec.convert(raw, EventIn, strict=True)
        except msgspec.ValidationError as exc:
            problems.append(convert_problem(prefix, exc))
            continue
        _shift(item, shift_ms, now_ms)
        problems.extend(check_event(item, now_ms, prefix))
        items.append(item)
    return items, problems


def clock_shift(sent_at: Any, now_ms: int) -> tuple[int, list[Problem]]:
    """How far the receiver's clock is ahead of the sender's: ``now_ms - sentAt`` (the clocks'
    offset plus the request's time in flight)."""
    if sent_at is None:
        return 0, []
    if type(sent_at) is not int or sent_at < EARLIEST_TS:
        message = "epoch milliseconds by the sender's clock, when it was sent"
        return 0, [("sentAt", message)]
    return now_ms - sent_at, []


SAME_CLOCK_MS = 5_000
"""A sender whose ``sentAt`` is within this of the receiver's clock shares it (a computer kept on
time by NTP, the request's time in flight beside): its times are kept as it gave them."""


def on_receivers_clock(ts: int, shift_ms: int, now_ms: int) -> int:
    """A time a sender gave on its clock (``ts``), on the receiver's; ``shift_ms`` is
    ``clock_shift``'s. The one rule for every time a page gives: its events' and its exposures'.

    Within ``SAME_CLOCK_MS`` the time is kept as it is: two requests of one page that took
    different times in flight (an exposure held up in a busy relay's queue, the purchase after
    it sent at once) keep the order the page's own clock gave them, which moving each by its own
    request's shift would not. Further off (a computer minutes slow or fast), the time is moved
    by the shift, and kept at most ``now_ms``: nothing happened after it was sent."""
    if abs(shift_ms) <= SAME_CLOCK_MS:
        return ts
    return min(ts + shift_ms, now_ms)


def _shift(item: EventIn, shift_ms: int, now_ms: int) -> None:
    if item.ts is not None and item.ts >= EARLIEST_TS:
        item.ts = on_receivers_clock(item.ts, shift_ms, now_ms)


class EventBatch(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``sentAt``: the sender's clock when it sent the batch. Given, each ``ts`` is read on that
    clock and put on the receiver's (``on_receivers_clock``: a browser's clock may be minutes off
    the relay's, and a purchase must not land before the exposure that led to it)."""

    events: list[EventIn]
    sent_at: int | None = None


_batch_decoder: msgspec.json.Decoder[EventBatch] = msgspec.json.Decoder(EventBatch, strict=True)


class _LooseBatch(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    events: list[Any]
    sent_at: Any = None


_loose_decoder: msgspec.json.Decoder[_LooseBatch] = msgspec.json.Decoder(_LooseBatch, strict=True)
_event_decoder: msgspec.json.Decoder[EventIn] = msgspec.json.Decoder(EventIn, strict=True)


def decode_one(raw: bytes, now_ms: int) -> tuple[EventIn | None, list[Problem]]:
    """One event object, checked. ``body.MalformedBody`` for a body that is not JSON."""
    try:
        item = body.decode(raw, _event_decoder)
    except msgspec.ValidationError as exc:
        return None, [convert_problem("", exc)]
    return item, check_event(item, now_ms)


def decode_batch(raw: bytes, now_ms: int) -> tuple[list[EventIn], list[Problem]]:
    """``{"events": [...]}`` decoded in one typed pass; only if that fails is each item examined
    on its own, so that every bad item is named. ``body.MalformedBody`` for a body that is not
    JSON."""
    try:
        batch = body.decode(raw, _batch_decoder)
    except msgspec.ValidationError:
        try:
            loose = body.decode(raw, _loose_decoder)
        except msgspec.ValidationError as exc:
            return [], [convert_problem("", exc)]
        shift, problems = clock_shift(loose.sent_at, now_ms)
        if problems:
            return [], problems
        return parse_batch(loose.events, now_ms, shift)
    items = batch.events
    shift, problems = clock_shift(batch.sent_at, now_ms)
    if problems:
        return [], problems
    if not items or len(items) > MAX_BATCH:
        return parse_batch(items, now_ms, shift)
    for index, item in enumerate(items):
        _shift(item, shift, now_ms)
        if check_event(item, now_ms):  # checked again, naming the item, only when refused
            problems.extend(check_event(item, now_ms, item_prefix(index)))
    return items, problems
