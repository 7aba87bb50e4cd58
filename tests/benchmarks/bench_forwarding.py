"""The relay's forwarder: bytes per second from the spool upstream, small events against 16 KiB.

A spool is filled beforehand (one append per 50 events, as senders' requests arrive), then the
forwarder drains it into an upstream that only reads each body and answers 200 (an in-process
``httpx.MockTransport``: what is measured is the relay's own work — spool reads, JSON encoding,
byte-bounded batching — not a database). Reported: JSON body bytes per second and events per
second for small events (~100 bytes) and for events with 16 KiB of props, and their ratio
(issue #33: the large events should keep within 10 % of the small ones' bytes per second).

``python -m tests.benchmarks.bench_forwarding``; knobs: ``FORWARD_MB`` (64, spooled per kind),
``RUNS`` (3, the median is reported).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from relay.forwarder import Forwarder
from relay.settings import RelaySettings
from relay.spool import Spool
from tests.benchmarks.common import Row, log, print_table

PER_APPEND = 50


def _events(kind: str, start: int, count: int) -> list[dict[str, Any]]:
    props = {"blob": "x" * (16 * 1024 - 20)} if kind == "16 KiB" else {"plan": "pro"}
    return [
        {
            "unit": f"user-{i}",
            "event": "viewed",
            "eventId": f"rly-bench-{i}",
            "ts": 1_770_000_000_000 + i,
            "source": "server",
            "props": props,
        }
        for i in range(start, start + count)
    ]


async def _run(kind: str, total_bytes: int, directory: Path) -> tuple[float, int, int]:
    """(seconds to drain, JSON bytes sent, events) for one spool of ``kind`` events."""
    spool = Spool(directory, max_bytes=4 * total_bytes)
    spool.start()
    per_event = len(str(_events(kind, 0, 1)[0]))
    count = max(total_bytes // per_event, PER_APPEND)
    for start in range(0, count, PER_APPEND):
        await spool.append(_events(kind, start, PER_APPEND))
    sent = [0, 0]

    def upstream(request: httpx.Request) -> httpx.Response:
        sent[0] += len(request.content)
        sent[1] += 1
        return httpx.Response(200, json={"accepted": 0, "duplicates": 0})

    client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    settings = RelaySettings(upstream="http://upstream.invalid", key="rsk_bench")
    forwarder = Forwarder(settings, spool, client)
    began = time.perf_counter()
    task = asyncio.create_task(forwarder.run())
    while spool.pending_events:  # noqa: ASYNC110 - polled: the spool has no "drained" event
        await asyncio.sleep(0.001)
    took = time.perf_counter() - began
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await spool.stop()
    await client.aclose()
    return took, sent[0], spool.forwarded_events


def main() -> None:
    megabytes = int(os.environ.get("FORWARD_MB", "64"))
    runs = int(os.environ.get("RUNS", "3"))
    rates: dict[str, tuple[float, float]] = {}
    for kind in ("small", "16 KiB"):
        per_run = []
        for run in range(runs):
            with tempfile.TemporaryDirectory() as directory:
                took, sent, count = asyncio.run(_run(kind, megabytes << 20, Path(directory)))
            log(f"{kind} run {run + 1}: {sent / took / 1e6:.1f} MB/s, {count / took:,.0f} events/s")
            per_run.append((sent / took, count / took))
        rates[kind] = (
            statistics.median(r[0] for r in per_run),
            statistics.median(r[1] for r in per_run),
        )
    small, large = rates["small"], rates["16 KiB"]
    print_table(
        "Forwarding: spool → control plane bodies (relay side only)",
        [
            Row("small events (~100 B): MB/s", f"{small[0] / 1e6:.1f}"),
            Row("small events: events/s", f"{small[1]:,.0f}"),
            Row(
                "16 KiB props: MB/s",
                f"{large[0] / 1e6:.1f}",
                "small events' MB/s",
                f"{large[0] / small[0]:.2f} (target ≥ 0.90)",
            ),
            Row("16 KiB props: events/s", f"{large[1]:,.0f}"),
        ],
        [
            f"{megabytes} MiB spooled per kind, median of {runs} runs; the upstream only reads "
            "the bodies (no database)",
        ],
    )


if __name__ == "__main__":
    main()
