"""Forwards spooled events to the control plane's ``/api/v1/events`` with the relay key.

The cursor moves only after a 200, strictly in order, with up to three batches in flight.
Transport errors, 5xx, 429 and 401/403 (a key being rotated) are retried with the shared capped,
jittered backoff (``shared.backoff``: 0.1 s doubling to ``backoff_cap_s``, never overflowing;
``Retry-After`` honoured), so while the control plane is away events wait on disk. Events go to
the control plane the sync client is connected to (``upstream``), so they fail over with it.
Spool reads and cursor commits run off the event loop; when nothing could be read although the
spool counts pending events, the forwarder waits for the next append instead of spinning.

Nothing the control plane refuses for what it is stalls the rest (issue #33):

- Batches are bounded by bytes (``upstream_max_body_bytes``, the control plane's
  ``VANE_MAX_BODY_BYTES``) as well as by count. A 413 halves the batch until it passes, and
  lowers the bound for later batches; an event that alone is answered 413 is set aside.
- A 422 names the items it refuses (``events[3].unit``, ``shared.wire.events.refused_items``):
  those are set aside and the rest resent at once. A 422 (or 400) naming no item halves the
  batch until the refused event is alone, then sets it aside.
- Set aside means written to ``rejected.jsonl`` beside the spool, one line per event with the
  reason, and counted (``setAside``); the cursor then passes it. So every event a sender was
  answered 200 for is stored once (``eventId`` de-duplicates resends) or set aside with a reason.

``stalled_for``: how long events have waited while no batch went through; ``/readyz`` reports it
(and the last failure) and, past ``forward_stall_s`` with the control plane connected, is not
ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from relay.settings import RelaySettings
from relay.spool import Batch, Spool
from shared.backoff import Backoff
from shared.wire.events import MAX_BATCH, refused_items  # MAX_BATCH: per POST /events

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("vane.relay.forwarder")

IN_FLIGHT = 3
_HEAD = b'{"events":['
_TAIL = b"]}"
TOO_LARGE = "too_large"  # alone over the control plane's body limit (413)
REFUSED = "refused"  # named by a 422 (or alone in a batch refused 400/422)

Encoded = tuple[dict[str, Any], bytes]  # an event and its JSON


def body_size(chunk: list[Encoded]) -> int:
    """Bytes of ``{"events": [...]}`` holding ``chunk``."""
    return len(_HEAD) + len(_TAIL) + sum(len(raw) for _, raw in chunk) + max(len(chunk) - 1, 0)


def chunked(
    items: list[Encoded], max_bytes: int, max_events: int = MAX_BATCH
) -> list[list[Encoded]]:
    """``items`` in order, in bodies of at most ``max_bytes`` and ``max_events`` (an event that
    alone is larger goes alone: the control plane decides)."""
    chunks: list[list[Encoded]] = []
    current: list[Encoded] = []
    size = len(_HEAD) + len(_TAIL)
    for item in items:
        extra = len(item[1]) + (1 if current else 0)
        if current and (size + extra > max_bytes or len(current) >= max_events):
            chunks.append(current)
            current, size, extra = [], len(_HEAD) + len(_TAIL), len(item[1])
        current.append(item)
        size += extra
    if current:
        chunks.append(current)
    return chunks


class Forwarder:
    def __init__(
        self,
        settings: RelaySettings,
        spool: Spool,
        client: httpx.AsyncClient | None = None,
        *,
        upstream: Callable[[], str] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.spool = spool
        self._upstream = upstream or (lambda: settings.upstream_urls[0])
        self._given_client = client
        self._client_lock = asyncio.Lock()
        self._client: httpx.AsyncClient | None = None  # made for the first batch: an idle
        # relay (a sidecar with nothing to forward) does not load an HTTP client at all
        self._sleep = sleep
        self.backoff = Backoff(base=0.1, cap=settings.backoff_cap_s)
        self.accepted = 0
        self.duplicates = 0
        self.set_aside: dict[str, int] = {TOO_LARGE: 0, REFUSED: 0}
        self.splits = 0  # batches halved after a 413 or an unnamed 422
        self.failures = 0
        self.upstream_ok = False
        self.max_body_bytes = settings.upstream_max_body_bytes  # lowered by a 413
        self.last_failure: str | None = None  # why the last batch could not be sent
        self._advanced_at = time.monotonic()  # the last batch done with (or the start)
        self._set_aside_ids: set[str] = set()  # of batches not yet acknowledged: not twice

    @property
    def rejected(self) -> int:
        return sum(self.set_aside.values())

    def stalled_for(self, now: float | None = None) -> float:
        """Seconds events have waited while no batch was done with (0: none waiting)."""
        now = time.monotonic() if now is None else now
        return min(now - self._advanced_at, self.spool.oldest_pending_age(now))

    def stall(self) -> str | None:
        """Why forwarding has not advanced for ``forward_stall_s``, or None."""
        stalled = self.stalled_for()
        if stalled <= self.settings.forward_stall_s:
            return None
        return (
            f"event forwarding has not advanced for {stalled:.0f} s "
            f"({self.spool.pending_events} events waiting): {self.last_failure or 'no answer yet'}"
        )

    @property
    def url(self) -> str:
        return self._upstream().rstrip("/") + "/api/v1/events"

    async def run(self) -> None:
        """Keep up to ``IN_FLIGHT`` batches on the way; move the cursor strictly in order. Ends
        only by cancellation: an unexpected error is logged and the round retried."""
        idle_since: int | None = None  # appends seen before a round that found nothing
        while True:
            await self.spool.wait_for_data(timeout=1.0, appended_since=idle_since)
            appended = self.spool.appended_events
            try:
                failed, sent = await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("forwarding round failed; retrying")
                failed, sent = 0.0, 0
            idle_since = appended if failed is None and sent == 0 else None
            if failed is None:
                self.backoff.reset()
                continue
            self.failures += 1
            await self._sleep(self.backoff.failed(at_least=failed))

    async def _round(self) -> tuple[float | None, int]:
        """Send from the cursor until the spool is drained or a batch fails: (the least delay
        asked for by a failure, or None; events acknowledged)."""
        in_flight: deque[tuple[Batch, asyncio.Task[float | None]]] = deque()
        position = self.spool.cursor
        sent = 0
        try:
            while True:
                while len(in_flight) < IN_FLIGHT:
                    batch = await self.spool.read_async(MAX_BATCH, position, self.max_body_bytes)
                    if not batch.events:
                        break
                    position = batch.end
                    in_flight.append((batch, asyncio.create_task(self._send(batch))))
                if not in_flight:
                    return None, sent
                batch, task = in_flight.popleft()
                delay = await task
                if delay is not None:
                    return delay, sent
                await self.spool.acknowledge(batch)
                self._advanced_at = time.monotonic()
                self.last_failure = None
                self._set_aside_ids.difference_update(_ids(batch.events))
                sent += len(batch.events)
        finally:
            for _, task in in_flight:  # after a failure: resend from the cursor later (idempotent)
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def _http_client(self) -> httpx.AsyncClient:
        """The client, made for the first batch (once, though up to ``IN_FLIGHT`` ask at once)."""
        async with self._client_lock:
            if self._client is None:
                self._client = self._given_client
            if self._client is None:
                self._client = await asyncio.to_thread(_new_client)
            return self._client

    async def _send(self, batch: Batch) -> float | None:
        """None when every event of the batch is stored or set aside; else the least seconds to
        wait before the whole batch is retried (what was stored meanwhile is a duplicate then)."""
        client = await self._http_client()
        encode = msgspec.json.encode
        items = [
            (event, encode(event))
            for event in batch.events
            if event.get("eventId") not in self._set_aside_ids
        ]
        pending = deque(chunked(items, self.max_body_bytes))
        while pending:
            chunk = pending.popleft()
            outcome = await self._post(client, chunk)
            if isinstance(outcome, float):
                return outcome
            pending.extendleft(reversed(outcome))
        return None

    async def _post(
        self, client: httpx.AsyncClient, chunk: list[Encoded]
    ) -> list[list[Encoded]] | float:
        """Send one body: what remains to send of it (``[]``: done with), or the delay before
        the whole batch is retried."""
        import httpx  # loaded by now: a dictionary lookup

        content = b"".join((_HEAD, b",".join(raw for _, raw in chunk), _TAIL))
        try:
            response = await client.post(
                self.url,
                content=content,
                headers={
                    "Authorization": f"Bearer {self.settings.key}",
                    "Content-Type": "application/json",
                },
            )
        except httpx.HTTPError as exc:
            self.upstream_ok = False
            self.last_failure = f"could not reach the control plane ({exc!r})"
            logger.info("forwarding %d events failed (%s); will retry", len(chunk), exc)
            return 0.0
        status = response.status_code
        if 200 <= status < 300:
            ack = response.json()
            self.accepted += int(ack.get("accepted", 0))
            self.duplicates += int(ack.get("duplicates", 0))
            self.upstream_ok = True
            return []
        if status == 413:
            if len(chunk) == 1:
                reason = f"413: {len(content)} bytes, over the control plane's request body limit"
                await self._set_aside(chunk, TOO_LARGE, status, [reason])
                return []
            # the body was over the limit, so half of it is over half the limit: the bound
            # falls fast and never below half the real limit
            self.max_body_bytes = max(min(self.max_body_bytes, len(content) // 2), 1)
            logger.warning(
                "control plane answered 413 to %d bytes; batches now at most %d bytes",
                len(content),
                self.max_body_bytes,
            )
            return self._halve(chunk)
        if status in (400, 422):
            return await self._refused(chunk, status, response)
        self.upstream_ok = False
        self.last_failure = f"the control plane answered {status} to {len(chunk)} events"
        retry_after = response.headers.get("retry-after", "")
        logger.warning("control plane answered %d to %d events; will retry", status, len(chunk))
        return float(retry_after) if retry_after.replace(".", "", 1).isdigit() else 0.0

    def _halve(self, chunk: list[Encoded]) -> list[list[Encoded]]:
        self.splits += 1
        middle = len(chunk) // 2
        return [chunk[:middle], chunk[middle:]]

    async def _refused(
        self, chunk: list[Encoded], status: int, response: httpx.Response
    ) -> list[list[Encoded]]:
        """A 422 sets aside the items it names and the rest is resent; one naming none (or a
        400) halves the batch until the refused event is alone."""
        message, details = _error(response)
        named = refused_items(details, len(chunk)) if status == 422 else None
        if named is None:
            if len(chunk) > 1:
                logger.warning(
                    "control plane answered %d naming no event (%s); halving %d events",
                    status,
                    message[:200],
                    len(chunk),
                )
                return self._halve(chunk)
            await self._set_aside(chunk, REFUSED, status, [f"{status}: {message}"])
            return []
        for index, reasons in sorted(named.items()):
            await self._set_aside([chunk[index]], REFUSED, status, reasons)
        rest = [item for index, item in enumerate(chunk) if index not in named]
        return [rest] if rest else []

    async def _set_aside(
        self, chunk: list[Encoded], reason: str, status: int, why: list[str]
    ) -> None:
        """Keep refused events beside the spool, with why; the cursor passes them."""
        self.set_aside[reason] += len(chunk)
        self._set_aside_ids.update(_ids(event for event, _ in chunk))
        text = "; ".join(why)[:2000]
        logger.error("set aside %d events the control plane refused: %s", len(chunk), text)
        lines = b"".join(
            msgspec.json.encode(
                {"reason": text, "status": status, "kind": reason, "events": [event]}
            )
            + b"\n"
            for event, _ in chunk
        )
        await asyncio.to_thread(self._append_rejected, lines)

    def _append_rejected(self, lines: bytes) -> None:
        with open(self.spool.directory / "rejected.jsonl", "ab") as handle:
            handle.write(lines)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def _ids(events: Iterable[dict[str, Any]]) -> Iterator[str]:
    for event in events:
        event_id = event.get("eventId")
        if isinstance(event_id, str):
            yield event_id


def _error(response: httpx.Response) -> tuple[str, list[tuple[str, str]]]:
    """The message and ``(field, message)`` details of an error answer (``{"error": ...}``);
    whatever else the body holds, its text and no details."""
    try:
        error = response.json().get("error")
        details = [(str(d["field"]), str(d.get("message", ""))) for d in error.get("details") or ()]
        return str(error.get("message", "")), details
    except (ValueError, AttributeError, KeyError, TypeError):
        return response.text[:500], []


def _new_client() -> httpx.AsyncClient:
    """The HTTP client, made off the event loop: importing httpx and building its TLS context
    takes 150 ms or more, which on the loop would hold up every request the relay is serving (a
    page's exposure then got the time it was let through, after the purchase that followed it)."""
    import httpx

    return httpx.AsyncClient(timeout=30)
