"""A relay's footprint: RSS of every process of ``vane relay``, idle and holding 10,000 flags.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_relay_memory      # FLAGS=10000

Each relay is a real ``vane relay`` process (all its processes are summed: with ``--workers 1``
it is one process, with more granian adds a supervising main process) connected to a real
control plane, and measured after it has been ready and quiet for a few seconds:

- idle: a fresh environment (the first start's flags: none) — the sidecar's floor;
- after traffic: the same relay once it has answered 2,000 OFREP bulk evaluations, browser
  events and one Prometheus scrape (what a live sidecar has loaded);
- 10,000 flags: the ``bench_scale`` database (its cached copy when there is one), idle after the
  first sync, then after the same traffic;
- two workers on the idle environment, for the price of ``--workers 2``.

Peers, as published (not measured here): LaunchDarkly's Relay Proxy idles near 11 MiB, Unleash
Edge at 4 to 17 MiB. The relay before this benchmark existed: granian's main process + one worker,
31 + 55 = 86 MiB idle.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import httpx

from tests.benchmarks.bench_scale import prepared_database
from tests.benchmarks.common import (
    Cleanup,
    Row,
    log,
    print_table,
    process_tree,
    relay_process,
    tree_rss_mib,
    wait_quiet,
    wait_ready,
)
from tests.e2e.test_relays import Relay, start_control_plane

FLAGS = int(os.environ.get("FLAGS", "10000"))
TARGET_IDLE_MIB = 40.0
BEFORE_IDLE_MIB = 86.0  # granian main 31 + worker 55 (issue 15, measured before this change)
QUIET_S = 3.0
REQUESTS = 2000


def settle(relay: Relay) -> tuple[float, int]:
    """Ready, then quiet for a moment: (RSS of all the relay's processes in MiB, processes)."""
    wait_ready(relay.url)
    time.sleep(QUIET_S)
    pid = relay.process.popen.pid
    return tree_rss_mib(pid), len(process_tree(pid))


def traffic(relay: Relay, public_key: str) -> None:
    """What a live sidecar serves: bulk evaluations, an event batch, a metrics scrape."""
    headers = {"Authorization": f"Bearer {public_key}"}
    with httpx.Client(base_url=relay.url, headers=headers, timeout=10) as client:
        for i in range(REQUESTS):
            response = client.post(
                "/ofrep/v1/evaluate/flags",
                json={"context": {"targetingKey": f"user-{i}", "country": "de"}},
            )
            response.raise_for_status()
        client.post(
            "/sdk/v1/events",
            json={"events": [{"event": "bench", "unit": "user-1"}]},
        ).raise_for_status()
        client.get("/metrics").raise_for_status()


def measure(
    cleanup: Cleanup,
    upstream: str,
    keys: dict[str, str],
    data_dir: Path,
    *,
    workers: int = 1,
    with_traffic: bool = True,
) -> tuple[tuple[float, int], tuple[float, int] | None]:
    relay = relay_process(
        upstream, keys["relay"], data_dir, env={"VANE_RELAY_WORKERS": str(workers)}
    )
    cleanup.add(relay.process)
    idle = settle(relay)
    after = None
    if with_traffic:
        traffic(relay, keys["public"])
        after = settle(relay)
    relay.process.stop()
    return idle, after


def mib(figure: tuple[float, int] | None) -> str:
    if figure is None:
        return "—"
    rss, processes = figure
    return f"{rss:.1f} MiB ({processes} process{'es' if processes > 1 else ''})"


def main() -> None:
    rows: list[Row] = []
    busy = wait_quiet()
    with tempfile.TemporaryDirectory(prefix="vane-bench-memory-") as tmp, Cleanup() as cleanup:
        tmp_path = Path(tmp)
        log("control plane, empty environment")
        small = start_control_plane(f"sqlite:///{tmp_path / 'small.db'}", tmp_path)
        cleanup.add(small.process)
        idle, after = measure(cleanup, small.url, small.keys, tmp_path / "relay-small")
        log("two workers")
        two, _ = measure(
            cleanup, small.url, small.keys, tmp_path / "relay-two", workers=2, with_traffic=False
        )
        small.process.stop()

        log(f"{FLAGS:,} flags (bench_scale's database)")
        keys, _, cached = prepared_database(tmp_path / "large.db", FLAGS)
        large = start_control_plane(f"sqlite:///{tmp_path / 'large.db'}", tmp_path, keys=keys)
        cleanup.add(large.process)
        large_idle, large_after = measure(cleanup, large.url, keys, tmp_path / "relay-large")

    met = "met" if idle[0] <= TARGET_IDLE_MIB else "NOT met"
    rows += [
        Row(
            "idle relay, `--workers 1` (default)",
            mib(idle),
            f"before: {BEFORE_IDLE_MIB:.0f} MiB (granian main 31 + worker 55)",
            f"target ≤ {TARGET_IDLE_MIB:.0f} MiB: {met}",
        ),
        Row(
            f"same relay after {REQUESTS:,} bulk evaluations, events, a /metrics scrape",
            mib(after),
            "",
            "",
        ),
        Row("idle relay, `--workers 2`", mib(two), "", ""),
        Row(f"relay holding {FLAGS:,} flags, idle after the first sync", mib(large_idle), "", ""),
        Row(f"relay holding {FLAGS:,} flags, after the same traffic", mib(large_after), "", ""),
        Row("LaunchDarkly Relay Proxy, idle (published)", "", "~11 MiB", ""),
        Row("Unleash Edge, idle (published)", "", "4 to 17 MiB", ""),
    ]
    print_table(
        "Relay memory (RSS of all of `vane relay`'s processes)",
        rows,
        [
            f"machine busy {busy:.0%} of its CPUs when the run began (memory does not depend "
            "on it, timing of the quiet period does)",
            f"{FLAGS:,}-flag database: " + ("cached copy" if cached else "generated this run"),
        ],
    )


if __name__ == "__main__":
    main()
