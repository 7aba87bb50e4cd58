"""Event ingest: sustained ``/events`` into PostgreSQL, duplicates, what each index costs, and
relay spool-and-forward end to end.

1. One control-plane process on a fresh PostgreSQL database; a load generator (this process)
   sends pre-encoded batches of 500 events, every event with a unique ``eventId`` (idempotency on),
   over several keep-alive connections. Reported: events/s, and where the CPU went (control
   plane, PostgreSQL, load generator) from /proc over the run. PostgreSQL's share is the
   backends connected to the benchmark's own database (other databases on a shared server are
   left out) and, apart, the server's background processes (WAL writer, checkpointer, …).
2. Duplicates (issue #35): ``DUPLICATES`` of those events sent again, every one already stored (a
   relay's redelivery after a lost acknowledgement), then the first 10,000 again with another
   ``value`` each (conflicts): events/s and CPU per 1,000 events, beside the fresh ones.
3. What each index of ``events`` costs on the write path (issue #35): the control plane's own
   insert statement, alone, on one connection, into fresh databases with the full schema and with
   each secondary index dropped; PostgreSQL CPU per 1,000 events (best of ``REPEAT``, variants
   interleaved), and what the API adds per event besides the insert (the connection check, the
   key lookup, commits, the ingest generation).
4. The same through a relay: batches go to the relay's ``/api/v1/events`` (fsync'd spool), and the
   clock stops when the control plane has stored every event (``/events/stats``).

Targets: ≥ 50,000 events/s into PostgreSQL and ≥ 20,000 end to end via a relay (issue 5);
duplicates within 1.2x of fresh events (issue #35).
``python -m tests.benchmarks.bench_ingest``; knobs: ``EVENTS`` (200000), ``CONCURRENCY`` (6),
``DUPLICATES`` (50000), ``WRITE_COSTS`` (events per schema variant, 50000; 0 skips part 3),
``REPEAT`` (2), ``RELAY`` (1; 0 skips part 4).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec
import psycopg

from control_plane.domain.events.store import _PG_INSERT
from tests.benchmarks.common import Row, print_table
from tests.conftest import POSTGRES_URL, PostgresDatabases
from tests.e2e.test_relays import ControlPlane, start_control_plane, start_relay

BATCH = 500
TOTAL = int(os.environ.get("EVENTS", "200000"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "6"))
DUPLICATES = int(os.environ.get("DUPLICATES", "50000"))
WRITE_COSTS = int(os.environ.get("WRITE_COSTS", "50000"))
REPEAT = int(os.environ.get("REPEAT", "2"))
RELAY = os.environ.get("RELAY", "1") != "0"
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


def postgres_pids(url: str) -> tuple[list[int], list[int]]:
    """The server processes serving the database at ``url`` (its client backends), and the
    server's background processes, which every database shares."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, backend_type = 'client backend' FROM pg_stat_activity "
            "WHERE (datname = current_database() AND pid <> pg_backend_pid()) "
            "OR backend_type <> 'client backend'"
        ).fetchall()
    return [pid for pid, client in rows if client], [pid for pid, client in rows if not client]


