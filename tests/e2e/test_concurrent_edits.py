"""Two people editing the same flag at once, against a real control plane on SQLite and
PostgreSQL: with the same ``If-Match`` one wins and the other gets 412, and nothing of the
loser is written."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_relays import ControlPlane, start_control_plane

pytestmark = pytest.mark.e2e

ROUNDS = 8


@pytest.fixture
def control_plane(database_url: str, tmp_path: Path) -> Iterator[ControlPlane]:
    cp = start_control_plane(database_url, tmp_path)
    try:
        yield cp
    finally:
        cp.process.stop()


def test_two_writers_with_the_same_if_match_one_wins_one_gets_412(
    control_plane: ControlPlane,
) -> None:
    cp = control_plane
    assert cp.api("POST", "/flags", {"key": "checkout", "name": "Checkout"}).status_code == 201
    headers = {"Authorization": f"Bearer {cp.keys['management']}"}
    url = f"{cp.url}/api/v1/flags/checkout"

    def patch(name: str, version: str) -> httpx.Response:
        return httpx.patch(
            url, json={"name": name}, headers={**headers, "If-Match": version}, timeout=30
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        for round_ in range(ROUNDS):
            read = cp.api("GET", "/flags/checkout")
            version = read.headers["ETag"]
            assert version == f'"{read.json()["version"]}"'
            names = (f"alice-{round_}", f"bob-{round_}")
            answers = list(pool.map(patch, names, [version, version]))
            statuses = sorted(a.status_code for a in answers)
            assert statuses == [200, 412], [a.text for a in answers]
            winner = next(a for a in answers if a.status_code == 200)
            loser = next(a for a in answers if a.status_code == 412)
            won = winner.json()
            assert winner.headers["ETag"] == f'"{won["version"]}"'
            error = loser.json()["error"]
            assert error["code"] == "precondition_failed"
            assert error["currentVersion"] == won["version"]
            assert loser.headers["ETag"] == winner.headers["ETag"]
            now = cp.api("GET", "/flags/checkout").json()
            assert now["name"] == won["name"]
            assert now["version"] == won["version"]

    audit = cp.api("GET", "/flags/checkout/audit?limit=100").json()["entries"]
    updates = [e for e in audit if e["action"] == "flag.update"]
    assert len(updates) == ROUNDS  # the losers left no trace
    assert all(e["after"]["name"].split("-")[1] == str(i) for i, e in enumerate(reversed(updates)))
