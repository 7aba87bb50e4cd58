"""Time the relay's ASGI app in-process (no server): µs per request, 50-flag snapshot.

    .venv/bin/python -m tests.relay.bench_http [--requests 20000]

The workload is the peer benchmark's: 50 boolean flags, each ``country in <5 of 10>`` → true,
fallthrough 50/50 by key; every request carries a fresh random context. ``receive`` and
``send`` are minimal coroutines, so the figures are the app's own cost per request.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from typing import Any

import msgspec

from relay.http import build_http_app
from relay.metrics import RelayMetrics
from relay.store import EnvironmentState, Store
from shared.wire.snapshot import (
    Clause,
    FlagSnapshot,
    Rule,
    Serve,
    Snapshot,
    Variation,
    WeightedVariation,
)
from tests.relay.helpers import PUBLIC, public_access, settings

COUNTRIES = ["US", "CA", "GB", "DE", "FR", "JP", "BR", "IN", "AU", "MX"]


def bench_snapshot(n: int = 50, seed: int = 7) -> Snapshot:
    rng = random.Random(seed)
    flags = {}
    for i in range(n):
        key = f"flag-{i:03d}"
        flags[key] = FlagSnapshot(
            key=key,
            version=1,
            type="boolean",
            variations=(Variation(0, True, "on"), Variation(1, False, "off")),
            enabled=True,
            off_variation=1,
            rules=(
                Rule(
                    id=f"r{i}",
                    clauses=(
                        Clause(
                            op="in", attribute="country", values=tuple(rng.sample(COUNTRIES, 5))
                        ),
                    ),
                    serve=Serve(variation=0),
                ),
            ),
            fallthrough=Serve(rollout=(WeightedVariation(0, 50_000), WeightedVariation(1, 50_000))),
        )
    return Snapshot(project="bench", environment="production", version=1, flags=flags, segments={})


def make_app() -> Any:
    store = Store()
    store.swap(EnvironmentState.build(bench_snapshot(), public_access()))
    store.connected = True
    store.upstream_alive()
    return build_http_app(store, settings(), RelayMetrics(store))


def scope(path: str, body_len: int) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8100"),
            (b"user-agent", b"wrk"),
            (b"accept", b"*/*"),
            (b"authorization", f"Bearer {PUBLIC}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(body_len).encode()),
            (b"origin", b"https://app.example.com"),
        ],
        "server": ("127.0.0.1", 8100),
        "client": ("127.0.0.1", 40000),
    }


async def run(path: str, n: int) -> float:
    app = make_app()
    rng = random.Random(1)
    bodies = [
        msgspec.json.encode(
            {
                "context": {
                    "targetingKey": f"u-{rng.randrange(10**9)}",
                    "country": rng.choice(COUNTRIES),
                }
            }
        )
        for _ in range(n)
    ]
    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def one(body: bytes) -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope(path, len(body)), receive, send)

    for body in bodies[:500]:  # warm-up
        await one(body)
    statuses.clear()
    start = time.perf_counter()
    for body in bodies:
        await one(body)
    elapsed = time.perf_counter() - start
    assert set(statuses) == {200}, set(statuses)
    return elapsed / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    print("| endpoint (50 flags, random context) | µs/request |")
    print("|---|---|")
    for path in ("/ofrep/v1/evaluate/flags", "/sdk/v1/flags"):
        figures = [asyncio.run(run(path, args.requests)) for _ in range(3)]
        print(f"| POST {path} | {min(figures):.1f} |")


if __name__ == "__main__":
    main()