def batches(prefix: str, count: int = TOTAL, change: int = 0) -> list[bytes]:
    """``count`` events (whole batches) with ids ``prefix-b-i``; ``change`` moves every value
    (a resend with another payload)."""
    out = []
    for b in range(count // BATCH):
        events = [
            {
                "unit": f"user-{(b * BATCH + i) % 50_000}",
                "event": "purchase" if i % 5 == 0 else "page_view",
                "value": 1999 + i + change if i % 5 == 0 else change or None,
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


@dataclass(frozen=True, slots=True)
class Run:
    """One timed series of batches through the API: its rate and CPU per 1,000 events."""

    events: int
    seconds: float
    control_plane: float  # CPU seconds
    postgres: float  # the database's backends
    background: float  # the server's background processes
    load: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds

    def per_1000(self, cpu: float) -> str:
        return f"{cpu / self.events * 1e6:.1f}"


def timed(cp: ControlPlane, database: str, bodies: list[bytes]) -> Run:
    cp_pids = [cp.process.popen.pid, *children(cp.process.popen.pid)]
    backends, background = postgres_pids(database)
    me = [os.getpid()]
    before = [cpu_seconds(p) for p in (cp_pids, backends, background, me)]
    elapsed = asyncio.run(send_all(f"{cp.url}/api/v1/events", cp.keys["server"], bodies))
    backends_after, _ = postgres_pids(database)  # a connection the pool opened meanwhile
    after = [cpu_seconds(p) for p in (cp_pids, backends_after, background, me)]
    used = [spent(b, a) for b, a in zip(before, after, strict=True)]
    return Run(len(bodies) * BATCH, elapsed, *used)


def ingest_rows(fresh: Run, again: Run, conflicting: Run) -> list[Row]:
    busy = fresh.control_plane + fresh.postgres + fresh.background + fresh.load
    shares = (fresh.control_plane, fresh.postgres + fresh.background, fresh.load)
    ratio = fresh.rate / again.rate
    return [
        Row(
            "ingest into PostgreSQL, batches of 500, idempotent (events/s)",
            f"{fresh.rate:,.0f}",
            "target ≥ 50,000",
            f"{fresh.rate / 50_000:.2f}x target",
        ),
        Row(
            "CPU share: control plane / PostgreSQL / load generator",
            " / ".join(f"{share / busy:.0%}" for share in shares),
            f"{busy:.1f} CPU-s over {fresh.seconds:.1f} s wall",
            "",
        ),
        Row(
            "CPU per 1,000 fresh events (ms): control plane / PostgreSQL backends / background",
            f"{fresh.per_1000(fresh.control_plane)} / {fresh.per_1000(fresh.postgres)} / "
            f"{fresh.per_1000(fresh.background)}",
            "",
            "",
        ),
        Row(
            f"the first {again.events:,} sent again, all duplicates (events/s)",
            f"{again.rate:,.0f}",
            "target: fresh within 1.2x of duplicates",
            f"fresh / duplicates = {ratio:.2f}x ({'met' if ratio <= 1.2 else 'not met'})",
        ),
        Row(
            "CPU per 1,000 duplicates (ms): control plane / PostgreSQL backends / background",
            f"{again.per_1000(again.control_plane)} / {again.per_1000(again.postgres)} / "
            f"{again.per_1000(again.background)}",
            "",
            "",
        ),
        Row(
            f"the first {conflicting.events:,} again with another value (conflicts), events/s",
            f"{conflicting.rate:,.0f}",
            "",
            f"fresh / conflicts = {fresh.rate / conflicting.rate:.2f}x",
        ),
    ]


# --- part 3: what each index costs, the insert statement alone --------------------------------

VARIANTS: dict[str, list[str]] = {
    "full schema (key, ix_events_ts, ix_events_analysis)": [],
    "without ix_events_ts": ["DROP INDEX ix_events_ts"],
    "without ix_events_analysis": ["DROP INDEX ix_events_analysis"],
    "ix_events_analysis without INCLUDE (value)": [
        "DROP INDEX ix_events_analysis",
        "CREATE INDEX ix_events_analysis ON events (project_id, event, unit, ts)",
    ],
    "the key alone": ["DROP INDEX ix_events_ts", "DROP INDEX ix_events_analysis"],
}


def insert_cost(databases: PostgresDatabases, statements: list[str], bodies: list[str]) -> float:
    """PostgreSQL CPU ms per 1,000 events for the control plane's insert of ``bodies``
    (one transaction per batch, one connection) into a fresh database after ``statements``."""
    url = databases.new()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
            parameters = {"project": "prj-bench", "now": int(time.time() * 1000)}
            with conn.transaction():
                conn.execute(_PG_INSERT, {**parameters, "source": "server", "batch": "[]"})
            before = cpu_seconds([conn.info.backend_pid])
            for body in bodies:
                with conn.transaction():
                    conn.execute(_PG_INSERT, {**parameters, "source": "server", "batch": body})
            after = cpu_seconds([conn.info.backend_pid])
        return spent(before, after) / (len(bodies) * BATCH) * 1e6
    finally:
        databases.drop(url)


def index_rows(databases: PostgresDatabases, through_api: Run | None) -> list[Row]:
    bodies = [
        msgspec.json.encode(msgspec.json.decode(body)["events"]).decode()
        for body in batches("cost", WRITE_COSTS)
    ]
    costs: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(REPEAT):  # interleaved: a busy spell does not land on one variant only
        for name, statements in VARIANTS.items():
            costs[name].append(insert_cost(databases, statements, bodies))
    best = {name: min(values) for name, values in costs.items()}
    first = next(iter(VARIANTS))
    full = best[first]
    rows = [
        Row(
            f"write path, the insert alone: {name} (PostgreSQL CPU ms per 1,000 events)",
            f"{best[name]:.1f}",
            f"{', '.join(f'{v:.1f}' for v in costs[name])}",
            "" if name == first else f"full schema minus this: {full - best[name]:.1f} ms",
        )
        for name in VARIANTS
    ]
    if through_api is not None:
        api = through_api.postgres / through_api.events * 1e6
        rows.append(
            Row(
                "write path: what the API adds per 1,000 events besides the insert (connection check, "
                "key lookup, commits, ingest generation; 6 connections at once)",
                f"{api - full:.1f}",
                f"{api:.1f} through the API against {full:.1f} for the insert alone",
                "",
            )
        )
    return rows


def main() -> int:
    try:
        databases = PostgresDatabases(POSTGRES_URL)
    except Exception as exc:
        print_table("Event ingest", [Row("ingest into PostgreSQL", f"unavailable: {exc}")])
        return 0
    rows: list[Row] = []
    notes: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="vane-ingest-"))
    fresh: Run | None = None
    try:
        database = databases.new()
        cp = start_control_plane(database, tmp)
        try:
            warm = batches("warm")[:4]
            asyncio.run(send_all(f"{cp.url}/api/v1/events", cp.keys["server"], warm))
            bodies = batches("run")
            fresh = timed(cp, database, bodies)
            again = timed(cp, database, bodies[: max(1, DUPLICATES // BATCH)])
            conflicting = timed(cp, database, batches("run", 10_000, change=1))
            stored = cp.api("GET", "/events/stats").json()["total"]
            rows += ingest_rows(fresh, again, conflicting)
            notes.append(
                f"{fresh.events:,} events in {fresh.seconds:.1f} s; stored {stored:,} "
                f"(incl. {len(warm) * BATCH:,} warm-up)"
            )
            if RELAY:
                rows += relay_rows(cp, tmp, stored)
        finally:
            cp.process.stop()
        if WRITE_COSTS:
            rows += index_rows(databases, fresh)
            notes.append(
                f"write path: {WRITE_COSTS:,} events per variant, best of {REPEAT} (the runs "
                "in the third column), one connection, the CPU of its backend"
            )
    finally:
        databases.close()
    notes.append(
        f"{CONCURRENCY} concurrent connections; one control-plane worker; PostgreSQL at "
        f"{POSTGRES_URL}; {os.cpu_count()} cores shared by all; load average "
        f"{os.getloadavg()[0]:.1f} at the end"
    )
    print_table("Event ingest (issues 5 and #35)", rows, notes)
    return 0


def relay_rows(cp: ControlPlane, tmp: Path, stored: int) -> list[Row]:
    relay = start_relay(cp.url, cp.keys["relay"], tmp / "relay")
    try:
        relay_bodies = batches("relay")[: max(1, (TOTAL // 2) // BATCH)]
        expected = stored + len(relay_bodies) * BATCH
        start = time.perf_counter()
        accepted = asyncio.run(
            send_all(f"{relay.url}/api/v1/events", cp.keys["server"], relay_bodies)
        )
        while cp.api("GET", "/events/stats").json()["total"] < expected:
            if time.perf_counter() - start > 600:
                raise RuntimeError("relay did not forward everything within 600 s")
            time.sleep(0.05)
        total = time.perf_counter() - start
    finally:
        relay.process.stop()
    count = len(relay_bodies) * BATCH
    return [
        Row("relay intake (fsync'd spool) events/s", f"{count / accepted:,.0f}", "", ""),
        Row(
            "relay spool-and-forward end to end, events/s",
            f"{count / total:,.0f}",
            "target ≥ 20,000",
            f"{count / total / 20_000:.2f}x target",
        ),
    ]


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
