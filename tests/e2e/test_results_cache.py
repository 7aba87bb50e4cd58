"""Results cached by the events they read (#21): a repeat view reads no event, and whatever is
written through any replica shows in the next view, on every replica."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PostgresDatabases, unavailable
from tests.e2e.test_relays import ControlPlane, start_control_plane

pytestmark = pytest.mark.e2e


def experiment(cp: ControlPlane) -> str:
    assert (
        cp.api(
            "POST", "/metrics", {"name": "Revenue", "event": "purchase", "aggregation": "sum"}
        ).status_code
        == 201
    )
    created = cp.api(
        "POST", "/experiments", {"name": "Checkout", "type": "manual", "goal": "purchase"}
    )
    assert created.status_code == 201, created.text
    key = str(created.json()["key"])
    assert cp.api("PUT", f"/experiments/{key}/metrics", {"primary": "revenue"}).status_code == 200
    assert cp.api("POST", f"/experiments/{key}", {"status": "running"}).status_code == 200
    return key


def assign(cp: ControlPlane, key: str, units: list[str]) -> None:
    for unit in units:
        answer = cp.api("POST", f"/experiments/{key}/assign", {"unit": unit})
        assert answer.status_code == 200, answer.text


def track(cp: ControlPlane, unit: str, value: int) -> None:
    answer = cp.api("POST", "/track", {"unit": unit, "event": "purchase", "value": value})
    assert answer.status_code == 200, answer.text


def totals(cp: ControlPlane, key: str) -> tuple[int, int, float, int]:
    """(exposed, units with events, total revenue, last day's exposed in the time series)."""
    answer = cp.api("GET", f"/experiments/{key}")
    assert answer.status_code == 200, answer.text
    variants: list[dict[str, Any]] = answer.json()["results"]["variants"]
    exposed = sum(int(v["exposed"]) for v in variants)
    with_events = sum(int(v["unitsWithEvents"]) for v in variants)
    revenue = sum(float(v["rate"] or 0) * int(v["exposed"]) for v in variants)
    series = cp.api("GET", f"/experiments/{key}/timeseries")
    assert series.status_code == 200, series.text
    days = series.json()["days"]
    in_series = sum(int(v["exposed"]) for v in days[-1]["variants"]) if days else 0
    assert answer.json()["exposed"] == exposed  # the experiment's own count agrees
    return exposed, with_events, round(revenue), in_series


def test_a_repeat_view_reads_no_event_and_the_next_ingest_shows_at_once(tmp_path: Path) -> None:
    database = tmp_path / "vane.db"
    cp = start_control_plane(f"sqlite:///{database}", tmp_path)
    try:
        key = experiment(cp)
        assign(cp, key, ["a", "b", "c", "d"])
        track(cp, "a", 500)
        assert totals(cp, key) == (4, 1, 500, 4)
        # a row written behind the service's back (not through ingest) is not read by a repeat
        # view: the view comes from what the last one computed
        now = int(time.time() * 1000)
        with sqlite3.connect(database) as connection:
            project = connection.execute("SELECT id FROM projects").fetchone()[0]
            connection.execute(
                "INSERT INTO events (project_id, event_id, unit, event, value, ts, received_at,"
                " source) VALUES (?, 'behind', 'b', 'purchase', 70, ?, ?, 'server')",
                (project, now, now),
            )
        assert totals(cp, key) == (4, 1, 500, 4)
        # any write through the service moves the generation on: the next view reads it all
        track(cp, "c", 30)
        assert totals(cp, key) == (4, 3, 600, 4)
        assign(cp, key, ["e"])
        assert totals(cp, key) == (5, 3, 600, 5)
        # a repeated assignment (no new exposure) and a duplicate event write nothing new
        assign(cp, key, ["e"])
        assert totals(cp, key) == (5, 3, 600, 5)
    finally:
        cp.process.stop()


@pytest.mark.postgres
def test_a_write_through_one_replica_shows_in_the_next_view_of_another(
    tmp_path: Path, postgres_databases: PostgresDatabases | None
) -> None:
    if postgres_databases is None:
        unavailable("PostgreSQL")
    assert postgres_databases is not None
    database = postgres_databases.new()
    first = start_control_plane(database, tmp_path)
    second = start_control_plane(database, tmp_path, keys=first.keys)
    try:
        key = experiment(first)
        assign(first, key, ["a", "b"])
        track(first, "a", 100)
        assert totals(second, key) == (2, 1, 100, 2)
        assert totals(second, key) == (2, 1, 100, 2)  # cached on the second replica
        track(first, "b", 40)
        assert totals(second, key) == (2, 2, 140, 2)
        assign(first, key, ["c", "d"])
        assert totals(second, key) == (4, 2, 140, 4)
        track(second, "c", 1)
        assert totals(first, key) == (4, 3, 141, 4)
    finally:
        second.process.stop()
        first.process.stop()
        postgres_databases.drop(database)


def test_a_write_is_answered_and_published_even_when_the_generation_cannot_move(
    tmp_path: Path,
) -> None:
    """The generation moves on after the commit: if that fails, the committed write is still
    answered as a success and its change still published; only the results cache is behind."""
    database = tmp_path / "vane.db"
    cp = start_control_plane(f"sqlite:///{database}", tmp_path)
    try:
        assert cp.api("POST", "/flags", {"key": "gone-soon"}).status_code == 201
        assert cp.api("POST", "/flags/gone-soon/archive").status_code == 200
        with sqlite3.connect(database) as connection:
            connection.execute("DROP TABLE ingest_generation")
        answer = cp.api("POST", "/track", {"unit": "u1", "event": "purchase", "value": 5})
        assert answer.status_code == 200, answer.text
        assert [e["unit"] for e in cp.api("GET", "/events").json()["events"]] == ["u1"]
        deleted = cp.api("DELETE", "/flags/gone-soon")  # writes events: deletes its exposures
        assert deleted.status_code == 200, deleted.text
        assert cp.api("GET", "/flags/gone-soon").status_code == 404
    finally:
        cp.process.stop()
