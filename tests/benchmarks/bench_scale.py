"""A 10,000-flag environment: snapshot size, relay start-up and memory, one-flag change latency,
beside a 10-flag environment measured in the same run; and 4,000 flags created through the API.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_scale      # FLAGS=10000 SAMPLES=20

The flags are written into a fresh SQLite database in-process, through the control plane's own
service functions (``control_plane.domain.flags.services``: ``create_flag``; ``.settings``: ``put_settings``,
``put_rules`` in ``control_plane.entry.cli.in_project`` transactions — the same validation, audit and
version bumps as the API, minus HTTP), before any process starts. Each flag is the peer workload's
shape: boolean, enabled, rule ``country in [5 of 10 countries]`` → true, fallthrough 50/50 by key.

Then, in this process: the snapshot as the control plane compiles it (``compile_environment``),
its msgpack size (``msgspec.msgpack.encode``, and the ``SnapshotMessage`` frame a relay receives), and
the relay's share of a first sync (msgpack decode, ``shared.engine.compile_snapshot`` with the
garbage collector paused as the relay pauses it, ``relay.store.gc_paused``). With real
processes: a relay's start → ``/readyz`` 200 (cold: the control plane builds the environment's
history on that first connection; warm: a second relay while the history is cached), the relay's
RSS, and 20 toggles of one flag timed as in ``bench_killswitch`` (SSE event arrival, then
polling). Then the same toggles against a 10-flag environment (same generator, own control
plane and relay), so the 10,000-flag figures stand beside the small environment's of the same
run, and ``CREATE`` (4,000) flags created one ``POST /flags`` after another through that
control plane with its relay connected, until the relay serves the last one.

Beside each figure, the one issue #15 recorded before publishing cost the change (toggle API
460 ms, relay stall 130 ms at 10,000 flags; 73 vs 14 ms and 114 vs 16 ms to the relay at 4,000
vs 10; 315 s to create 4,000 flags).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.db import migrate
from control_plane.db.engine import make_async_engine
from control_plane.db.models import Environment
from control_plane.domain.common import Scope
from control_plane.domain.flags import schemas as s
from control_plane.domain.flags import services as flags
from control_plane.domain.flags import settings as flag_settings
from control_plane.domain.snapshots import compile_environment
from control_plane.entry.bootstrap import bootstrap
from control_plane.entry.oneshot import in_project
from relay.store import gc_paused
from shared.engine import compile_snapshot
from shared.wire import protocol as p
from shared.wire.snapshot import Snapshot
from tests.benchmarks.bench_killswitch import Propagation, propagation
from tests.benchmarks.bench_relay_http import workload
from tests.benchmarks.common import (
    REPO,
    Cleanup,
    Row,
    Spread,
    log,
    print_table,
    process_tree,
    rss_mib,
    tree_rss_mib,
    wait_quiet,
    wait_ready,
)
from tests.e2e.test_relays import start_control_plane, start_relay

FLAGS = int(os.environ.get("FLAGS", "10000"))
SAMPLES = int(os.environ.get("SAMPLES", "20"))
SMALL = 10
CREATE = int(os.environ.get("CREATE", "4000"))
BATCH = 500
TARGET_RSS_MIB = 200
TOGGLED = "flag-00000"
CACHE_DIR = Path(os.environ.get("SCALE_CACHE_DIR") or Path(tempfile.gettempdir()) / "vane-bench")


def flag_key(i: int) -> str:
    return f"flag-{i:05d}"


async def _create(
    scope: Scope, *, indices: range, countries_for: Callable[[int], list[str]]
) -> None:
    rollout = [s.WeightIn(idx=0, weight=50), s.WeightIn(idx=1, weight=50)]
    for i in indices:
        key = flag_key(i)
        await flags.create_flag(scope, s.FlagCreate(key=key))
        await flag_settings.put_settings(
            scope,
            key,
            "production",
            s.EnvironmentSettingsIn(enabled=True, fallthrough=s.ServeIn(rollout=rollout)),
        )
        clause = s.ClauseIn(attribute="country", op="in", values=list(countries_for(i)))
        rules = s.RulesIn(rules=[s.RuleIn(clauses=[clause], variation=0)])
        await flag_settings.put_rules(scope, key, "production", rules)


async def generate(url: str, count: int) -> dict[str, str]:
    """Migrate, bootstrap (returns the first keys) and write ``count`` flags."""
    await asyncio.to_thread(migrate.upgrade, url)
    engine = make_async_engine(url)
    try:
        issued = await bootstrap(async_sessionmaker(engine, expire_on_commit=False))
    finally:
        await engine.dispose()
    keys = {key.kind.value: key.token for key in issued if key.environment in (None, "production")}
    os.environ["VANE_DATABASE_URL"] = url  # in_project reads the database from the settings
    _, countries_for, _ = workload()
    for start in range(0, count, BATCH):
        indices = range(start, min(start + BATCH, count))
        await in_project("default", partial(_create, indices=indices, countries_for=countries_for))
        log(f"{indices.stop:,} flags written")
    return keys


def _cache_key(count: int) -> str:
    """Changes whenever the code that decides what the generated database holds changes."""
    digest = hashlib.sha256(str(count).encode())
    sources = [
        *(REPO / "control_plane/domain/flags").glob("*.py"),
        *(REPO / "control_plane/db/migrations/versions").glob("*.py"),
        REPO / "control_plane/db/models.py",
        REPO / "control_plane/domain/common.py",
        REPO / "control_plane/entry/bootstrap.py",
    ]
    for path in sorted(sources):
        digest.update(path.name.encode() + path.read_bytes())
    for function in (_create, generate, workload):
        digest.update(inspect.getsource(function).encode())
    return digest.hexdigest()[:16]


def prepared_database(target: Path, count: int) -> tuple[dict[str, str], float, bool]:
    """Write ``count`` flags into ``target`` (a new SQLite file): ``(keys, seconds, cached)``.

    Generation costs minutes (about 50 SQL statements per flag through the services), so the
    result is kept in ``SCALE_CACHE_DIR`` (default ``$TMPDIR/vane-bench``) under a key of the
    flag count and the source of everything that shapes it; ``SCALE_CACHE=0`` regenerates.
    """
    use_cache = os.environ.get("SCALE_CACHE", "1").lower() not in {"0", "no", "false"}
    cached = CACHE_DIR / f"flags-{count}-{_cache_key(count)}.db"
    meta = cached.with_suffix(".json")
    if use_cache and cached.exists() and meta.exists():
        shutil.copyfile(cached, target)
        settle_outbox(target)
        saved = json.loads(meta.read_text())
        return saved["keys"], float(saved["generate_s"]), True
    started = time.perf_counter()
    keys = asyncio.run(generate(f"sqlite:///{target}", count))
    generate_s = time.perf_counter() - started
    if use_cache:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        for stale in CACHE_DIR.glob(f"flags-{count}-*"):  # from older code: never used again
            stale.unlink(missing_ok=True)
        partial_copy = cached.with_suffix(".part")
        shutil.copyfile(target, partial_copy)
        partial_copy.replace(cached)
        meta.write_text(json.dumps({"keys": keys, "generate_s": generate_s, "flags": count}))
    settle_outbox(target)
    return keys, generate_s, False


def settle_outbox(database: Path) -> int:
    """Drop the webhook events the generator left undispatched; how many there were.

    The flag services write an outbox event with every change (three per flag here: 12,000 at
    4,000 flags), which a running control plane fans out as they come. Written in bulk with no
    control plane running, they would be a backlog its dispatcher spends its first minutes on,
    50 events every 0.5 s, each batch one write transaction of a hundred statements; SQLite
    takes its write lock for every transaction (``BEGIN IMMEDIATE``, the publisher's reads
    included), so the toggles measured would queue behind it: a cost of this generator,
    proportional to the flag count, not of a toggle. No webhook is configured, so the
    dispatcher would drop them all; this drops them first.
    """
    with contextlib.closing(sqlite3.connect(database)) as connection, connection:
        return connection.execute("DELETE FROM outbox_events WHERE dispatched_at IS NULL").rowcount


async def snapshot_of(url: str) -> tuple[Snapshot, float]:
    """The production snapshot exactly as the control plane builds it, and how long that took."""
    engine = make_async_engine(url)
    try:
        sessionmaker: async_sessionmaker[AsyncSession] = async_sessionmaker(
            engine, expire_on_commit=False
        )
        async with sessionmaker() as session:
            environment = await session.scalar(
                select(Environment).where(Environment.key == "production")
            )
            assert environment is not None
            started = time.perf_counter()
            snapshot = await compile_environment(session, environment)
            return snapshot, (time.perf_counter() - started) * 1000
    finally:
        await engine.dispose()


async def create_through_api(cp: Any, relay_url: str, count: int) -> tuple[float, float]:
    """Create ``count`` flags one request after another; (seconds for the requests, seconds
    until the relay serves the last one)."""
    headers = {"Authorization": f"Bearer {cp.keys['management']}"}
    public = {"Authorization": f"Bearer {cp.keys['public']}"}
    last = f"bulk-{count - 1:05d}"
    async with httpx.AsyncClient(base_url=cp.url, headers=headers, timeout=60) as api:
        started = time.perf_counter()
        for i in range(count):
            response = await api.post("/api/v1/flags", json={"key": f"bulk-{i:05d}"})
            response.raise_for_status()
        created = time.perf_counter()
    async with httpx.AsyncClient(base_url=relay_url, headers=public, timeout=10) as relay:
        deadline = created + 60
        while time.perf_counter() < deadline:
            found = await relay.post(
                f"/ofrep/v1/evaluate/flags/{last}", json={"context": {"targetingKey": "u"}}
            )
            if found.status_code == 200:
                break
            await asyncio.sleep(0.005)
        served = time.perf_counter()
    return created - started, served - started


def print_sizes(
    sse: Propagation, small_sse: Propagation, polled: Propagation, small_polled: Propagation
) -> None:
    """The toggles of both environments side by side: medians (p99), and what the large one
    adds to the small one's median, with its target."""

    def cell(values: list[float]) -> str:
        x = Spread.of(values)
        return f"{x.p50:,.1f} (p99 {x.p99:,.1f})"

    def added(big: list[float], small: list[float], target: str = "") -> str:
        x = Spread.of(big).p50 - Spread.of(small).p50
        return f"{x:+,.1f} ms ({Spread.of(big).p50 / Spread.of(small).p50:.1f}x){target}"

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    api_ratio = Spread.of(sse.toggle_ms).p50 / Spread.of(small_sse.toggle_ms).p50
    stall = Spread.of(polled.longest_poll_ms).p50 - Spread.of(small_polled.longest_poll_ms).p50
    p99 = Spread.of(sse.from_start).p99
    cpu_rows: list[str] = []
    figures = [
        (
            "toggle API round trip (SSE phase)",
            sse.toggle_ms,
            small_sse.toggle_ms,
            f"; target ≤ 2x: {met(api_ratio <= 2)}",
        ),
        (
            "toggle request sent → relay (SSE event)",
            sse.from_start,
            small_sse.from_start,
            f"; target p99 < 50 ms at {FLAGS:,}: {met(p99 < 50)}",
        ),
        ("toggle response → relay (SSE event)", sse.from_response, small_sse.from_response, ""),
        ("toggle request sent → relay (polling)", polled.from_start, small_polled.from_start, ""),
        ("toggle response → relay (polling)", polled.from_response, small_polled.from_response, ""),
        (
            "relay stall: longest poll round trip during a toggle",
            polled.longest_poll_ms,
            small_polled.longest_poll_ms,
            f"; target < 5 ms: {met(stall < 5)}",
        ),
    ]
    for index, process in enumerate(("control plane", "relay")):
        big_ms = sse.cpu_s[index] * 1000 / max(1, len(sse.toggle_ms))
        small_ms = small_sse.cpu_s[index] * 1000 / max(1, len(small_sse.toggle_ms))
        cpu_rows.append(
            f"| CPU time per toggle, {process} (SSE phase, heartbeats included) | "
            f"{big_ms:,.1f} | {small_ms:,.1f} | {big_ms - small_ms:+,.1f} ms |"
        )
    lines = [
        f"### Toggles: {FLAGS:,} flags beside {SMALL} flags (same run, {len(sse.toggle_ms)} "
        "toggles each; ms, median (p99))",
        "",
        f"| figure | {FLAGS:,} flags | {SMALL} flags | {FLAGS:,} adds (p50) |",
        "|---|---:|---:|---|",
    ]
    lines += [
        f"| {name} | {cell(big)} | {cell(small)} | {added(big, small, target)} |"
        for name, big, small, target in figures
    ]
    lines += cpu_rows
    lines += [
        "",
        "* Recorded before (issue #15): toggle API 460 ms at 10,000 flags, 73 ms at 4,000 vs "
        "14 ms at 10; request sent → relay 114 vs 16 ms at 4,000 vs 10; relay stall ~130 ms at "
        "10,000. Issue #35: request sent → relay 90-106 vs 26-38 ms at 4,000 vs 10 (medians of "
        "15 toggles), the API 20 vs 20 ms.",
    ]
    print("\n".join(lines), flush=True)


