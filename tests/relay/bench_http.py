"""Time the relay's HTTP app on a 50-flag snapshot, in-process and under granian.

    .venv/bin/python -m tests.relay.bench_http [--requests 20000]      # in-process loop
    .venv/bin/python -m tests.relay.bench_http --wrk [--duration 15]   # granian + wrk

The workload is the peer benchmark's: 50 boolean flags, each ``country in <5 of 10>`` → true,
fallthrough 50/50 by key; every request carries a fresh random context. In-process, ``receive``
and ``send`` are minimal coroutines, so the figures are the app's own cost per request. With
``--wrk``, granian (one worker, uvloop) is pinned to CPU 0 and wrk (one thread, 50 connections)
to CPU 1, as in the peer anchors' ``run_http.sh``; only 127.0.0.1 is used and the server is
stopped by its own PID.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import msgspec

from relay.prometheus import RelayMetrics
from relay.routes.compose import build_http_app
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


def factory() -> Any:
    """For granian ``--factory``: the bench app, answering ``lifespan`` itself."""
    app = make_app()

    async def with_lifespan(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].rsplit(".", 1)[-1]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        await app(scope, receive, send)

    return with_lifespan


WRK_SCRIPT = """
local countries = {"US", "CA", "GB", "DE", "FR", "JP", "BR", "IN", "AU", "MX"}
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer %(token)s"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Origin"] = "https://app.example.com"
function request()
  local body = string.format('{"context":{"targetingKey":"u-%%08x%%08x","country":"%%s"}}',
    math.random(0, 0x7fffffff), math.random(0, 0x7fffffff), countries[math.random(1, 10)])
  return wrk.format(nil, nil, nil, body)
end
"""


def wrk_run(path: str, duration: str, connections: int) -> float | None:
    """Requests per second of granian serving ``factory()``, or None without wrk/taskset."""
    if not shutil.which("wrk") or not shutil.which("taskset"):
        print("wrk and taskset are needed for --wrk", file=sys.stderr)
        return None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    granian = Path(sys.executable).with_name("granian")
    server = subprocess.Popen(
        ["taskset", "-c", "0", str(granian), "--interface", "asgi", "--loop", "uvloop",
         "--workers", "1", "--runtime-threads", "1", "--no-ws", "--log-level", "error",
         "--host", "127.0.0.1", "--port", str(port), "--factory", "tests.relay.bench_http:factory"],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
            script.write(WRK_SCRIPT % {"token": PUBLIC})
        url = f"http://127.0.0.1:{port}{path}"
        wrk = ["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", "-s", script.name, url]
        subprocess.run([*wrk, "-d3s"], capture_output=True, check=True)  # warm-up
        out = subprocess.run([*wrk, f"-d{duration}"], capture_output=True, text=True, check=True)
        os.unlink(script.name)
        if "Non-2xx" in out.stdout:
            raise RuntimeError(out.stdout)
        match = re.search(r"Requests/sec:\s+([\d.]+)", out.stdout)
        return float(match.group(1)) if match else None
    finally:
        server.terminate()
        server.wait(10)


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
    parser.add_argument("--wrk", action="store_true", help="also serve with granian, load with wrk")
    parser.add_argument("--duration", default="15s")
    parser.add_argument("--connections", type=int, default=50)
    args = parser.parse_args()
    paths = ("/ofrep/v1/evaluate/flags", "/sdk/v1/flags")
    print("| endpoint (50 flags, random context) | in-process µs/request | granian req/s |")
    print("|---|---|---|")
    for path in paths:
        figures = [asyncio.run(run(path, args.requests)) for _ in range(3)]
        served = wrk_run(path, args.duration, args.connections) if args.wrk else None
        rate = f"{served:,.0f}" if served is not None else "-"
        print(f"| POST {path} | {min(figures):.1f} | {rate} |")


if __name__ == "__main__":
    main()
