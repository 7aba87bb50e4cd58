"""The console's results page at 1,000,000 units and 5,000,000 events, first view and repeat view.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_console_results   # UNITS=1000000 EVENTS=5000000

A control plane starts as a real process on a fresh PostgreSQL database; an experiment with a
revenue primary metric and two guardrails is created through the API, then ``bench_results``'
exposures and events are written into the database by the database itself (as ``bench_results``
does) and the ingest generation is moved on, as an ingest would. A client signs in as a person
does and times ``GET /console/experiments/<key>`` (the results tables, the forest plot and the
power block) to the last byte, and the primary metric's time series, the part of the page its
script loads after it (``GET /console/experiments/<key>/daily`` with ``X-Vane-Fragment``):

- **first view**: the ingest generation moved on before each one (as any ingest does), so nothing
  is cached and the page computes everything, beside ``GET /api/v1/experiments/<key>`` timed the
  same way (the API's results alone);
- **repeat view**: no event arrived since the last view, the page reads the generation and renders
  what the last view computed.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import text

from control_plane.db.engine import make_async_engine
from tests.benchmarks.bench_results import EVENTS, UNITS, generate_sql
from tests.benchmarks.common import Row, log, percentile, print_table, wait_ready
from tests.conftest import POSTGRES_URL, PostgresDatabases
from tests.processes import VANE, Process, free_port

FIRST_VIEWS = int(os.environ.get("FIRST_VIEWS", "5"))
REPEAT_VIEWS = int(os.environ.get("REPEAT_VIEWS", "40"))
TARGET_REPEAT_MS = 100.0


async def _load(url: str, subject: str) -> float:
    engine = make_async_engine(url)
    started = time.perf_counter()
    try:
        async with engine.begin() as connection:
            project = (await connection.execute(text("SELECT id FROM projects"))).scalar_one()
            for statement in generate_sql("postgresql", project, subject):
                await connection.execute(text(statement))
        async with engine.connect() as connection:
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            await connection.execute(text("VACUUM ANALYZE events"))
            await connection.execute(text("VACUUM ANALYZE exposures"))
        await _advance(url)
    finally:
        await engine.dispose()
    return time.perf_counter() - started


async def _advance(url: str) -> None:
    """What an ingest does after it commits (control_plane.db.generation.advance)."""
    engine = make_async_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT nextval('ingest_generation_seq')"))
    finally:
        await engine.dispose()


def timed(client: httpx.Client, path: str, headers: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    response = client.get(path, headers=headers)
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, (path, response.status_code, response.text[:300])
    return elapsed


def main() -> None:
    databases = PostgresDatabases(POSTGRES_URL)
    database = databases.new()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        with tempfile.TemporaryDirectory(prefix="vane-console-results-") as tmp:
            process = Process(
                [*VANE, "control-plane", "--port", str(port)],
                env={"VANE_DATABASE_URL": database},
                cwd=Path(tmp),
            )
            try:
                key = process.wait_for_line(r"^\s+management\s+(vsk_live_\S+)").group(1)
                wait_ready(url)
                api = httpx.Client(
                    base_url=f"{url}/api/v1",
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=600,
                )
                for body in (
                    {"name": "Revenue", "event": "purchase", "aggregation": "sum"},
                    {"name": "Signups", "event": "signup", "aggregation": "conversion"},
                    {"name": "Page views", "event": "page_view", "aggregation": "count"},
                ):
                    assert api.post("/metrics", json=body).status_code == 201
                created = api.post(
                    "/experiments",
                    json={
                        "name": "Checkout",
                        "type": "manual",
                        "goal": "purchase",
                        "variants": [{"key": "control"}, {"key": "treatment"}],
                    },
                )
                assert created.status_code == 201, created.text
                experiment = created.json()
                chosen = {"primary": "revenue", "guardrails": ["signups", "page-views"]}
                assert api.put(f"/experiments/{experiment['key']}/metrics", json=chosen).is_success
                started = api.post(f"/experiments/{experiment['key']}", json={"status": "running"})
                assert started.status_code == 200, started.text
                loaded = asyncio.run(_load(database, experiment["id"]))
                log(f"{UNITS:,} units and {EVENTS:,} events loaded in {loaded:.0f} s")
                page = f"/console/experiments/{experiment['key']}"
                with httpx.Client(base_url=url, timeout=600) as client:
                    form = client.get("/console/sign-in").text
                    token = re.search(r'name="_login" value="([^"]+)"', form)
                    assert token is not None
                    client.post("/console/sign-in", data={"key": key, "_login": token.group(1)})
                    shown = client.get(page).text
                    assert f">{UNITS // 2}<" in shown, "the page shows each arm's exposed units"
                    first, api_first, daily_first = [], [], []
                    part = {"X-Vane-Fragment": "part"}
                    for _ in range(FIRST_VIEWS):
                        asyncio.run(_advance(database))
                        first.append(timed(client, page))
                        daily_first.append(timed(client, f"{page}/daily", part))
                        asyncio.run(_advance(database))
                        started_at = time.perf_counter()
                        assert api.get(f"/experiments/{experiment['key']}").status_code == 200
                        api_first.append((time.perf_counter() - started_at) * 1000)
                    repeat = [timed(client, page) for _ in range(REPEAT_VIEWS)]
                    daily_repeat = [timed(client, f"{page}/daily", part) for _ in range(20)]
                api.close()
            finally:
                process.stop()
    finally:
        databases.close()
    rows = [
        Row(
            f"first view: console results page (ms, median of {FIRST_VIEWS})",
            f"{statistics.median(first):.0f}",
            f"API results alone: {statistics.median(api_first):.0f}",
            "as fast as the API's results",
        ),
        Row(f"repeat view: p50 (ms, {REPEAT_VIEWS} views)", f"{percentile(repeat, 50):.1f}"),
        Row(
            f"repeat view: p95 (ms, {REPEAT_VIEWS} views)",
            f"{percentile(repeat, 95):.1f}",
            "",
            f"< {TARGET_REPEAT_MS:.0f} ms",
        ),
        Row(
            f"time series part, loaded after the page: first (ms, median of {FIRST_VIEWS})",
            f"{statistics.median(daily_first):.0f}",
        ),
        Row("time series part: repeat p95 (ms, 20 views)", f"{percentile(daily_repeat, 95):.1f}"),
    ]
    print_table(
        f"Console: experiment results page at {UNITS:,} units / {EVENTS:,} events (PostgreSQL)",
        rows,
        [
            "time to the last byte over loopback, one client; the page holds the results of the "
            "primary metric and two guardrails, the forest plot and the power block, and its "
            "script then loads the primary's time series; first views computed afresh (the "
            "ingest generation moved on before each), repeat views while no event arrived"
        ],
    )


if __name__ == "__main__":
    main()
