"""Kill-switch propagation: how long after a toggle every relay serves the new value.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_killswitch      # RELAYS=20 TOGGLES=100

One control plane (SQLite in a temporary directory) and ``RELAYS`` relay processes (own data
directory and port each), one boolean flag. The flag is toggled ``TOGGLES`` times per method,
alternating on/off, one toggle at a time: the next one starts only when every relay has the
previous one, after a random 20-100 ms pause. Two ways of seeing a relay take a change:

* **SSE** (precise): each relay's OFREP event stream (the ``eventStreams`` URL of a bulk
  response) pushes ``refetchEvaluation`` the moment the relay swaps in the new snapshot; the
  arrival of that event is timestamped. Nothing else loads the machine while it runs.
* **Polling** (what a client sees): one keep-alive ``httpx.AsyncClient`` per relay asks the
  single-flag OFREP endpoint in a tight loop, from just before the toggle until the answer
  changes; the arrival of the first changed answer is timestamped. Its granularity is one poll
  round trip (20 loops share one Python process), and the polling load itself slows the relays.

Latencies are measured from the arrival of the toggle's HTTP response and from the moment the
toggle request was sent (the control plane publishes before it answers, so a relay can be
earlier than the response: negative values are real). All clocks are this process's
``perf_counter``.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import httpx

from tests.benchmarks.common import (
    Cleanup,
    Row,
    Spread,
    cpu_seconds,
    log,
    print_table,
    tree_rss_mib,
    unavailable,
    wait_quiet,
)
from tests.e2e.test_relays import ControlPlane, Relay, eventually, start_control_plane, start_relay

FLAG = "kill-switch"
ENVIRONMENT = "production"
PAUSE_S = (0.02, 0.1)
TIMEOUT_S = 10.0
TARGET_P99_MS = 100.0


@dataclass
class Propagation:
    """Per (toggle, relay) latencies in ms, and the toggle requests' own durations."""

    method: str
    from_response: list[float] = field(default_factory=list)
    from_start: list[float] = field(default_factory=list)
    slowest_from_start: list[float] = field(default_factory=list)  # per toggle
    toggle_ms: list[float] = field(default_factory=list)
    longest_poll_ms: list[float] = field(default_factory=list)  # polling: per toggle
    missed: int = 0
    # CPU seconds each of ``propagation``'s ``pids`` used from the first toggle to the last
    # arrival (its streams or pollers already open): what the toggles cost the processes
    cpu_s: list[float] = field(default_factory=list)


def serving(body: bytes, enabled: bool) -> bool:
    """Whether an OFREP evaluation answer reflects the flag being ``enabled``."""
    return (b'"reason":"DISABLED"' not in body) == enabled


