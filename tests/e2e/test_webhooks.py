"""Scheduled changes and webhooks against real control-plane processes on loopback.

A scheduled toggle fires once with two replicas polling the same PostgreSQL (and the relays of
both serve it); a webhook receiver (a real HTTP server in the test) gets every change signed, a
retry after it answered 500, each delivery id once after de-duplication; a control plane killed
in the middle loses no delivery, and a change that fell due while it was down runs at start-up.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REDIS_URL, require_redis
from tests.e2e.test_relays import (
    ControlPlane,
    eventually,
    serves,
    start_control_plane,
    start_relay,
)
from tests.webhooks.receiver import Receiver, receiving

pytestmark = pytest.mark.e2e

SECRET = "whsec_e2e_0123456789abcdef"
FAST = {
    "VANE_WEBHOOK_PRIVATE": "loopback",
    "VANE_WEBHOOK_POLL_S": "0.1",
    "VANE_WEBHOOK_BACKOFF_S": "0.2",
    "VANE_WEBHOOK_BACKOFF_CAP_S": "0.5",
    "VANE_WEBHOOK_TIMEOUT_S": "2",
    "VANE_SCHEDULE_POLL_S": "0.1",
}


def at(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def ok(response: Any, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return response.json()  # type: ignore[no-any-return]


def hook(cp: ControlPlane, receiver: Receiver, events: list[str]) -> dict[str, Any]:
    body = {"url": receiver.url, "events": events, "secret": SECRET}
    return ok(cp.api("POST", "/webhooks", body), 201)


def deliveries(cp: ControlPlane, hook_id: str) -> list[dict[str, Any]]:
    return ok(cp.api("GET", f"/webhooks/{hook_id}/deliveries?limit=500"))["deliveries"]  # type: ignore[no-any-return]


@pytest.mark.postgres
@pytest.mark.redis
def test_a_scheduled_toggle_fires_once_with_two_replicas(tmp_path: Path, postgres_url: str) -> None:
    require_redis()
    database = postgres_url
    first = start_control_plane(database, tmp_path, redis_url=REDIS_URL, extra_env=FAST)
    second = start_control_plane(
        database, tmp_path, redis_url=REDIS_URL, keys=first.keys, extra_env=FAST
    )
    public = first.keys["public"]
    relays = [
        start_relay(first.url, first.keys["relay"], tmp_path / "a"),
        start_relay(second.url, first.keys["relay"], tmp_path / "b"),
    ]
    flags = [f"launch-{i}" for i in range(4)]
    try:
        with receiving(SECRET) as receiver:
            webhook = hook(first, receiver, ["flag.toggled"])
            for key in flags:
                ok(first.api("POST", "/flags", {"key": key}), 201)
            when = at(3)  # every change falls due at the same instant, both replicas polling
            for i, key in enumerate(flags):
                cp = (first, second)[i % 2]
                path = f"/flags/{key}/environments/production/schedule"
                ok(cp.api("POST", path, {"at": when, "enabled": True}), 201)
            for name, relay in zip("ab", relays, strict=True):
                for key in flags:
                    eventually(
                        serves(relay, public, key, True),
                        timeout=20,
                        what=partial(state, first, flags, f"{key} on at relay {name}"),
                    )
            for key in flags:
                path = f"/flags/{key}/environments/production/schedule"
                (change,) = ok(first.api("GET", path))["schedules"]
                assert change["status"] == "done"
                audit = ok(first.api("GET", f"/flags/{key}/audit"))["entries"]
                assert [e["action"] for e in audit].count("flag.toggle") == 1, audit
            eventually(lambda: len(receiver.unique()) == len(flags), what="one event per flag")
            sent = deliveries(first, webhook["id"])
            assert len(sent) == len(flags)
            assert sorted(d["data"]["resource"]["key"] for d in sent) == flags
    finally:
        for relay in relays:
            relay.process.stop()
        second.process.stop()
        first.process.stop()


def state(cp: ControlPlane, flags: list[str], headline: str) -> str:
    """``headline``, then what the control plane says of each flag and its scheduled change
    (for a failure)."""
    lines = [headline]
    for key in flags:
        path = f"/flags/{key}/environments/production"
        setting = cp.api("GET", f"/flags/{key}").json().get("environments", {}).get("production")
        changes = cp.api("GET", f"{path}/schedule").json().get("schedules")
        lines.append(f"{key}: {setting} schedules {changes}")
    return "\n".join(lines)


def make_changes(cp: ControlPlane) -> list[str]:
    """One of each kind of change a team makes; the webhook types they send, in order."""
    ok(cp.api("POST", "/flags", {"key": "checkout"}), 201)
    ok(cp.api("POST", "/flags/checkout/environments/production/toggle", {"enabled": True}))
    ok(cp.api("PUT", "/flags/checkout/environments/production", {"offVariation": 0}))
    ok(cp.api("POST", "/segments", {"key": "beta", "name": "Beta"}), 201)
    ok(cp.api("PATCH", "/segments/beta", {"name": "Beta testers"}))
    ok(cp.api("DELETE", "/segments/beta"))
    metric = ok(
        cp.api("POST", "/metrics", {"name": "Buys", "event": "buy", "aggregation": "count"}), 201
    )
    key = ok(cp.api("POST", "/keys", {"kind": "server", "environment": "staging"}), 201)
    ok(cp.api("DELETE", f"/keys/{key['id']}"))
    exp = ok(cp.api("POST", "/experiments", {"name": "Hero", "type": "manual", "goal": "buy"}), 201)
    ok(cp.api("POST", f"/experiments/{exp['id']}", {"status": "stopped"}))
    ok(cp.api("DELETE", f"/metrics/{metric['id']}"))
    return [
        "flag.created",
        "flag.toggled",
        "flag.updated",
        "segment.created",
        "segment.updated",
        "segment.deleted",
        "metric.created",
        "key.created",
        "key.revoked",
        "experiment.created",
        "experiment.status",
        "metric.deleted",
    ]


def test_a_receiver_gets_every_change_signed_retried_and_once_by_id(
    tmp_path: Path, database_url: str
) -> None:
    cp = start_control_plane(database_url, tmp_path, extra_env=FAST)
    try:
        with receiving(SECRET) as receiver:
            receiver.fail_next = 2
            webhook = hook(
                cp, receiver, ["flag.*", "segment.*", "metric.*", "key.*", "experiment.*"]
            )
            expected = make_changes(cp)
            try:
                eventually(lambda: len(receiver.unique()) == len(expected), timeout=30)
            except AssertionError:
                pytest.fail(f"got {receiver.types()}, {len(receiver.requests)} requests")
            got = receiver.verified()  # every request, retries included, is signed
            assert [r.status for r in got].count(500) == 2
            unique = receiver.unique()
            assert sorted(p["type"] for p in unique.values()) == sorted(expected)
            for failed in (r for r in got if r.status == 500):
                retried = [r for r in got if r.payload["id"] == failed.payload["id"]]
                statuses = [r.status for r in retried]  # both 500s may fall on one delivery
                assert statuses[-1] == 200
                assert set(statuses[:-1]) == {500}
            sent = deliveries(cp, webhook["id"])
            assert {d["id"] for d in sent} == set(unique)
            assert all(d["status"] == "delivered" for d in sent)
            assert sum(d["attempts"] for d in sent) == len(expected) + 2
            for payload in unique.values():
                assert set(payload) == {"id", "type", "createdAt", "data"}
                assert SECRET not in str(payload)
    finally:
        cp.process.stop()


def test_a_killed_control_plane_loses_no_delivery_and_runs_what_fell_due(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'vane.db'}"
    cp = start_control_plane(database, tmp_path, extra_env=FAST)
    port = int(cp.url.rsplit(":", 1)[1])
    with receiving(SECRET) as receiver:
        try:
            receiver.fail_all = True
            webhook = hook(cp, receiver, ["flag.*"])
            ok(cp.api("POST", "/flags", {"key": "a"}), 201)
            eventually(lambda: len(receiver.requests) > 0, what="a first attempt refused")
            ok(cp.api("POST", "/flags", {"key": "b"}), 201)
            path = "/flags/a/environments/production/schedule"
            change = ok(cp.api("POST", path, {"at": at(4), "enabled": True}), 201)
            cp.process.stop(signal.SIGKILL)  # events "b" and the schedule are only in the database
            receiver.fail_all = False
            time.sleep(4)  # the scheduled change falls due while no control plane runs
            restarted = datetime.now(UTC)
            cp = start_control_plane(database, tmp_path, port=port, keys=cp.keys, extra_env=FAST)
            eventually(lambda: len(receiver.unique()) == 4, timeout=30, what="every delivery")
            assert receiver.types() == sorted(
                ["flag.created", "flag.created", "flag.schedule.created", "flag.toggled"]
            )
            sent = deliveries(cp, webhook["id"])
            assert {d["id"] for d in sent} == set(receiver.unique())
            assert all(d["status"] == "delivered" for d in sent)
            done = ok(cp.api("GET", f"{path}/{change['id']}"))
            assert done["status"] == "done"
            assert datetime.fromisoformat(done["finishedAt"]) >= restarted
        finally:
            cp.process.stop()
