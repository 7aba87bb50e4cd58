"""A kill switch that cannot die silently, tried against real processes on loopback.

Found from outside: one number flag of 1e20 stopped every change (kill switch included) from
reaching relays while writes answered 200 and every health signal said all was well; a deleted
environment and its revoked keys lived on at connected relays until they restarted.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_relays import (
    ControlPlane,
    Relay,
    eventually,
    serves,
    start_control_plane,
    start_relay,
)

pytestmark = pytest.mark.e2e

BIG = 100_000_000_000_000_000_000


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[ControlPlane, Relay, Path]]:
    database = tmp_path / "vane.db"
    cp = start_control_plane(f"sqlite:///{database}", tmp_path)
    relay = start_relay(cp.url, cp.keys["relay"], tmp_path / "relay")
    try:
        yield cp, relay, database
    finally:
        relay.process.stop()
        cp.process.stop()


def toggle(cp: ControlPlane, flag: str, enabled: bool, environment: str = "production") -> None:
    path = f"/flags/{flag}/environments/{environment}/toggle"
    response = cp.api("POST", path, {"enabled": enabled})
    assert response.status_code == 200, response.text


def behind_the_apis_back(database: Path, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Write to the control plane's database directly (data from before a bound existed)."""
    with sqlite3.connect(database, timeout=10) as connection:
        for statement, parameters in statements:
            connection.execute(statement, parameters)


def test_a_number_the_wire_cannot_carry_never_stops_the_kill_switch(
    stack: tuple[ControlPlane, Relay, Path],
) -> None:
    cp, relay, database = stack
    public = cp.keys["public"]
    assert cp.api("POST", "/flags", {"key": "kill"}).status_code == 201
    toggle(cp, "kill", True)
    eventually(serves(relay, public, "kill", True), what="kill on")

    # the reproduction: refused now, naming the field and the range
    big = {"key": "big", "type": "number", "variations": [{"value": BIG}, {"value": 1}]}
    refused = cp.api("POST", "/flags", big)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["details"][0]["field"] == "variations[0].value"
    toggle(cp, "kill", False)
    eventually(serves(relay, public, "kill", False), what="kill off after the refused flag")

    # such a value already in the database (written before the bound): left out and reported,
    # and the kill switch still reaches the relay
    small = {"key": "big", "type": "number", "variations": [{"value": 5}, {"value": 1}]}
    assert cp.api("POST", "/flags", small).status_code == 201
    toggle(cp, "big", True)
    eventually(serves(relay, public, "big", 5), what="big served")
    poisoned = json.dumps([{"idx": 0, "value": BIG, "name": "big"}, {"idx": 1, "value": 1}])
    behind_the_apis_back(
        database,
        ("UPDATE flags SET variations = ? WHERE key = 'big'", (poisoned,)),
        ("UPDATE environments SET snapshot_version = snapshot_version + 1", ()),
    )

    def reported() -> bool:
        body = httpx.get(f"{cp.url}/readyz", timeout=5).json()
        return "flags.big" in body["publishing"]["leftOut"].get("production", {})

    eventually(reported, what="the control plane reports the flag it left out")
    toggle(cp, "kill", True)
    eventually(serves(relay, public, "kill", True), what="kill on with a poisoned flag stored")
    assert relay.evaluate(public, "big").json()["value"] == 5  # the last version it was sent
    metrics = httpx.get(f"{cp.url}/metrics", timeout=5).text
    assert 'vane_publish_left_out_items{environment="production"} 1.0' in metrics
    ready = relay.readyz()["environments"]["production"]
    assert ready["versionsBehind"] == 0, ready


def test_a_relay_behind_upstream_says_so(tmp_path: Path) -> None:
    """Whatever the hub failed to send, the heartbeat names the version committed upstream."""
    database = tmp_path / "vane.db"
    cp = start_control_plane(
        f"sqlite:///{database}", tmp_path, extra_env={"VANE_RECONCILE_S": "3600"}
    )
    relay = start_relay(cp.url, cp.keys["relay"], tmp_path / "relay")
    try:
        eventually(lambda: relay.readyz()["ready"] is True, what="relay ready")
        served = relay.readyz()["environments"]["production"]["version"]
        # a commit this replica never published (its hub was not told, nor will it reconcile)
        behind_the_apis_back(
            database,
            ("UPDATE environments SET snapshot_version = snapshot_version + 2", ()),
        )

        def behind() -> bool:
            production = relay.readyz()["environments"]["production"]
            return bool(production["version"] == served and production["versionsBehind"] == 2)

        eventually(behind, what=lambda: f"versionsBehind reported: {relay.readyz()}")
    finally:
        relay.process.stop()
        cp.process.stop()


