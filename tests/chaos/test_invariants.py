"""The two promises, tried as rules under a seeded random run (issue #33).

Two control-plane replicas on PostgreSQL and Redis, two relays each knowing both. A seeded random
run drives, at once:

- management writes sent in pairs to both replicas at the same moment: prerequisites and segment
  references that would close a cycle when both land, toggles, rules with regular expressions the
  API may or may not accept, strings with NUL characters;
- events of random sizes and shapes through both relays, from servers and pages, some hostile
  (NUL, units too long, props near 16 KiB, batches of many big events), and evaluations that make
  the relays record exposures of their own (long and odd targeting keys);
- one replica killed with SIGKILL in the middle and started again.

Whatever happened, at the end:

(a) every relay serves the control plane's live version of every environment, or its ``/readyz``
    says which environment it does not serve and why;
(b) every event any process answered 2xx is stored exactly once, or the relay that took it lists
    it as set aside with the reason (``rejected.jsonl``, counted in ``/readyz`` and ``/metrics``).

And no request was ever answered 5xx except 503 while a replica was away.

``VANE_INVARIANT_SEED`` picks the first seed (default 1), ``VANE_INVARIANT_SEEDS`` how many to run
(default 1 in the suite; run many locally).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import string
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.wire.events import BROWSER_ID_PREFIX
from tests.chaos.cluster import Cluster, RelayProcess, Replica, kill, report, until
from tests.conftest import REDIS_URL, require_redis

pytestmark = [pytest.mark.chaos, pytest.mark.e2e, pytest.mark.slow]

FIRST_SEED = int(os.environ.get("VANE_INVARIANT_SEED", "1"))
SEEDS = int(os.environ.get("VANE_INVARIANT_SEEDS", "1"))
FLAGS = [f"f{i}" for i in range(5)]
SEGMENTS = [f"s{i}" for i in range(4)]
MAX_BODY = 256 * 1024  # the control plane's body limit here: far below a spool batch of big events
REGEXES = [
    "^a+$",
    "[ab]*a[ab]{400}c",  # too much work for a relay's DFA
    "(x+x+)+y",
    ".{1000}x",
    "^[a-z]{2,8}@example\\.com$",
    "(a|b|c|d|e|f){50}",
]


@dataclass
class Seen:
    """What the run observed, across its threads."""

    acknowledged: dict[str, str] = field(default_factory=dict)  # stored id -> the relay's url
    server_errors: list[str] = field(default_factory=list)
    answers: dict[str, dict[int, int]] = field(default_factory=dict)  # what -> status -> count
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acked(self, stored_id: str, relay: str) -> None:
        with self.lock:
            self.acknowledged[stored_id] = relay

    def answered(self, what: str, response: httpx.Response, *, away: bool = False) -> None:
        with self.lock:
            counts = self.answers.setdefault(what, {})
            counts[response.status_code] = counts.get(response.status_code, 0) + 1
        if response.status_code >= 500 and not (away and response.status_code == 503):
            with self.lock:
                self.server_errors.append(f"{what}: {response.status_code} {response.text[:300]}")


@pytest.fixture
def cluster(tmp_path: Path, postgres_url: str) -> Iterator[Cluster]:
    require_redis()
    cluster = Cluster(tmp_path, postgres_url, REDIS_URL)
    try:
        yield cluster
    finally:
        cluster.close()


def random_text(rng: random.Random, length: int) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=length))


def hostile_unit(rng: random.Random) -> str:
    return rng.choice(
        [
            f"u{rng.randrange(300)}",
            f"u{rng.randrange(300)}",
            "x" * rng.choice([150, 195, 199, 200]),  # valid, but long
            "x" * rng.choice([201, 250, 1000]),  # too long
            "nul\x00unit",
            "é" * 190,
        ]
    )


def props(rng: random.Random) -> dict[str, Any] | None:
    # now and then over the 16 KiB of props an event may carry (its batch is refused)
    size = 16_500 if rng.random() < 0.01 else rng.choice([0, 0, 0, 10, 1000, 8000, 15_000])
    if size == 0:
        return None
    return {"blob": random_text(rng, size), "n": rng.randrange(10**6)}


# --- management writes ----------------------------------------------------------------------


def writes(
    cluster: Cluster, rng: random.Random, seen: Seen, live: Callable[[], list[Replica]]
) -> None:
    """Pairs of writes sent to both replicas at the same moment."""

    def send(replica: Replica, what: str, method: str, path: str, body: Any) -> None:
        with contextlib.suppress(httpx.HTTPError):
            seen.answered(what, cluster.api(replica, method, path, body), away=True)

    def prerequisites(a: str, b: str) -> tuple[str, str, Any]:
        path = f"/flags/{a}/environments/production"
        return "PUT", path, {"prerequisites": [{"key": b, "variation": 0}]}

    def segment_ref(a: str, b: str) -> tuple[str, str, Any]:
        rule = {"clauses": [{"op": "segmentMatch", "segment": b}]}
        return "PATCH", f"/segments/{a}", {"rules": [rule]}

    def regex_rule(a: str, _: str) -> tuple[str, str, Any]:
        clause = {"attribute": "email", "op": "matches", "values": rng.sample(REGEXES, 2) * 25}
        body = {"rules": [{"clauses": [clause], "variation": 0}]}
        return "PUT", f"/flags/{a}/environments/production/rules", body

    def nul_name(a: str, _: str) -> tuple[str, str, Any]:
        return "PATCH", f"/flags/{a}", {"name": "bad\x00name", "description": "d\x00"}

    def toggle(a: str, _: str) -> tuple[str, str, Any]:
        path = f"/flags/{a}/environments/production/toggle"
        return "POST", path, {"enabled": rng.random() < 0.5}

    for _ in range(rng.randrange(20, 30)):
        replicas = live()
        if not replicas:
            time.sleep(0.2)
            continue
        kind = rng.choice([prerequisites, prerequisites, segment_ref, regex_rule, nul_name, toggle])
        pool = SEGMENTS if kind is segment_ref else FLAGS
        a, b = rng.sample(pool, 2)
        first, second = kind(a, b), kind(b, a)  # the reverse edge: both landing is a cycle
        with ThreadPoolExecutor(2) as executor:
            executor.submit(send, replicas[0], kind.__name__, *first)
            executor.submit(send, replicas[-1], kind.__name__, *second)
        time.sleep(rng.uniform(0, 0.2))


# --- events ---------------------------------------------------------------------------------


def events(
    cluster: Cluster, rng: random.Random, seen: Seen, stop: threading.Event, tag: str
) -> None:
    """Batches from servers and pages, retried until acknowledged (or refused, 4xx) as clients
    do; evaluations that make the relays record exposures of their own."""
    n = 0
    with httpx.Client(timeout=10) as client:
        while not stop.is_set():
            relay = rng.choice(cluster.relays)
            what = rng.choice(["server", "page", "page", "evaluate", "assign"])
            if what in ("evaluate", "assign"):
                unit = hostile_unit(rng)
                with contextlib.suppress(httpx.HTTPError):
                    if what == "evaluate":
                        response = client.post(
                            f"{relay.url}/ofrep/v1/evaluate/flags",
                            json={
                                "context": {
                                    "targetingKey": unit,
                                    "email": "a" * rng.randrange(20_000),
                                }
                            },
                            headers={"Authorization": f"Bearer {cluster.keys['public']}"},
                        )
                    else:
                        response = client.post(
                            f"{relay.url}/sdk/v1/experiments?key={cluster.keys['public']}",
                            json={"unit": unit, "url": "https://shop.example/"},
                        )
                    seen.answered(what, response)
                continue
            batch = []
            for _ in range(rng.choice([1, 1, 5, 20, 90])):
                n += 1
                item: dict[str, Any] = {
                    "unit": hostile_unit(rng) if rng.random() < 0.02 else f"u{rng.randrange(300)}",
                    "event": rng.choice(["purchase", "view", "signup"]),
                    "eventId": f"{tag}-{n}",
                }
                if (p := props(rng)) is not None:
                    item["props"] = p
                if rng.random() < 0.3:
                    item["value"] = rng.randrange(1, 10_000)
                batch.append(item)
            for attempt in range(50):
                try:
                    if what == "server":
                        response = client.post(
                            f"{relay.url}/api/v1/events",
                            json={"events": batch},
                            headers={"Authorization": f"Bearer {cluster.keys['server']}"},
                        )
                    else:
                        response = client.post(
                            f"{relay.url}/sdk/v1/events?key={cluster.keys['public']}",
                            json={"events": batch},
                        )
                except httpx.HTTPError:
                    time.sleep(0.1)
                    continue
                seen.answered(f"{what} events", response, away=True)
                if response.status_code == 200:
                    prefix = "" if what == "server" else BROWSER_ID_PREFIX
                    for item in batch:
                        seen.acked(prefix + item["eventId"], relay.url)
                    break
                if response.status_code < 500 and response.status_code != 429:
                    break  # refused: nothing was acknowledged, nothing may be stored
                time.sleep(min(1.0, 0.05 * 2**attempt))
            time.sleep(rng.uniform(0, 0.05))


# --- the run --------------------------------------------------------------------------------


def set_aside(relay: RelayProcess) -> dict[str, str]:
    """The relay's set-aside events (``rejected.jsonl`` beside each spool): stored id -> reason."""
    found: dict[str, str] = {}
    for path in relay.data_dir.glob("spool*/rejected.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            for event in record["events"]:
                prefix = BROWSER_ID_PREFIX if event.get("source") == "browser" else ""
                found[prefix + str(event.get("eventId"))] = record["reason"]
    return found


@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + SEEDS))
def test_promises_hold_under_a_random_run(cluster: Cluster, seed: int) -> None:
    rng = random.Random(seed)
    seen = Seen()
    limits = {"VANE_MAX_BODY_BYTES": str(MAX_BODY)}
    cp1 = cluster.add_replica(extra_env=limits)
    cp2 = cluster.add_replica(extra_env=limits)
    for flag in FLAGS:
        assert cluster.api(cp1, "POST", "/flags", {"key": flag}).status_code == 201
    for segment in SEGMENTS:
        assert (
            cluster.api(cp1, "POST", "/segments", {"key": segment, "included": ["u1"]}).status_code
            == 201
        )
    # flags with metrics and a running page experiment: evaluations and page lists make the
    # relays record exposures of their own, for whatever unit a page names
    metric = {"key": "orders", "name": "Orders", "event": "purchase", "aggregation": "count"}
    assert cluster.api(cp1, "POST", "/metrics", metric).status_code == 201
    for flag in FLAGS:
        attached = cluster.api(cp1, "PUT", f"/flags/{flag}/metrics", {"metrics": ["orders"]})
        assert attached.status_code == 200
    variants = [{"key": "control", "content": ""}, {"key": "bold", "content": "New"}]
    experiment = {"name": "Headline", "type": "element", "selector": "h1", "variants": variants}
    assert cluster.api(cp1, "POST", "/experiments", experiment).status_code == 201
    cluster.add_relay([cp1.url, cp2.url])
    cluster.add_relay([cp2.url, cp1.url])
    away: set[str] = set()
    live = lambda: [r for r in (cp1, cp2) if r.name not in away]  # noqa: E731

    stop = threading.Event()
    senders = [
        threading.Thread(
            target=events, args=(cluster, random.Random(seed * 100 + i), seen, stop, f"s{seed}-{i}")
        )
        for i in range(2)
    ]
    for sender in senders:
        sender.start()
    try:
        writes(cluster, rng, seen, live)
        # the control plane away: one replica killed, then (half the time) the other too, so
        # that events pile up in the relays' spools and leave in batches far over its body limit
        victims = rng.sample([cp1, cp2], rng.choice([1, 2]))
        for victim in victims:
            away.add(victim.name)
            kill(victim.process)
            time.sleep(rng.uniform(0.5, 1.5))
        time.sleep(rng.uniform(1, 3))
        for victim in victims:
            victim.restart()
            away.discard(victim.name)
        writes(cluster, rng, seen, live)
    finally:
        stop.set()
        for sender in senders:
            sender.join(timeout=60)

    # a last kill switch: it must reach every relay that does not say it cannot serve production
    assert (
        cluster.api(
            cp2, "POST", "/flags/f0/environments/production/toggle", {"enabled": True}
        ).status_code
        == 200
    )
    check_versions(cluster, cp1)
    check_events(cluster, cp1, seen)
    assert seen.server_errors == []


