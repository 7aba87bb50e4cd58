"""Forwards spooled events to the control plane's ``/api/v1/events`` with the relay key.

The cursor moves only after a 200, strictly in order, with up to three batches in flight.
Transport errors, 5xx, 429 and 401/403 (a key being rotated) are retried with the shared capped,
jittered backoff (``shared.backoff``: 0.1 s doubling to ``backoff_cap_s``, never overflowing;
``Retry-After`` honoured), so while the control plane is away events wait on disk. Events go to
the control plane the sync client is connected to (``upstream``), so they fail over with it.
Spool reads and cursor commits run off the event loop; when nothing could be read although the
spool counts pending events, the forwarder waits for the next append instead of spinning.

A 422 — events the control plane refuses although the relay checked them with the same rules —
cannot succeed by retrying: the batch is written to ``rejected.jsonl`` beside the spool,
counted, and skipped, so one bad batch never blocks the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from relay.settings import RelaySettings
from relay.spool import Batch, Spool
from shared.backoff import Backoff
from shared.wire.events import MAX_BATCH  # the control plane's limit per POST /events

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("vane.relay.forwarder")

IN_FLIGHT = 3


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
        self.rejected = 0
        self.failures = 0
        self.upstream_ok = False

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
                    batch = await self.spool.read_async(MAX_BATCH, position)
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
        """None when the batch is done with; else the least seconds to wait before retrying."""
        client = await self._http_client()
        import httpx  # loaded by now: a dictionary lookup

        try:
            response = await client.post(
                self.url,
                content=msgspec.json.encode({"events": batch.events}),
                headers={
                    "Authorization": f"Bearer {self.settings.key}",
                    "Content-Type": "application/json",
                },
            )
        except httpx.HTTPError as exc:
            self.upstream_ok = False
            logger.info("forwarding %d events failed (%s); will retry", len(batch.events), exc)
            return 0.0
        if response.status_code == 200:
            ack = response.json()
            self.accepted += int(ack.get("accepted", 0))
            self.duplicates += int(ack.get("duplicates", 0))
            self.upstream_ok = True
            return None
        if response.status_code == 422:
            await self._reject(batch, response.text)
            return None
        self.upstream_ok = False
        retry_after = response.headers.get("retry-after", "")
        logger.warning(
            "control plane answered %d to %d events; will retry",
            response.status_code,
            len(batch.events),
        )
        return float(retry_after) if retry_after.replace(".", "", 1).isdigit() else 0.0

    async def _reject(self, batch: Batch, reason: str) -> None:
        """Keep a refused batch beside the spool; the cursor passes it with the others."""
        self.rejected += len(batch.events)
        logger.error("control plane refused %d events: %s", len(batch.events), reason[:500])
        line = msgspec.json.encode({"reason": reason[:2000], "events": batch.events}) + b"\n"
        await asyncio.to_thread(self._append_rejected, line)

    def _append_rejected(self, line: bytes) -> None:
        with open(self.spool.directory / "rejected.jsonl", "ab") as handle:
            handle.write(line)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def _new_client() -> httpx.AsyncClient:
    """The HTTP client, made off the event loop: importing httpx and building its TLS context
    takes 150 ms or more, which on the loop would hold up every request the relay is serving (a
    page's exposure then got the time it was let through, after the purchase that followed it)."""
    import httpx

    return httpx.AsyncClient(timeout=30)