def test_a_deleted_environment_and_its_keys_leave_connected_relays_and_providers(
    stack: tuple[ControlPlane, Relay, Path],
) -> None:
    cp, relay, _database = stack
    created = cp.api("POST", "/environments", {"key": "qa", "copyFrom": "production"})
    assert created.status_code == 201, created.text
    public = cp.api("POST", "/keys", {"kind": "public", "environment": "qa"}).json()["key"]
    server = cp.api("POST", "/keys", {"kind": "server", "environment": "qa"}).json()["key"]
    assert cp.api("POST", "/flags", {"key": "kill"}).status_code == 201
    toggle(cp, "kill", True, "qa")
    eventually(serves(relay, public, "kill", True), what="qa served at the relay")

    streams: dict[str, list[str]] = {"relay": [], "control plane": []}
    ended: dict[str, threading.Event] = {name: threading.Event() for name in streams}

    def follow(name: str, url: str) -> None:
        try:
            with httpx.stream(
                "GET", url, headers={"Authorization": f"Bearer {server}"}, timeout=30
            ) as response:
                for line in response.iter_lines():
                    streams[name].append(line)
        except httpx.HTTPError as exc:
            streams[name].append(f"error: {exc!r}")
        finally:
            ended[name].set()

    readers = [
        threading.Thread(target=follow, args=(name, f"{url}/api/v1/snapshot/stream"), daemon=True)
        for name, url in (("relay", relay.url), ("control plane", cp.url))
    ]
    for reader in readers:
        reader.start()
    eventually(
        lambda: all(
            any(line.startswith("event: snapshot") for line in s) for s in streams.values()
        ),
        what=lambda: f"both provider streams opened: {streams}",
    )

    deleted = cp.api("DELETE", "/environments/qa?revokeKeys=true")
    assert deleted.status_code == 200, deleted.text

    def refused() -> bool:
        return relay.evaluate(public, "kill").status_code == 401

    eventually(refused, timeout=5, what="the revoked public key refused at the relay")
    events = httpx.post(
        f"{relay.url}/sdk/v1/events",
        json={"events": [{"unit": "u1", "event": "after-delete"}]},
        headers={"Authorization": f"Bearer {public}"},
        timeout=5,
    )
    assert events.status_code == 401, events.text
    assert "qa" not in relay.readyz()["environments"]
    for name, event in ended.items():
        assert event.wait(10), f"the {name}'s provider stream still open after the delete"
    production = relay.evaluate(cp.keys["public"], "kill")
    assert production.status_code == 200, production.text  # the rest is untouched


def test_props_the_spool_cannot_carry_are_refused_naming_the_field(
    stack: tuple[ControlPlane, Relay, Path],
) -> None:
    """A page's event with an integer past 64 bits in its props could not be spooled (msgpack)."""
    cp, relay, _database = stack
    eventually(lambda: relay.readyz()["ready"] is True, what="relay ready")

    def send(props: dict[str, Any], event_id: str) -> httpx.Response:
        return httpx.post(
            f"{relay.url}/sdk/v1/events",
            json={"events": [{"unit": "u1", "event": "big", "props": props, "eventId": event_id}]},
            headers={"Authorization": f"Bearer {cp.keys['public']}"},
            timeout=5,
        )

    refused = send({"n": [BIG]}, "e1")
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["details"][0]["field"] == "events[0].props"
    assert send({"n": 2**53 - 1, "s": "1234567890123456789"}, "e2").status_code == 200

    def stored() -> bool:
        found = cp.api("GET", "/events?event=big").json()
        return [e.get("eventId") for e in found["events"]] == ["browser:e2"]

    eventually(stored, what=lambda: f"stored: {cp.api('GET', '/events?event=big').text}")


def test_a_page_cannot_stall_a_relay_with_a_slow_regular_expression(
    stack: tuple[ControlPlane, Relay, Path],
) -> None:
    cp, relay, _database = stack
    assert cp.api("POST", "/flags", {"key": "regex"}).status_code == 201
    rules = {
        "rules": [
            {
                "clauses": [{"attribute": "email", "op": "matches", "values": ["^(a+)+$"]}],
                "variation": 1,
            }
        ]
    }
    assert cp.api("PUT", "/flags/regex/environments/production/rules", rules).status_code == 200
    toggle(cp, "regex", True)
    eventually(serves(relay, cp.keys["public"], "regex", True), what="the flag on")
    # 40 "a" then "!": hours for a backtracking engine. Each answer comes within the client's
    # timeout (5 s), and the relay's health check answers while the pages' requests are made.
    slow = {"targetingKey": "u", "email": "a" * 40 + "!"}
    with ThreadPoolExecutor(max_workers=4) as pool:
        asked = [pool.submit(relay.evaluate, cp.keys["public"], "regex", slow) for _ in range(8)]
        health = [httpx.get(f"{relay.url}/healthz", timeout=5) for _ in range(3)]
        answers = [future.result() for future in asked]
    assert [h.status_code for h in health] == [200, 200, 200]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json()["value"] is True  # no match: the fallthrough
    matching = relay.evaluate(cp.keys["public"], "regex", {"targetingKey": "u", "email": "aaa"})
    assert matching.json()["value"] is False  # the rule


@pytest.mark.parametrize("pattern", ["(a)\\1", "(?=a)b"])
def test_patterns_that_cannot_run_in_linear_time_are_refused_at_write(
    stack: tuple[ControlPlane, Relay, Path], pattern: str
) -> None:
    cp, _relay, _database = stack
    assert cp.api("POST", "/flags", {"key": "re"}).status_code in (201, 409)
    clause = {"attribute": "email", "op": "matches", "values": ["ok", pattern]}
    rules = {"rules": [{"clauses": [clause], "variation": 0}]}
    refused = cp.api("PUT", "/flags/re/environments/production/rules", rules)
    assert refused.status_code == 422, refused.text
    detail = refused.json()["error"]["details"][0]
    assert detail["field"] == "rules[0].clauses[0].values[1]"
    assert "RE2" in detail["message"]
    segment = cp.api("POST", "/segments", {"key": "re-seg", "rules": [{"clauses": [clause]}]})
    assert segment.status_code == 422, segment.text
    assert segment.json()["error"]["details"][0]["field"] == "rules[0].clauses[0].values[1]"
