"""Eight writers at once on SQLite, the embedded default (#35): a real control-plane process on a
SQLite file, eight clients creating flags and posting event batches at the same time while a
webhook subscribed to every change is being delivered. Every answer is a success, every flag and
every event is stored once, every change reaches the webhook, and the server's log never says
the database was locked or a delivery failed to record.

The database URL sets SQLite's busy timeout to half a second (``?timeout=0.5``; 10 s by default)
so that the failure shows in a few hundred writes: writers of one process must queue among
themselves, never wait on SQLite's busy timeout, whose waiters are not served in order and give
up when it runs out (#35 saw four 503s in 2,000 creations with the default 10 s)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_events import stored_ids
from tests.e2e.test_relays import ControlPlane, eventually, start_control_plane
from tests.webhooks.receiver import receiving

pytestmark = pytest.mark.e2e

WRITERS = 8
FLAGS_EACH = 40
BATCHES_EACH = 10  # 80 batches of events
BATCH = 20
SECRET = "whsec_sqlite_writers_0123456789"
FAST_WEBHOOKS = {
    "VANE_WEBHOOK_PRIVATE": "loopback",
    "VANE_WEBHOOK_POLL_S": "0.05",
    "VANE_WEBHOOK_TIMEOUT_S": "5",
}
# What a writer turned away by the database leaves in the log (the 503's warning, the
# dispatcher's error), and what SQLite itself says.
TROUBLE = ("database is locked", "database is unavailable", "failed to record", "Traceback")


def writer(cp: ControlPlane, n: int) -> list[httpx.Response]:
    """Writer ``n``: its flags and its event batches, interleaved, on one connection."""
    headers = {"Authorization": f"Bearer {cp.keys['management']}"}
    answers: list[httpx.Response] = []
    with httpx.Client(base_url=f"{cp.url}/api/v1", headers=headers, timeout=60) as client:
        for i in range(FLAGS_EACH):
            answers.append(client.post("/flags", json={"key": f"w{n}-flag-{i}"}))
            if i % (FLAGS_EACH // BATCHES_EACH) == 0:
                batch = i // (FLAGS_EACH // BATCHES_EACH)
                events = [
                    {"unit": f"u{n}-{j}", "event": "signup", "eventId": f"w{n}-b{batch}-e{j}"}
                    for j in range(BATCH)
                ]
                answers.append(client.post("/events", json={"events": events}))
    return answers


def flag_keys(cp: ControlPlane) -> list[str]:
    keys: list[str] = []
    cursor = None
    while True:
        path = "/flags?limit=100" + (f"&cursor={cursor}" if cursor else "")
        page: dict[str, Any] = cp.api("GET", path).json()
        keys.extend(f["key"] for f in page["flags"])
        cursor = page.get("nextCursor")
        if not cursor:
            return keys


def test_eight_concurrent_writers_on_sqlite_see_no_error(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'vane.db'}?timeout=0.5"
    cp = start_control_plane(database, tmp_path, extra_env=FAST_WEBHOOKS)
    try:
        with receiving(SECRET) as receiver:
            body = {"url": receiver.url, "events": ["flag.created"], "secret": SECRET}
            assert cp.api("POST", "/webhooks", body).status_code == 201
            with ThreadPoolExecutor(max_workers=WRITERS) as pool:
                answers = [
                    a for got in pool.map(writer, [cp] * WRITERS, range(WRITERS)) for a in got
                ]
            failed = [
                (a.request.url.path, a.status_code, a.text) for a in answers if a.status_code >= 300
            ]
            assert failed == [], f"{len(failed)} of {len(answers)} writes failed: {failed[:5]}"
            expected_flags = {f"w{n}-flag-{i}" for n in range(WRITERS) for i in range(FLAGS_EACH)}
            keys = flag_keys(cp)
            assert sorted(keys) == sorted(expected_flags)  # each once
            ingested = [
                (a.json()["accepted"], a.json()["duplicates"])
                for a in answers
                if a.request.url.path.endswith("/events")
            ]
            assert ingested == [(BATCH, 0)] * WRITERS * BATCHES_EACH
            sent = {
                f"w{n}-b{b}-e{j}"
                for n in range(WRITERS)
                for b in range(BATCHES_EACH)
                for j in range(BATCH)
            }
            ids = stored_ids(cp)
            assert sorted(ids) == sorted(sent)  # each once
            eventually(
                lambda: len(receiver.unique()) == len(expected_flags),
                timeout=60,
                what=lambda: f"{len(receiver.unique())} of {len(expected_flags)} deliveries",
            )
            delivered = {p["data"]["resource"]["key"] for p in receiver.unique().values()}
            assert delivered == expected_flags
            # what it logged while serving the writers (a task cut short by the stop signal may
            # log its cancelled rollback: that is the stop's, not the writers')
            served = list(cp.process.lines)
    finally:
        cp.process.stop()
    trouble = [line for line in served if any(t in line for t in TROUBLE)]
    assert trouble == [], "\n".join(trouble[:20])
