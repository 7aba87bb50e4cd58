"""Toggle → backend: how long after a toggle's response every in-process provider serves it.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_provider      # BACKENDS=20 RELAYS=2 TOGGLES=100

One control plane (SQLite), ``RELAYS`` relays, and ``BACKENDS`` providers (``VaneProvider``,
spread evenly over the relays) in one separate backend process, each following its relay's
snapshot feed. The flag is toggled ``TOGGLES`` times, one at a time, the next after every provider
has the previous one and a random 20-100 ms pause. Each provider timestamps the moment its
``PROVIDER_CONFIGURATION_CHANGED`` handler runs (the new snapshot is in place and served) with the
wall clock, which both processes share; latencies run from the arrival of the toggle's response.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import httpx

from tests.benchmarks.common import Cleanup, Row, Spread, log, print_table, wait_quiet
from tests.e2e.test_relays import Relay, eventually, start_control_plane, start_relay
from tests.processes import Process

FLAG = "kill-switch"
TARGET_P99_MS = 100.0


def backends(urls: list[str], key: str) -> None:
    """The backend process: one provider per URL; prints ``ready`` then one line per change."""
    from openfeature import api
    from openfeature.event import EventDetails, ProviderEvent

    from shared.client import VaneProvider

    lock = threading.Lock()

    def handler(index: int, provider: VaneProvider) -> Callable[[EventDetails], None]:
        def changed(details: EventDetails) -> None:
            at = time.time()
            value = provider.evaluate(FLAG, {"targetingKey": "probe"}, None)
            with lock:
                print(json.dumps({"backend": index, "value": value, "at": at}), flush=True)

        return changed

    providers = []
    for index, url in enumerate(urls):
        provider = VaneProvider(url, key, track_exposures=False, init_timeout=60)
        api.set_provider_and_wait(provider, f"backend-{index}")
        api.get_client(f"backend-{index}").add_handler(
            ProviderEvent.PROVIDER_CONFIGURATION_CHANGED, handler(index, provider)
        )
        providers.append(provider)
    print("ready", flush=True)
    threading.Event().wait()


def _at_version_2(relay: Relay) -> bool:
    version: int = relay.readyz()["environments"].get("production", {}).get("version", 0)
    return version >= 2


def main() -> None:
    count = int(os.environ.get("BACKENDS", "20"))
    relay_count = int(os.environ.get("RELAYS", "2"))
    toggles = int(os.environ.get("TOGGLES", "100"))
    with tempfile.TemporaryDirectory(prefix="vane-bench-provider-") as tmp, Cleanup() as cleanup:
        tmp_path = Path(tmp)
        log("starting the control plane and relays")
        cp = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
        cleanup.add(cp.process)
        relays = [
            start_relay(cp.url, cp.keys["relay"], tmp_path / f"relay{i}")
            for i in range(relay_count)
        ]
        for relay in relays:
            cleanup.add(relay.process)
        key = cp.api("POST", "/keys", {"kind": "server", "environment": "production"}).json()["key"]
        cp.api("POST", "/flags", {"key": FLAG, "clientSide": False})
        for relay in relays:
            eventually(partial(_at_version_2, relay), timeout=60)
        urls = [relays[i % relay_count].url for i in range(count)]
        process = Process(
            [sys.executable, "-m", "tests.benchmarks.bench_provider", "backends", key, *urls]
        )
        cleanup.add(process)
        process.wait_for_line(r"^ready$", timeout=120)
        busy = wait_quiet()
        log(f"{count} providers on {relay_count} relays ready; {toggles} toggles")
        latencies: list[float] = []
        toggle_ms: list[float] = []
        rng = random.Random(5)
        enabled = False
        seen = 0
        with httpx.Client(
            base_url=f"{cp.url}/api/v1",
            headers={"Authorization": f"Bearer {cp.keys['management']}"},
            timeout=10,
        ) as client:
            for _ in range(toggles):
                enabled = not enabled
                sent = time.time()
                client.post(
                    f"/flags/{FLAG}/environments/production/toggle", json={"enabled": enabled}
                )
                answered = time.time()
                toggle_ms.append((answered - sent) * 1000)
                arrived: dict[int, float] = {}

                def all_arrived(
                    enabled: bool = enabled, arrived: dict[int, float] = arrived
                ) -> bool:
                    nonlocal seen
                    for line in process.lines[seen:]:
                        seen += 1
                        if not line.startswith("{"):
                            continue
                        change = json.loads(line)
                        if change["value"] is enabled:
                            arrived.setdefault(change["backend"], change["at"])
                    return len(arrived) == count

                eventually(all_arrived, timeout=10, what="every provider has the toggle")
                latencies += [(at - answered) * 1000 for at in arrived.values()]
                time.sleep(rng.uniform(0.02, 0.1))
    spread = Spread.of(latencies)
    rows = [
        Row(
            f"toggle response → provider serving, {count} backends on {relay_count} relays",
            spread.text(),
            f"p99 < {TARGET_P99_MS:.0f} ms",
            "met" if spread.p99 < TARGET_P99_MS else "NOT met",
        ),
        Row("toggle API round trip", Spread.of(toggle_ms).text(), "", ""),
    ]
    notes = [
        f"{toggles} toggles, one at a time; {len(latencies)} arrivals. Machine busy before the "
        f"toggles: {busy:.0%}.",
        "Timestamps: the provider's PROVIDER_CONFIGURATION_CHANGED handler (wall clock, shared by "
        "both processes); negative values are real (a relay can apply a change before the "
        "control plane's response arrives).",
    ]
    print_table("Toggle → in-process provider (bench_provider)", rows, notes)


if __name__ == "__main__":
    if sys.argv[1:2] == ["backends"]:
        backends(sys.argv[3:], sys.argv[2])
    else:
        main()
