"""Event ingest: sustained ``/events`` into PostgreSQL, and relay spool-and-forward end to end.

1. One control-plane process on a fresh PostgreSQL database; a load generator (this process)
   sends pre-encoded batches of 500 events, every event with a unique ``eventId`` (idempotency on),
   over several keep-alive connections. Reported: events/s, and where the CPU went (control
   plane, PostgreSQL backends, load generator) from /proc over the run.
2. The same through a relay: batches go to the relay's ``/api/v1/events`` (fsync'd spool), and the
   clock stops when the control plane has stored every event (``/events/stats``).

Targets (issue 5): ≥ 50,000 events/s into PostgreSQL; ≥ 20,000 events/s end to end via a relay.
``python -m tests.benchmarks.bench_ingest``; knobs: ``EVENTS`` (200000), ``CONCURRENCY`` (6).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import msgspec

from tests.benchmarks.common import Row, print_table
from tests.conftest import POSTGRES_URL, PostgresDatabases
from tests.e2e.test_relays import start_control_plane, start_relay

BATCH = 500
TOTAL = int(os.environ.get("EVENTS", "200000"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "6"))
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) so far of each live pid."""
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    return out


def spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two readings; a pid first seen in ``after`` started at zero."""
    return sum(value - before.get(pid, 0.0) for pid, value in after.items())


def postgres_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in {"postgres", "postmaster"}:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def batches(prefix: str) -> list[bytes]:
    out = []
    for b in range(TOTAL // BATCH):
        events = [
            {
                "unit": f"user-{(b * BATCH + i) % 50_000}",
                "event": "purchase" if i % 5 == 0 else "page_view",
                "value": 1999 + i if i % 5 == 0 else None,
                "currency": "EUR" if i % 5 == 0 else None,
                "props": {"plan": "pro"} if i % 3 == 0 else None,
                "eventId": f"{prefix}-{b}-{i}",
            }
            for i in range(BATCH)
        ]
        out.append(
            msgspec.json.encode(
                {"events": [{k: v for k, v in e.items() if v is not None} for e in events]}
            )
        )
    return out


async def send_all(url: str, key: str, bodies: list[bytes]) -> float:
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            body = queue.get_nowait()
            for _ in range(100):
                response = await client.post(url, content=body, headers=headers)
                if response.status_code == 200:
                    break
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError(f"batch refused: {response.status_code} {response.text[:200]}")

    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(CONCURRENCY)))
        return time.perf_counter() - start


def main() -> int:
    try:
        databases = PostgresDatabases(POSTGRES_URL)
    except Exception as exc:
        print_table("Event ingest", [Row("ingest into PostgreSQL", f"unavailable: {exc}")])
        return 0
    rows: list[Row] = []
    notes: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="vane-ingest-"))
    try:
        database = databases.new()
        cp = start_control_plane(database, tmp)
        try:
            warm = batches("warm")[:4]
            asyncio.run(send_all(f"{cp.url}/api/v1/events", cp.keys["server"], warm))
            bodies = batches("run")
            cp_pid, me = cp.process.popen.pid, os.getpid()
            cp_pids = [cp_pid, *children(cp_pid)]
            before = (cpu_seconds(cp_pids), cpu_seconds(postgres_pids()), cpu_seconds([me]))
            elapsed = asyncio.run(send_all(f"{cp.url}/api/v1/events", cp.keys["server"], bodies))
            after = (cpu_seconds(cp_pids), cpu_seconds(postgres_pids()), cpu_seconds([me]))
            rate = len(bodies) * BATCH / elapsed
            stored = cp.api("GET", "/events/stats").json()["total"]
            rows.append(
                Row(
                    "ingest into PostgreSQL, batches of 500, idempotent (events/s)",
                    f"{rate:,.0f}",
                    "target ≥ 50,000",
                    f"{rate / 50_000:.2f}x target",
                )
            )
            shares = [spent(before[i], after[i]) for i in range(3)]
            busy = sum(shares)
            rows.append(
                Row(
                    "CPU share: control plane / PostgreSQL / load generator",
                    " / ".join(f"{s / busy:.0%}" for s in shares),
                    f"{busy:.1f} CPU-s over {elapsed:.1f} s wall",
                    "",
                )
            )
            rows.append(
                Row(
                    "PostgreSQL CPU per 1,000 events (ms)",
                    f"{shares[1] / (len(bodies) * BATCH) * 1e6:.1f}",
                    "",
                    "",
                )
            )
            notes.append(
                f"{len(bodies) * BATCH:,} events in {elapsed:.1f} s; stored {stored:,} (incl. {len(warm) * BATCH:,} warm-up)"
            )
            resent = asyncio.run(
                send_all(f"{cp.url}/api/v1/events", cp.keys["server"], bodies[:20])
            )
            rows.append(
                Row(
                    "the same 10,000 events sent again (all duplicates), events/s",
                    f"{20 * BATCH / resent:,.0f}",
                    "",
                    "",
                )
            )

            relay = start_relay(cp.url, cp.keys["relay"], tmp / "relay")
            try:
                relay_bodies = batches("relay")[: max(1, (TOTAL // 2) // BATCH)]
                expected = stored + len(relay_bodies) * BATCH + 0
                start = time.perf_counter()
                accepted = asyncio.run(
                    send_all(f"{relay.url}/api/v1/events", cp.keys["server"], relay_bodies)
                )
                while cp.api("GET", "/events/stats").json()["total"] < expected:
                    if time.perf_counter() - start > 600:
                        raise RuntimeError("relay did not forward everything within 600 s")
                    time.sleep(0.05)
                total = time.perf_counter() - start
                count = len(relay_bodies) * BATCH
                rows.append(
                    Row("relay intake (fsync'd spool) events/s", f"{count / accepted:,.0f}", "", "")
                )
                rows.append(
                    Row(
                        "relay spool-and-forward end to end, events/s",
                        f"{count / total:,.0f}",
                        "target ≥ 20,000",
                        f"{count / total / 20_000:.2f}x target",
                    )
                )
            finally:
                relay.process.stop()
        finally:
            cp.process.stop()
    finally:
        databases.close()
    notes.append(
        f"{CONCURRENCY} concurrent connections; one control-plane worker; PostgreSQL at {POSTGRES_URL}; 2 cores shared by all"
    )
    print_table("Event ingest (issue 5)", rows, notes)
    return 0


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                found.append(int(entry.name))
                found.extend(children(int(entry.name)))
    return found


if __name__ == "__main__":
    sys.exit(main())
