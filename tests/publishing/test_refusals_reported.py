"""What the control plane says when a relay refuses a version, and when a stored snapshot does not
compile (issue #33: a prerequisite cycle stored by two concurrent writes; relays refused it, the
control plane's ``/readyz`` said ok, ``vane_publish_failures_total`` stayed 0 and preview
evaluation answered 500).

The cycle is written straight into the database here (bypassing the services, which refuse it):
the state the race left behind before writes were serialised.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy import text

from control_plane.db.engine import make_sync_engine
from shared.wire import protocol as p
from shared.wire.snapshot import FlagSnapshot
from tests.conftest import Api
from tests.control_plane.test_flags import create
from tests.e2e.test_relays import eventually
from tests.publishing.test_stream import connect, hello, receive, snapshots


def failures(api: Api, environment: str) -> float:
    body = api.client.get("/metrics").text
    found = re.search(rf'vane_publish_failures_total{{environment="{environment}"}} (\S+)', body)
    return float(found.group(1)) if found else 0.0


def store_cycle(api: Api, first: str, second: str) -> None:
    """Make ``first`` and ``second`` each other's prerequisite in production, behind the API."""
    engine = make_sync_engine(api.database_url)
    try:
        with engine.begin() as connection:
            for key, other in ((first, second), (second, first)):
                connection.execute(
                    text(
                        "UPDATE flag_settings SET prerequisites = :p WHERE flag_id = "
                        "(SELECT id FROM flags WHERE key = :k) AND environment_id = "
                        "(SELECT id FROM environments WHERE key = 'production')"
                    ),
                    {"p": json.dumps([{"key": other, "variation": 0}]), "k": key},
                )
            # as a write does: the next publication compiles the environment afresh
            connection.execute(
                text("UPDATE environments SET snapshot_version = snapshot_version + 1")
            )
    finally:
        engine.dispose()


def next_production_flags(ws: Any) -> dict[str, FlagSnapshot]:
    """The flags of production as the next patch or snapshot of it leaves them (patch: those it
    names)."""
    while True:
        message = receive(ws)
        if isinstance(message, p.SnapshotMessage) and message.snapshot.environment == "production":
            return dict(message.snapshot.flags)
        if isinstance(message, p.Patch) and message.environment == "production":
            return dict(message.flags)


def test_a_relay_refusing_a_version_is_reported_by_the_control_plane(api: Api) -> None:
    with connect(api) as ws:
        hello(ws)
        snapshots(ws, 2)
        assert api.client.get("/readyz").json()["publishing"]["refusedBy"] == {}
        refusal = p.Refused(version=7, reason="flags.a.prerequisites[0]: prerequisite cycle")
        ws.send_bytes(p.encode(p.Ping(sent_at=1, refused={"production": refusal})))
        assert isinstance(p.decode_to_relay(ws.receive_bytes(timeout=10)), p.Pong | p.Ping)

        def reported() -> bool:
            return bool(api.client.get("/readyz").json()["publishing"]["refusedBy"])

        eventually(reported)
        ready = api.client.get("/readyz")
        assert ready.status_code == 200  # the relays' trouble: this replica stays in service
        publishing = ready.json()["publishing"]
        assert publishing["status"] == "degraded"
        assert publishing["refusedBy"] == {
            "production": {"test-relay": {"version": 7, "reason": refusal.reason}}
        }
        assert failures(api, "production") == 1
        assert 'vane_publish_refusing_relays{environment="production"} 1.0' in (
            api.client.get("/metrics").text
        )
        # said again with every heartbeat: counted once
        ws.send_bytes(p.encode(p.Ping(sent_at=2, refused={"production": refusal})))
        ws.send_bytes(p.encode(p.Ping(sent_at=3, refused={})))  # recovered

        def recovered() -> bool:
            return not api.client.get("/readyz").json()["publishing"]["refusedBy"]

        eventually(recovered)
        assert failures(api, "production") == 1
        assert api.client.get("/readyz").json()["status"] == "ready"


def test_a_stored_cycle_is_left_out_the_kill_switch_still_goes_and_preview_answers_422(
    api: Api,
) -> None:
    """A cycle written behind the API never reaches relays, and never holds the rest back: the
    item relays would refuse is left out (they keep the version they were sent), reported and
    counted; a toggle of another flag is published at once."""
    for key in ("rx1", "rx2", "kill"):
        create(api, {"key": key})
    with connect(api) as ws:
        hello(ws)
        snapshots(ws, 2)
        store_cycle(api, "rx1", "rx2")
        toggled = api.post("/flags/kill/environments/production/toggle", {"enabled": True})
        assert toggled.status_code == 200

        # the kill switch goes out, and what goes out holds no cycle
        flags: dict[str, FlagSnapshot] = {}
        while "kill" not in flags:
            flags = next_production_flags(ws)
        assert flags["kill"].enabled is True
        assert not ("rx1" in flags and "rx2" in flags and flags["rx1"].prerequisites)

        def left_out() -> dict[str, str]:
            ready = api.client.get("/readyz").json()
            return ready["publishing"].get("leftOut", {}).get("production", {})  # type: ignore[no-any-return]

        eventually(lambda: any("cycle" in why for why in left_out().values()))
        ready = api.client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["status"] == "degraded"
        assert "production" not in ready.json()["publishing"]["failing"]
        assert failures(api, "production") >= 1
        preview = api.post(
            "/flags/kill/environments/production/evaluate", {"context": {"targetingKey": "u"}}
        )
        assert preview.status_code == 422, preview.text
        assert "cycle" in preview.text

        # removing the cycle publishes both flags again, and nothing is left out
        engine = make_sync_engine(api.database_url)
        try:
            with engine.begin() as connection:
                connection.execute(text("UPDATE flag_settings SET prerequisites = '[]'"))
        finally:
            engine.dispose()
        assert api.post("/flags/kill/environments/production/toggle", {"enabled": False})
        flags = {}
        while "kill" not in flags:
            flags = next_production_flags(ws)
        assert flags["kill"].enabled is False
        assert all(not flag.prerequisites for flag in flags.values())
