"""Forwards spooled events to the control plane's ``/api/v1/events`` with the relay key.

The cursor moves only after a 200, strictly in order, with up to three batches in flight. Transport errors, 5xx, 429 and 401/403 (a key being rotated)
are retried with full-jitter backoff (0.1 s doubling to 10 s; ``Retry-After`` honoured), so while
the control plane is away events wait on disk. A 422 — events the control plane refuses although
the relay checked them with the same rules — cannot succeed by retrying: the batch is written to
``rejected.jsonl`` beside the spool, counted, and skipped, so one bad batch never blocks the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque

import httpx
import msgspec

from relay.settings import RelaySettings
from relay.spool import Batch, Spool

logger = logging.getLogger("vane.relay.forwarder")

MAX_BATCH = 1000
IN_FLIGHT = 3
MAX_BACKOFF_S = 10.0


class Forwarder:
    def __init__(
        self, settings: RelaySettings, spool: Spool, client: httpx.AsyncClient | None = None
    ) -> None:
        self.settings = settings
        self.spool = spool
        self.url = settings.upstream.rstrip("/") + "/api/v1/events"
        self._client = client or httpx.AsyncClient(timeout=30)
        self.accepted = 0
        self.duplicates = 0
        self.rejected = 0
        self.failures = 0
        self.upstream_ok = False

    async def run(self) -> None:
        """Keep up to ``IN_FLIGHT`` batches on the way; move the cursor strictly in order."""
        attempt = 0
        while True:
            await self.spool.wait_for_data(timeout=1.0)
            in_flight: deque[tuple[Batch, asyncio.Task[float | None]]] = deque()
            position = self.spool.cursor
            failed: float | None = None
            while True:
                while len(in_flight) < IN_FLIGHT:
                    batch = self.spool.read(MAX_BATCH, position)
                    if not batch.events:
                        break
                    position = batch.end
                    in_flight.append((batch, asyncio.create_task(self._send(batch))))
                if not in_flight:
                    break
                batch, task = in_flight.popleft()
                delay = await task
                if delay is not None:
                    failed = delay
                    break
                self._done(batch)
            for _, task in in_flight:  # after a failure: resend from the cursor later (idempotent)
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            if failed is None:
                attempt = 0
                continue
            attempt += 1
            self.failures += 1
            await asyncio.sleep(
                max(failed, random.uniform(0, min(MAX_BACKOFF_S, 0.1 * 2**attempt)))
            )

    async def _send(self, batch: Batch) -> float | None:
        """None when the batch is done with; else the least seconds to wait before retrying."""
        try:
            response = await self._client.post(
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
            self._reject(batch, response.text)
            return None
        self.upstream_ok = False
        retry_after = response.headers.get("retry-after", "")
        logger.warning(
            "control plane answered %d to %d events; will retry",
            response.status_code,
            len(batch.events),
        )
        return float(retry_after) if retry_after.replace(".", "", 1).isdigit() else 0.0

    def _reject(self, batch: Batch, reason: str) -> None:
        """Keep a refused batch beside the spool; the cursor passes it with the others."""
        self.rejected += len(batch.events)
        logger.error("control plane refused %d events: %s", len(batch.events), reason[:500])
        with open(self.spool.directory / "rejected.jsonl", "ab") as handle:
            handle.write(
                msgspec.json.encode({"reason": reason[:2000], "events": batch.events}) + b"\n"
            )

    def _done(self, batch: Batch) -> None:
        self.spool.commit(batch)

    async def close(self) -> None:
        await self._client.aclose()