def check_versions(cluster: Cluster, replica: Replica) -> None:
    """(a) the live version everywhere, or the relay says which environment it lacks and why."""
    live = {
        e["key"]: int(e["snapshotVersion"])
        for e in cluster.api(replica, "GET", "/environments").json()["environments"]
    }

    def settled() -> bool:
        for relay in cluster.relays:
            readyz = relay.readyz()
            for env, version in live.items():
                served = readyz["environments"].get(env, {})
                if served.get("version") == version:
                    continue
                if served.get("refused") and not readyz["ready"]:
                    continue  # says so, with its reason
                return False
        return True

    until(settled, 30, f"every relay serves {live} or says why not")


def check_events(cluster: Cluster, replica: Replica, seen: Seen) -> None:
    """(b) every acknowledged event stored exactly once, or set aside with its reason."""

    def drained() -> bool:
        return all(r.readyz()["spool"]["pendingEvents"] == 0 for r in cluster.relays)

    until(drained, 90, "the relays forwarded their spools")
    stored = cluster.stored_event_ids(replica)
    doubled = len(stored) - len(set(stored))
    aside: dict[str, str] = {}
    for relay in cluster.relays:
        aside.update(set_aside(relay))
    lost = sorted(set(seen.acknowledged) - set(stored) - set(aside))
    assert doubled == 0
    assert lost == [], (
        f"{len(lost)} of {len(seen.acknowledged)} acknowledged events lost: {lost[:5]}"
    )
    assert all(reason for reason in aside.values())
    splits = 0
    for relay in cluster.relays:
        forwarder = relay.readyz()["forwarder"]
        assert sum(forwarder["setAside"].values()) == len(set_aside(relay)), relay.name
        splits += forwarder["splits"]
    report(
        "invariants",
        acknowledged=len(seen.acknowledged),
        stored=len(stored),
        set_aside=len(aside),
        splits=splits,
        answers={what: dict(sorted(c.items())) for what, c in sorted(seen.answers.items())},
    )
