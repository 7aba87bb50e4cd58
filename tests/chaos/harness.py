"""Tools for fault tests against real processes: a TCP proxy to cut, browsers holding event
streams, and steady load (evaluations, events) with what each answer was.

Everything runs in background threads with their own event loops, so a test drives faults from
its own (synchronous) body and reads the figures at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from shared.wire.events import BROWSER_ID_PREFIX


class LoopThread:
    """An asyncio loop in a daemon thread; ``run(coro)`` waits for a result from it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any], timeout: float = 120) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def close(self) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(cancel_all(), timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class TcpProxy:
    """Forwards a local port to ``target``; ``cut()`` drops every connection and refuses new
    ones until ``restore()`` (a network partition without touching the service behind)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.loops = LoopThread()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.cut_now = False
        self.loops.run(self._start())

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_now:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers.difference_update((writer, up_writer))

    def cut(self) -> None:
        async def cut() -> None:
            self.cut_now = True
            for writer in list(self._writers):
                writer.transport.abort()
            self._writers.clear()

        self.loops.run(cut())

    def restore(self) -> None:
        self.cut_now = False

    def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
        self.loops.close()


# ------------------------------------------------------------------------ browsers' streams


@dataclass
class Stream:
    writer: asyncio.StreamWriter
    events: list[tuple[float, bytes]] = field(default_factory=list)  # (monotonic, id line)


class Browsers:
    """Many browsers holding OFREP event streams on one relay (raw sockets: cheap per stream)."""

    def __init__(self) -> None:
        self.loops = LoopThread()
        self.streams: list[Stream] = []
        self.refused: list[tuple[int, str]] = []  # (status, Retry-After)

    def open(self, url: str, count: int, concurrency: int = 200) -> float:
        """Open ``count`` streams on the stream ``url``; seconds it took."""
        return float(self.loops.run(self._open(url, count, concurrency), timeout=600))

    async def _open(self, url: str, count: int, concurrency: int) -> float:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        request = (
            f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()
        gate = asyncio.Semaphore(concurrency)
        start = time.monotonic()

        async def one() -> None:
            async with gate:
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(request)
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                except (TimeoutError, asyncio.IncompleteReadError, OSError):
                    self.refused.append((0, "no answer"))
                    writer.transport.abort()
                    return
                status = int(head.split(b" ", 2)[1])
                if status != 200:
                    retry = ""
                    for line in head.decode("latin-1").split("\r\n"):
                        if line.lower().startswith("retry-after:"):
                            retry = line.split(":", 1)[1].strip()
                    self.refused.append((status, retry))
                    writer.close()
                    return
                stream = Stream(writer)
                self.streams.append(stream)
            asyncio.get_running_loop().create_task(self._listen(reader, stream))

        await asyncio.gather(*(one() for _ in range(count)))
        return time.monotonic() - start

    async def _listen(self, reader: asyncio.StreamReader, stream: Stream) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(4096):
                now = time.monotonic()
                for line in data.split(b"\n"):
                    if line.startswith(b"id: "):
                        stream.events.append((now, line))

    def reached(self, id_line: bytes) -> list[float]:
        """When each stream got the event ``id_line`` (only the streams that did)."""
        return [t for s in self.streams for t, line in s.events if line == id_line]

    def close(self) -> None:
        async def close_all() -> None:
            for stream in self.streams:
                stream.writer.transport.abort()

        with contextlib.suppress(Exception):
            self.loops.run(close_all())
        self.loops.close()


# ------------------------------------------------------------------------------- load


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1]


@dataclass
class Figures:
    """What steady load saw."""

    evaluations: int = 0
    evaluation_failures: int = 0
    evaluation_ms: list[float] = field(default_factory=list)
    longest_evaluation_gap_s: float = 0.0  # longest time without a successful evaluation
    versions: dict[str, list[int]] = field(default_factory=dict)  # relay url -> versions served
    events_acknowledged: list[str] = field(default_factory=list)
    event_retries: int = 0
    event_answers: dict[int, int] = field(default_factory=dict)


class Load:
    """Browsers evaluating on relays and servers/pages sending events, until ``stop()``.

    Evaluations go round-robin to the relays; each answer's snapshot version is kept per relay,
    so a test can check that no relay went back. Events carry ids of their own and are retried
    (after 503s or connection errors) until acknowledged, as the Vane clients do.
    """

    def __init__(
        self,
        relays: list[str],
        public_key: str,
        server_key: str,
        *,
        events_to: Callable[[], list[str]] | None = None,
        evaluations_per_s: float = 200,
        events_per_s: float = 50,
    ) -> None:
        self.relays = relays
        self.public_key = public_key
        self.server_key = server_key
        self.events_to = events_to or (lambda: relays)
        self.eval_period = 1 / evaluations_per_s
        self.event_period = 1 / events_per_s
        self.figures = Figures(versions={url: [] for url in relays})
        self.loops = LoopThread()
        self._stop = threading.Event()
        self._futures = [
            self.loops.spawn(self._evaluate()),
            self.loops.spawn(self._send_events("server")),
            self.loops.spawn(self._send_events("page")),
        ]

    async def _evaluate(self) -> None:
        figures = self.figures
        last_ok = time.monotonic()
        async with httpx.AsyncClient(timeout=5) as client:
            n = 0
            while not self._stop.is_set():
                relay = self.relays[n % len(self.relays)]
                n += 1
                start = time.monotonic()
                try:
                    response = await client.post(
                        f"{relay}/ofrep/v1/evaluate/flags",
                        json={"context": {"targetingKey": f"user-{n % 1000}"}},
                        headers={"Authorization": f"Bearer {self.public_key}"},
                    )
                    ok = response.status_code == 200
                except httpx.HTTPError:
                    ok = False
                now = time.monotonic()
                figures.evaluations += 1
                if ok:
                    figures.evaluation_ms.append((now - start) * 1000)
                    figures.longest_evaluation_gap_s = max(
                        figures.longest_evaluation_gap_s, now - last_ok
                    )
                    last_ok = now
                    flags = response.json()["flags"]
                    if flags:
                        figures.versions[relay].append(int(flags[0]["metadata"]["version"]))
                else:
                    figures.evaluation_failures += 1
                await asyncio.sleep(max(0.0, self.eval_period - (now - start)))

    async def _send_events(self, kind: str) -> None:
        figures = self.figures
        async with httpx.AsyncClient(timeout=5) as client:
            n = 0
            while not self._stop.is_set():
                n += 1
                event_id = f"chaos-{kind}-{n}"
                event = {"unit": f"u{n % 500}", "event": f"{kind}-view", "eventId": event_id}
                start = time.monotonic()
                attempt = 0
                while True:  # retried until acknowledged, like the clients
                    targets = self.events_to()
                    target = targets[attempt % len(targets)]
                    try:
                        if kind == "server":
                            response = await client.post(
                                f"{target}/api/v1/track",
                                json=event,
                                headers={"Authorization": f"Bearer {self.server_key}"},
                            )
                        else:
                            response = await client.post(
                                f"{target}/sdk/v1/events?key={self.public_key}",
                                json={"events": [event]},
                            )
                        status = response.status_code
                    except httpx.HTTPError:
                        status = 0
                    figures.event_answers[status] = figures.event_answers.get(status, 0) + 1
                    if status == 200:  # as stored: a page's ids live in the browsers' namespace
                        stored_as = event_id if kind == "server" else BROWSER_ID_PREFIX + event_id
                        figures.events_acknowledged.append(stored_as)
                        break
                    figures.event_retries += 1
                    attempt += 1
                    await asyncio.sleep(min(0.5, 0.02 * 2 ** min(attempt, 5)))
                elapsed = time.monotonic() - start
                await asyncio.sleep(max(0.0, self.event_period - elapsed))

    def stop(self) -> Figures:
        self._stop.set()
        for future in self._futures:
            with contextlib.suppress(Exception):
                future.result(timeout=30)
        self.loops.close()
        return self.figures


def went_back(versions: list[int]) -> int:
    """How many times a sequence of served versions decreased."""
    return sum(1 for a, b in itertools.pairwise(versions) if b < a)


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[bool]:
    """A tmpfs of ``size`` at ``path`` (True), or a plain directory where mounting is not
    allowed (False)."""
    path.mkdir(parents=True)
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)
