"""Open event streams never starve evaluations: a real relay holding more than 1,024 streams
(granian's default in-flight limit) still answers evaluations, refuses streams beyond its
maximum with 503 + Retry-After, counts them in /metrics, and reaches every one with a toggle."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.chaos.harness import Browsers
from tests.e2e.test_relays import eventually, start_control_plane
from tests.processes import VANE, Process, free_port, wait_http_ok

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STREAMS = 1100


def test_streams_beyond_granians_default_limit_do_not_starve_evaluations(tmp_path: Path) -> None:
    cp = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
    port = free_port()
    relay = Process(
        [
            *VANE,
            "relay",
            "--upstream",
            cp.url,
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "relay"),
            "--max-streams",
            str(STREAMS),
        ],
        env={"VANE_RELAY_KEY": cp.keys["relay"]},
    )
    url = f"http://127.0.0.1:{port}"
    public = {"Authorization": f"Bearer {cp.keys['public']}"}
    browsers = Browsers()
    try:
        assert cp.api("POST", "/flags", {"key": "banner"}).status_code == 201
        wait_http_ok(f"{url}/readyz")
        eventually(
            lambda: (
                httpx.post(
                    f"{url}/ofrep/v1/evaluate/flags/banner",
                    json={"context": {"targetingKey": "u"}},
                    headers=public,
                ).status_code
                == 200
            )
        )
        bulk = httpx.post(
            f"{url}/ofrep/v1/evaluate/flags",
            json={"context": {"targetingKey": "u"}},
            headers=public,
        )
        stream_url = bulk.json()["eventStreams"][0]["url"]

        browsers.open(stream_url, STREAMS)
        assert browsers.refused == []
        assert len(browsers.streams) == STREAMS

        evaluation = httpx.post(
            f"{url}/ofrep/v1/evaluate/flags",
            json={"context": {"targetingKey": "u"}},
            headers=public,
            timeout=10,
        )
        assert evaluation.status_code == 200  # it used to get no answer at all

        browsers.open(stream_url, 1)  # one more than the relay holds
        assert browsers.refused == [(503, "30")]
        metrics = httpx.get(f"{url}/metrics").text
        assert re.search(rf"^vane_relay_sse_streams {STREAMS}\.0$", metrics, re.M)

        toggled = cp.api("POST", "/flags/banner/environments/production/toggle", {"enabled": True})
        assert toggled.status_code == 200
        eventually(
            lambda: len(browsers.reached(b"id: %d" % version_of(url))) == STREAMS,
            timeout=20,
            what="the toggle on every stream",
        )
    finally:
        browsers.close()
        relay.stop()
        cp.process.stop()


def version_of(relay_url: str) -> int:
    return int(httpx.get(f"{relay_url}/readyz").json()["environments"]["production"]["version"])
