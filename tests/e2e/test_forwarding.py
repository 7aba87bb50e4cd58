"""Forwarding from a relay to the control plane never stalls on what the control plane refuses.

Real processes on loopback (issue #33): a batch over the control plane's body limit is split
until it passes, and a batch holding an event the control plane refuses is resent without it at
once, so every event a sender was answered 200 for is stored (or set aside with its reason).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_events import stored_ids
from tests.e2e.test_relays import ControlPlane, Relay, eventually, start_control_plane, start_relay
from tests.processes import wait_http_ok

pytestmark = pytest.mark.e2e

SMALL_BODY_LIMIT = "65536"  # the control plane's VANE_MAX_BODY_BYTES: keeps the test small


def rejected_lines(relay_dir: Path) -> list[dict[str, Any]]:
    path = relay_dir / "spool" / "rejected.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_oversized_spooled_batches_are_split_until_the_control_plane_takes_them(
    tmp_path: Path,
) -> None:
    database = f"sqlite:///{tmp_path / 'vane.db'}"
    limit = {"VANE_MAX_BODY_BYTES": SMALL_BODY_LIMIT}
    cp = start_control_plane(database, tmp_path, extra_env=limit)
    cp_port = int(cp.url.rsplit(":", 1)[1])
    keys = cp.keys
    relay = start_relay(cp.url, keys["relay"], tmp_path / "relay")
    try:
        wait_http_ok(f"{relay.url}/readyz")  # it knows the server key
        cp.process.stop(signal.SIGKILL)
        server = {"Authorization": f"Bearer {keys['server']}"}
        sent: set[str] = set()
        for request in range(3):  # 30 events of 15,000-character props: ~450 KB spooled
            batch: list[dict[str, Any]] = [
                {
                    "unit": f"u{request}-{i}",
                    "event": "viewed",
                    "eventId": f"big-{request}-{i}",
                    "props": {"blob": "x" * 15_000},
                }
                for i in range(10)
            ]
            answer = httpx.post(
                f"{relay.url}/api/v1/events", json={"events": batch}, headers=server
            )
            assert answer.status_code == 200, answer.text
            sent.update(e["eventId"] for e in batch)
        small = {"unit": "u-small", "event": "signup", "eventId": "small-1"}
        assert (
            httpx.post(f"{relay.url}/api/v1/track", json=small, headers=server).status_code == 200
        )
        sent.add("small-1")

        cp = start_control_plane(database, tmp_path, port=cp_port, keys=keys, extra_env=limit)
        eventually(
            lambda: set(stored_ids(cp)) >= sent,
            timeout=30,
            what=lambda: f"stored {len(set(stored_ids(cp)) & sent)} of {len(sent)}",
        )
        assert sorted(stored_ids(cp)) == sorted(sent)
        assert rejected_lines(tmp_path / "relay") == []
        eventually(lambda: relay.readyz()["spool"]["pendingEvents"] == 0, what="spool drained")
    finally:
        relay.process.stop()
        cp.process.stop()


def _relay_ready_with(relay: Relay, cp: ControlPlane) -> None:
    public = {"Authorization": f"Bearer {cp.keys['public']}"}

    def has_both() -> bool:
        page = httpx.post(
            f"{relay.url}/sdk/v1/experiments",
            json={"unit": "probe", "url": "/pricing", "expose": False},
            headers=public,
        )
        flag = httpx.post(
            f"{relay.url}/ofrep/v1/evaluate/flags",
            json={"context": {"targetingKey": "probe"}},
            headers=public,
        )
        return (
            page.status_code == 200
            and bool(page.json()["experiments"])
            and flag.status_code == 200
            and any(f["key"] == "checkout" for f in flag.json()["flags"])
        )

    eventually(has_both, what="the experiment and flag reached the relay")


def test_relay_made_exposures_never_get_legitimate_events_refused(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'vane.db'}"
    cp = start_control_plane(database, tmp_path)
    cp_port = int(cp.url.rsplit(":", 1)[1])
    keys = cp.keys
    relay = start_relay(cp.url, cp.keys["relay"], tmp_path / "relay")
    try:
        assert cp.api("POST", "/flags", {"key": "checkout"}).status_code == 201
        metric = {"name": "Orders", "event": "purchase", "aggregation": "count"}
        assert cp.api("POST", "/metrics", metric).status_code == 201
        assert cp.api("PUT", "/flags/checkout/metrics", {"metrics": ["orders"]}).status_code == 200
        created = cp.api(
            "POST",
            "/experiments",
            {
                "name": "Hero",
                "type": "cta",
                "selector": "#hero a",
                "url": "/pricing*",
                "variants": [
                    {"key": "control", "content": ""},
                    {"key": "bold", "content": "Start now"},
                ],
            },
        )
        assert created.status_code == 201, created.text
        _relay_ready_with(relay, cp)
        # spooled while the control plane is away, they go upstream in one batch together (as
        # on a busy relay, where every sender's events share the batches)
        cp.process.stop(signal.SIGKILL)
        public = {"Authorization": f"Bearer {cp.keys['public']}"}
        server = {"Authorization": f"Bearer {cp.keys['server']}"}
        purchases: set[str] = set()
        for round_ in range(6):
            # units the relay accepts but whose exposure ids ("exp:hero:<unit>",
            # "flagexp:checkout:<unit>:<variation>") would pass 200 characters, and a NUL
            long_unit = f"{round_:03d}" + "u" * 192  # 195 characters
            for unit in (long_unit, f"nul\x00{round_}", "k" * 250):
                httpx.post(
                    f"{relay.url}/ofrep/v1/evaluate/flags/checkout",
                    json={"context": {"targetingKey": unit}},
                    headers=public,
                )
            page = httpx.post(
                f"{relay.url}/sdk/v1/experiments",
                json={"unit": long_unit, "url": "/pricing"},
                headers=public,
            )
            assert page.status_code == 200, page.text
            batch = [
                {"unit": f"buyer-{round_}-{i}", "event": "purchase", "eventId": f"p{round_}-{i}"}
                for i in range(20)
            ]
            answer = httpx.post(
                f"{relay.url}/api/v1/events", json={"events": batch}, headers=server
            )
            assert answer.status_code == 200, answer.text
            purchases.update(e["eventId"] for e in batch)

        cp = start_control_plane(database, tmp_path, port=cp_port, keys=keys)
        eventually(
            lambda: set(stored_ids(cp)) >= purchases,
            timeout=30,
            what=lambda: f"stored {len(set(stored_ids(cp)) & purchases)} of {len(purchases)}",
        )
        set_aside = [e for line in rejected_lines(tmp_path / "relay") for e in line["events"]]
        assert [e for e in set_aside if e["event"] == "purchase"] == []
        # the long unit's exposures are stored, under ids that fit
        exposures = cp.api("GET", "/events?event=$exposure").json()["events"]
        assert any(len(e["unit"]) == 195 for e in exposures), exposures
        assert all(len(e["eventId"]) <= 200 for e in exposures)
    finally:
        relay.process.stop()
        cp.process.stop()