class Streams:
    """One OFREP event stream per relay; each ``refetchEvaluation`` is queued with its arrival."""

    def __init__(self, urls: list[str], public_key: str) -> None:
        self.urls = urls
        self.public_key = public_key
        self.queues: list[asyncio.Queue[tuple[float, int]]] = [asyncio.Queue() for _ in urls]
        self.versions: list[int] = [0 for _ in urls]
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(10, read=None))
        self._tasks: list[asyncio.Task[None]] = []
        self._opened: list[asyncio.Event] = [asyncio.Event() for _ in urls]

    async def __aenter__(self) -> Streams:
        for index, url in enumerate(self.urls):
            bulk = await self._client.post(
                f"{url}/ofrep/v1/evaluate/flags",
                json={"context": {"targetingKey": f"sse-{index}"}},
                headers={"Authorization": f"Bearer {self.public_key}"},
            )
            bulk.raise_for_status()
            payload = bulk.json()
            self.versions[index] = int(payload["metadata"]["version"])
            stream_url = payload["eventStreams"][0]["url"]
            self._tasks.append(asyncio.create_task(self._read(index, stream_url)))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self._opened)), 30)
        return self

    async def __aexit__(self, *_: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()

    async def _read(self, index: int, url: str) -> None:
        queue = self.queues[index]
        async with self._client.stream("GET", url, headers={"Accept": "text/event-stream"}) as r:
            r.raise_for_status()
            self._opened[index].set()
            version = -1
            async for line in r.aiter_lines():
                if line.startswith("id:"):
                    version = int(line[3:].strip())
                elif line.startswith("data:") and "refetchEvaluation" in line:
                    queue.put_nowait((time.perf_counter(), version))

    async def next_change(self, index: int, deadline: float) -> float | None:
        """Arrival time of the relay's next newer version, or None at ``deadline``."""
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                return None
            try:
                at, version = await asyncio.wait_for(self.queues[index].get(), left)
            except TimeoutError:
                return None
            if version > self.versions[index]:
                self.versions[index] = version
                return at


async def _toggle(client: httpx.AsyncClient, flag: str, enabled: bool) -> tuple[float, float]:
    started = time.perf_counter()
    response = await client.post(
        f"/api/v1/flags/{flag}/environments/{ENVIRONMENT}/toggle", json={"enabled": enabled}
    )
    answered = time.perf_counter()
    response.raise_for_status()
    return started, answered


async def _poll_until(
    client: httpx.AsyncClient, path: str, body: bytes, enabled: bool, deadline: float
) -> tuple[float | None, float]:
    """Arrival of the first answer showing the new state (None at the deadline), and the
    longest round trip seen meanwhile (a relay busy swapping a snapshot answers late)."""
    longest = 0.0
    while True:
        sent = time.perf_counter()
        response = await client.post(path, content=body)
        at = time.perf_counter()
        longest = max(longest, at - sent)
        if response.status_code == 200 and serving(response.content, enabled):
            return at, longest
        if at > deadline:
            return None, longest


async def propagation(
    cp: ControlPlane,
    relay_urls: list[str],
    *,
    flag: str,
    enabled: bool,
    toggles: int,
    method: str,
    seed: int = 7,
    pids: Sequence[int] = (),
) -> tuple[Propagation, bool]:
    """Toggle ``flag`` (now ``enabled``) ``toggles`` times; measure each relay's take-up.

    ``method`` is ``"sse"`` or ``"polling"``. Returns the measurements and the final state.
    ``pids``: processes whose CPU time over the toggles is recorded (``Propagation.cpu_s``).
    """
    rng = random.Random(seed)
    result = Propagation(method)
    public = cp.keys["public"]
    management = httpx.AsyncClient(
        base_url=cp.url, headers={"Authorization": f"Bearer {cp.keys['management']}"}, timeout=60
    )
    pollers = [
        httpx.AsyncClient(
            base_url=url,
            headers={"Authorization": f"Bearer {public}", "Content-Type": "application/json"},
            timeout=5,
        )
        for url in relay_urls
    ]
    path = f"/ofrep/v1/evaluate/flags/{flag}"
    bodies = [b'{"context":{"targetingKey":"poller-%d","country":"US"}}' % i for i in range(99)]
    streams = Streams(relay_urls, public) if method == "sse" else None
    try:
        if streams is not None:
            await streams.__aenter__()
            await asyncio.sleep(0.2)
        cpu_before = [cpu_seconds(pid) for pid in pids]
        for _ in range(toggles):
            enabled = not enabled
            if streams is not None:
                started, answered = await _toggle(management, flag, enabled)
                deadline = answered + TIMEOUT_S
                arrivals = [await streams.next_change(i, deadline) for i in range(len(relay_urls))]
            else:
                deadline = time.perf_counter() + TIMEOUT_S
                tasks = [
                    asyncio.create_task(
                        _poll_until(client, path, bodies[i % len(bodies)], enabled, deadline)
                    )
                    for i, client in enumerate(pollers)
                ]
                await asyncio.sleep(0)  # every poller has its first request on the way
                started, answered = await _toggle(management, flag, enabled)
                polled = await asyncio.gather(*tasks)
                arrivals = [at for at, _ in polled]
                result.longest_poll_ms.append(max(longest for _, longest in polled) * 1000)
            result.toggle_ms.append((answered - started) * 1000)
            seen = [at for at in arrivals if at is not None]
            result.missed += len(arrivals) - len(seen)
            result.from_response += [(at - answered) * 1000 for at in seen]
            result.from_start += [(at - started) * 1000 for at in seen]
            if seen:
                result.slowest_from_start.append((max(seen) - started) * 1000)
            await asyncio.sleep(rng.uniform(*PAUSE_S))
        spent = zip(pids, cpu_before, strict=True)
        result.cpu_s = [cpu_seconds(pid) - before for pid, before in spent]
    finally:
        if streams is not None:
            await streams.__aexit__()
        for client in pollers:
            await client.aclose()
        await management.aclose()
    return result, enabled


def propagation_rows(result: Propagation, label: str, *, anchors: bool) -> list[Row]:
    """Rows for one method: from the response (the target), end to end (against the anchors),
    and the slowest relay of each toggle."""
    response = Spread.of(result.from_response)
    start = Spread.of(result.from_start)
    slowest = Spread.of(result.slowest_from_start)
    mean = statistics.fmean(result.from_start) if result.from_start else float("nan")
    missed = f"; {result.missed} not seen within {TIMEOUT_S:.0f} s" if result.missed else ""

    def target(spread: Spread) -> str:
        met = "met" if spread.p99 < TARGET_P99_MS else "NOT met"
        return f"target p99 < {TARGET_P99_MS:.0f} ms: {met}"

    rows = [
        Row(
            f"{label}: toggle response → relay ({response.n} samples{missed})",
            response.text(),
            "",
            target(response),
        ),
        Row(
            f"{label}: toggle request sent → relay (end to end)",
            start.text(),
            "LaunchDarkly ~200 ms (vendor claim)" if anchors else "",
            target(start)
            + (f"; LD / Vane p50 = {200 / start.p50:.0f}x" if anchors and start.p50 > 0 else ""),
        ),
        Row(f"{label}: request sent → slowest relay of each toggle", slowest.text(), "", ""),
    ]
    if anchors and start.p50 > 0:
        rows += [
            Row(
                f"{label}: end to end vs GrowthBook",
                f"p50 {start.p50:.1f} ms",
                "GrowthBook ~1 s (vendor claim)",
                f"{1000 / start.p50:.0f}x faster",
            ),
            Row(
                f"{label}: end to end vs Unleash (average)",
                f"mean {mean:.1f} ms",
                "Unleash polling: 7.5 s average (15 s interval / 2)",
                f"{7500 / mean:.0f}x faster",
            ),
        ]
    return rows


def _has_flag(relay: Relay, public: str) -> bool:
    return relay.evaluate(public, FLAG).status_code == 200


def _start_relays(cp: ControlPlane, tmp: Path, count: int, cleanup: Cleanup) -> list[Relay]:
    def one(index: int) -> Relay:
        relay = start_relay(cp.url, cp.keys["relay"], tmp / f"relay{index:02d}")
        cleanup.add(relay.process)
        return relay

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def main() -> None:
    relays_wanted = int(os.environ.get("RELAYS", "20"))
    toggles = int(os.environ.get("TOGGLES", "100"))
    began = time.perf_counter()
    rows: list[Row] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="vane-bench-killswitch-") as tmp, Cleanup() as cleanup:
        tmp_path = Path(tmp)
        log("starting the control plane")
        cp = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
        cleanup.add(cp.process)
        log(f"starting {relays_wanted} relays in parallel")
        t = time.perf_counter()
        relays = _start_relays(cp, tmp_path, relays_wanted, cleanup)
        started_s = time.perf_counter() - t
        created = cp.api("POST", "/flags", {"key": FLAG})
        if created.status_code != 201:
            raise SystemExit(f"creating {FLAG} failed: {created.status_code} {created.text}")
        public = cp.keys["public"]
        for relay in relays:
            eventually(partial(_has_flag, relay, public), timeout=60, what=f"{relay.url} serves")
        ready_s = time.perf_counter() - t
        rss = [tree_rss_mib(r.process.popen.pid) for r in relays]
        cp_rss = tree_rss_mib(cp.process.popen.pid)
        urls = [r.url for r in relays]
        busy = wait_quiet()
        log(f"{len(relays)} relays ready in {ready_s:.1f} s; {toggles} toggles timed by SSE")
        sse, enabled = asyncio.run(
            propagation(cp, urls, flag=FLAG, enabled=False, toggles=toggles, method="sse")
        )
        log(f"{toggles} toggles timed by polling")
        polled, enabled = asyncio.run(
            propagation(
                cp, urls, flag=FLAG, enabled=enabled, toggles=toggles, method="polling", seed=8
            )
        )
        for relay in relays:
            if not serving(relay.evaluate(public, FLAG).content, enabled):
                notes.append(f"{relay.url} does not serve the final state")

    rows += propagation_rows(sse, "SSE event", anchors=True)
    rows += propagation_rows(polled, "polling", anchors=True)
    toggle_sse, toggle_poll = Spread.of(sse.toggle_ms), Spread.of(polled.toggle_ms)
    rows += [
        Row("toggle API round trip (SSE phase, idle machine)", toggle_sse.text(), "", ""),
        Row("toggle API round trip (polling phase, loaded)", toggle_poll.text(), "", ""),
        Row(
            f"{len(relays)} relays: start → all serving",
            f"{ready_s:.1f} s (healthz after {started_s:.1f} s)",
            "",
            "",
        ),
        Row(
            "relay RSS (granian main + worker)",
            f"{statistics.median(rss):.0f} MiB median, {sum(rss):,.0f} MiB for {len(rss)}",
            "",
            "",
        ),
        Row("control plane RSS (main + worker)", f"{cp_rss:.0f} MiB", "", ""),
    ]
    if not relays:
        rows = [unavailable("kill-switch propagation", "no relay started")]
    notes += [
        f"{len(relays)} relays + control plane on {os.cpu_count()} CPUs, loopback; "
        f"{toggles} toggles per method, alternating, one at a time, random "
        f"{PAUSE_S[0] * 1000:.0f}-{PAUSE_S[1] * 1000:.0f} ms pause between.",
        "SSE: arrival of each relay's `refetchEvaluation` event (sent when the relay swaps the "
        "snapshot); polling: first changed answer of a tight keep-alive loop per relay on "
        "`POST /ofrep/v1/evaluate/flags/{key}` (granularity = one round trip under load).",
        "Control plane started as in the e2e tests (`VANE_HEARTBEAT_S=1`, `VANE_RECONCILE_S=1`).",
        f"Machine busy before the toggles (our idle relays included): {busy:.0%}. "
        f"Whole run {time.perf_counter() - began:.0f} s.",
    ]
    print_table("Kill-switch propagation (bench_killswitch)", rows, notes)


if __name__ == "__main__":
    main()
