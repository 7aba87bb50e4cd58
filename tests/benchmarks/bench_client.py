"""What ``VaneClient.track()`` costs the application, and how fast events reach a server.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_client [--runs 5] [--calls 200000]

* ``track()`` µs per call in the application thread, median of ``--runs`` runs of ``--calls``
  calls: with the sender paused (the call alone), and with the sender running against the
  in-memory event store of ``tests/client`` (the call plus the GIL it shares with the sender).
* End-to-end events/s: ``--calls`` events tracked and flushed into that store over loopback
  (the store parses, validates and de-duplicates every event in Python, so it is the likelier
  bottleneck), batch size 500 and 1000.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable

from shared.client import VaneClient
from tests.client.event_store import SERVER_KEY, RunningStore


class _PausedClient(VaneClient):
    """The sender thread is never started: track() alone is measured."""

    def _start_sender(self) -> None:
        pass


def _per_call(track: Callable[[], object], calls: int) -> float:
    gc.collect()
    started = time.perf_counter()
    for _ in range(calls):
        track()
    return (time.perf_counter() - started) / calls * 1e6


def track_cost(client: VaneClient, calls: int, runs: int, revenue: bool) -> float:
    track = client.track
    order = iter(range(10**9))
    if revenue:

        def call() -> object:
            return track(
                "user-42", "purchase", value=4999, currency="EUR", event_id=f"o-{next(order)}"
            )
    else:

        def call() -> object:
            return track("user-42", "signup")

    results = []
    for _ in range(runs + 1):  # the first is a warm-up
        results.append(_per_call(call, calls))
        if isinstance(client, _PausedClient):
            client._queue.clear()
        else:
            client.flush(timeout=120)
    return statistics.median(results[1:])


def end_to_end(url: str, calls: int, batch_size: int) -> float:
    with VaneClient(url, SERVER_KEY, batch_size=batch_size, max_queue=calls + 1) as client:
        started = time.perf_counter()
        for i in range(calls):
            client.track("user-42", "signup", value=i)
        assert client.flush(timeout=600)
        elapsed = time.perf_counter() - started
        assert client.sent == calls, (client.sent, client.dropped, client.rejected)
    return calls / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []

    paused = _PausedClient("http://127.0.0.1:9", SERVER_KEY, max_queue=args.calls + 1)
    for revenue in (False, True):
        figure = track_cost(paused, args.calls, args.runs, revenue)
        shape = "value+currency+event_id" if revenue else "unit+event"
        rows.append((f"track() µs/call, sender paused, {shape}", f"{figure:.2f}"))
    paused.close(timeout=0)

    with RunningStore() as store:
        with VaneClient(store.url, SERVER_KEY, max_queue=args.calls + 1) as live:
            figure = track_cost(live, args.calls, args.runs, revenue=False)
            rows.append(("track() µs/call, sender running, unit+event", f"{figure:.2f}"))
        for batch_size in (500, 1000):
            store.events.clear()
            rate = end_to_end(store.url, args.calls, batch_size)
            rows.append(
                (f"end-to-end events/s into the test store, batch {batch_size}", f"{rate:,.0f}")
            )

    print(f"\n{args.runs} runs of {args.calls:,} calls (median)\n")
    print("| figure | Vane |")
    print("|---|---:|")
    for label, value in rows:
        print(f"| {label} | {value} |")


if __name__ == "__main__":
    main()