def relay_compile(snapshot: Snapshot) -> None:
    """``compile_snapshot`` as a relay runs it: with the garbage collector paused."""
    with gc_paused():
        compile_snapshot(snapshot)


def median_ms(work: Callable[[], Any], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    began = time.perf_counter()
    rows: list[Row] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="vane-bench-scale-") as tmp, Cleanup() as cleanup:
        tmp_path = Path(tmp)
        url = f"sqlite:///{tmp_path / 'vane.db'}"
        log(f"{FLAGS:,} flags through the flag services (or a cached copy)")
        keys, generate_s, cached = prepared_database(tmp_path / "vane.db", FLAGS)

        snapshot, db_compile_ms = asyncio.run(snapshot_of(url))
        encoded = msgspec.msgpack.encode(snapshot)
        frame = p.encode(p.SnapshotMessage(snapshot=snapshot, access=p.Access(keys=())))
        decode_ms = median_ms(partial(msgspec.msgpack.Decoder(Snapshot).decode, encoded))
        compile_ms = median_ms(partial(relay_compile, snapshot))
        del snapshot

        busy = wait_quiet()
        log("control plane")
        cp = start_control_plane(url, tmp_path, keys=keys)
        cleanup.add(cp.process)

        log("relay, cold history")
        started = time.perf_counter()
        relay = start_relay(cp.url, keys["relay"], tmp_path / "relay1")
        cleanup.add(relay.process)
        healthz_s = time.perf_counter() - started
        wait_ready(relay.url)
        cold_s = time.perf_counter() - started
        time.sleep(1.0)  # the background write of the last-known-good snapshot
        pids = process_tree(relay.process.popen.pid)
        worker_rss = rss_mib(pids[-1])
        relay_rss = tree_rss_mib(relay.process.popen.pid)

        log("second relay, warm history")
        started = time.perf_counter()
        second = start_relay(cp.url, keys["relay"], tmp_path / "relay2")
        cleanup.add(second.process)
        wait_ready(second.url)
        warm_s = time.perf_counter() - started
        second.process.stop()

        log(f"{SAMPLES} toggles of {TOGGLED}, SSE then polling")
        sse, enabled = asyncio.run(
            propagation(
                cp,
                [relay.url],
                flag=TOGGLED,
                enabled=True,
                toggles=SAMPLES,
                method="sse",
                pids=[cp.process.popen.pid, relay.process.popen.pid],
            )
        )
        rss_after_sse = rss_mib(pids[-1])
        polled, _ = asyncio.run(
            propagation(
                cp, [relay.url], flag=TOGGLED, enabled=enabled, toggles=SAMPLES, method="polling"
            )
        )
        worker_rss_after = rss_mib(pids[-1])
        relay.process.stop()
        cp.process.stop()

        log(f"a {SMALL}-flag environment: the same toggles")
        small_keys, _, _ = prepared_database(tmp_path / "small.db", SMALL)
        busy_small = wait_quiet()
        small_cp = start_control_plane(
            f"sqlite:///{tmp_path / 'small.db'}", tmp_path, keys=small_keys
        )
        cleanup.add(small_cp.process)
        small_relay = start_relay(small_cp.url, small_keys["relay"], tmp_path / "relay-small")
        cleanup.add(small_relay.process)
        wait_ready(small_relay.url)
        small_sse, small_enabled = asyncio.run(
            propagation(
                small_cp,
                [small_relay.url],
                flag=TOGGLED,
                enabled=True,
                toggles=SAMPLES,
                method="sse",
                pids=[small_cp.process.popen.pid, small_relay.process.popen.pid],
            )
        )
        small_polled, _ = asyncio.run(
            propagation(
                small_cp,
                [small_relay.url],
                flag=TOGGLED,
                enabled=small_enabled,
                toggles=SAMPLES,
                method="polling",
            )
        )
        log(f"{CREATE:,} flags created through the API")
        create_s, create_served_s = asyncio.run(
            create_through_api(small_cp, small_relay.url, CREATE)
        )

    met = "met" if worker_rss_after < TARGET_RSS_MIB else "NOT met"
    rows += [
        Row(
            "flags in `production` (rule + 50/50 fallthrough each)",
            f"{FLAGS:,}",
            "",
            f"written in {generate_s:.0f} s (services in-process"
            + ("; a cached copy of that database this run)" if cached else ")"),
        ),
        Row(
            "full snapshot, msgpack (`msgspec.msgpack.encode`)",
            f"{len(encoded):,} B ({len(encoded) / 2**20:.2f} MiB)",
            "",
            f"{len(encoded) / FLAGS:.0f} B/flag",
        ),
        Row("`SnapshotMessage` websocket frame (no keys)", f"{len(frame):,} B", "", ""),
        Row(
            "control plane: database → snapshot (`compile_environment`)",
            f"{db_compile_ms:,.0f} ms",
            "",
            "",
        ),
        Row("relay: msgpack decode of the snapshot (median of 3)", f"{decode_ms:,.0f} ms", "", ""),
        Row("relay: `compile_snapshot` (median of 3)", f"{compile_ms:,.0f} ms", "", ""),
        Row(
            "relay start → `/readyz` 200, cold history",
            f"{cold_s:.2f} s",
            "",
            f"process up (`/healthz`) after {healthz_s:.2f} s",
        ),
        Row("relay start → `/readyz` 200, warm history (second relay)", f"{warm_s:.2f} s", "", ""),
        Row(
            "relay worker RSS (VmRSS) after the toggles",
            f"{worker_rss_after:.0f} MiB",
            "",
            f"target < {TARGET_RSS_MIB} MiB: {met}; at ready {worker_rss:.0f} MiB, after "
            f"the SSE-phase toggles {rss_after_sse:.0f} MiB; main + worker at ready "
            f"{relay_rss:.0f} MiB",
        ),
        Row(
            f"{CREATE:,} flags created through the API, one request after another",
            f"{create_s:.1f} s ({create_s / CREATE * 1000:.1f} ms/flag)",
            "before: 315 s",
            f"{315 / create_s:.1f}x faster; the relay served the last "
            f"{create_served_s - create_s:.2f} s after its request answered",
        ),
    ]
    missed = sse.missed + polled.missed + small_sse.missed + small_polled.missed
    if missed:
        notes.append(f"toggles not seen at a relay within the timeout: {missed}")
    notes += [
        "A toggle commits and answers; then, in the background, the control plane reads the one "
        "changed flag, patches its snapshot and sends that patch; the relay compiles the flag "
        "(and whatever depends on it) and appends the patch to its on-disk log.",
        f"Machine busy before the processes started: {busy:.0%} ({SMALL}-flag phase: "
        f"{busy_small:.0%}); the machine is shared. Whole run {time.perf_counter() - began:.0f} s.",
    ]
    print_table(f"A {FLAGS:,}-flag environment (bench_scale)", rows, notes)
    print()
    print_sizes(sse, small_sse, polled, small_polled)


if __name__ == "__main__":
    main()
