"""Real processes on loopback: control planes, relays, PostgreSQL and Redis.

What a user running Vane would see: a toggle reaching every relay, a relay that keeps serving
(and says it is stale) while the control plane is down and catches up when it returns, and two
control-plane replicas that hear each other through Redis.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REDIS_URL, require_redis
from tests.processes import VANE, Process, free_port, wait_http_ok

pytestmark = pytest.mark.e2e


@dataclass
class ControlPlane:
    process: Process
    url: str
    keys: dict[str, str]

    def api(self, method: str, path: str, body: Any = None) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.url}/api/v1{path}",
            json=body,
            headers={"Authorization": f"Bearer {self.keys['management']}"},
            timeout=10,
        )


@dataclass
class Relay:
    process: Process
    url: str

    def evaluate(
        self, public_key: str, flag: str, context: dict[str, Any] | None = None
    ) -> httpx.Response:
        return httpx.post(
            f"{self.url}/ofrep/v1/evaluate/flags/{flag}",
            json={"context": context or {"targetingKey": "user-1"}},
            headers={"Authorization": f"Bearer {public_key}"},
            timeout=5,
        )

    def readyz(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/readyz", timeout=5).json()  # type: ignore[no-any-return]


def start_control_plane(
    database_url: str,
    cwd: Path,
    *,
    port: int | None = None,
    redis_url: str | None = None,
    keys: dict[str, str] | None = None,
    extra_env: dict[str, str] | None = None,
) -> ControlPlane:
    port = port or free_port()
    env = {"VANE_DATABASE_URL": database_url, "VANE_HEARTBEAT_S": "1", "VANE_RECONCILE_S": "1"}
    env.update(extra_env or {})
    if redis_url:
        env["VANE_REDIS_URL"] = redis_url
    process = Process([*VANE, "control-plane", "--port", str(port)], env=env, cwd=cwd)
    url = f"http://127.0.0.1:{port}"
    if keys is None:
        keys = {
            kind: process.wait_for_line(rf"^\s+{kind}\s+({prefix}live_\S+)").group(1)
            for kind, prefix in (
                ("management", "vsk_"),
                ("relay", "rsk_"),
                ("public", "pk_"),
                ("server", "ssk_"),
            )
        }
    wait_http_ok(f"{url}/readyz")
    return ControlPlane(process, url, keys)


def start_relay(
    upstream: str,
    key: str,
    data_dir: Path,
    *,
    port: int | None = None,
    extra_env: dict[str, str] | None = None,
) -> Relay:
    port = port or free_port()
    process = Process(
        [
            *VANE,
            "relay",
            "--upstream",
            upstream,
            "--key",
            key,
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
        ],
        env={"VANE_RELAY_STALE_AFTER_S": "2", "VANE_RELAY_HEARTBEAT_S": "1", **(extra_env or {})},
    )
    relay = Relay(process, f"http://127.0.0.1:{port}")
    wait_http_ok(f"{relay.url}/healthz")
    return relay


def eventually(
    check: Callable[[], bool],
    timeout: float = 10,
    what: str | Callable[[], str] = "",
    every: float = 0.01,
) -> float:
    """Seconds until ``check()`` holds (polling every ``every`` s); fail after ``timeout``, saying
    ``what`` (called then, when it is a function: the state the test failed in).
    A check that computes experiment results polls slowly (``every=0.5``): a hundred results a
    second would keep the control plane from the ingest the test waits for."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s: {what() if callable(what) else what}")


def serves(relay: Relay, public_key: str, flag: str, value: Any) -> Callable[[], bool]:
    def check() -> bool:
        response = relay.evaluate(public_key, flag)
        return response.status_code == 200 and response.json()["value"] == value

    return check


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[ControlPlane, list[Relay]]]:
    cp = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
    relays = [start_relay(cp.url, cp.keys["relay"], tmp_path / f"relay{i}") for i in range(2)]
    try:
        yield cp, relays
    finally:
        for relay in relays:
            relay.process.stop()
        cp.process.stop()


def test_a_toggle_reaches_both_relays(stack: tuple[ControlPlane, list[Relay]]) -> None:
    cp, relays = stack
    public = cp.keys["public"]
    assert cp.api("POST", "/flags", {"key": "kill-switch"}).status_code == 201
    for relay in relays:
        eventually(serves(relay, public, "kill-switch", False), what="new flag served OFF")
        assert relay.evaluate(public, "kill-switch").json()["reason"] == "DISABLED"
    assert (
        cp.api(
            "POST", "/flags/kill-switch/environments/production/toggle", {"enabled": True}
        ).status_code
        == 200
    )
    for relay in relays:
        elapsed = eventually(
            serves(relay, public, "kill-switch", True), timeout=2, what="toggle on"
        )
        assert elapsed < 2
    cp.api("POST", "/flags/kill-switch/environments/production/toggle", {"enabled": False})
    for relay in relays:
        eventually(serves(relay, public, "kill-switch", False), timeout=2, what="toggle off")
    ready = relays[0].readyz()
    assert ready["ready"] is True
    assert ready["stale"] is False


def test_relay_serves_last_snapshot_while_control_plane_is_down(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'vane.db'}"
    cp = start_control_plane(database, tmp_path)
    port = int(cp.url.rsplit(":", 1)[1])
    public, relay_key = cp.keys["public"], cp.keys["relay"]
    relay = start_relay(cp.url, relay_key, tmp_path / "relay")
    relay_port = int(relay.url.rsplit(":", 1)[1])
    try:
        cp.api("POST", "/flags", {"key": "checkout"})
        cp.api("POST", "/flags/checkout/environments/production/toggle", {"enabled": True})
        eventually(serves(relay, public, "checkout", True), what="relay caught up")
        time.sleep(0.5)  # the snapshot is written to disk in the background
        cp.process.stop(signal.SIGKILL)
        relay.process.stop()
        relay = start_relay(cp.url, relay_key, tmp_path / "relay", port=relay_port)
        eventually(lambda: relay.readyz()["ready"] is True, what="restarted relay ready from disk")
        assert relay.readyz()["stale"] is True
        assert relay.readyz()["connected"] is False
        assert relay.evaluate(public, "checkout").json()["value"] is True

        cp = start_control_plane(database, tmp_path, port=port, keys=cp.keys)
        eventually(lambda: relay.readyz()["stale"] is False, timeout=20, what="relay reconnected")
        cp.api("POST", "/flags/checkout/environments/production/toggle", {"enabled": False})
        eventually(
            serves(relay, public, "checkout", False), timeout=5, what="relay caught up after return"
        )
    finally:
        relay.process.stop()
        cp.process.stop()


@pytest.mark.postgres
@pytest.mark.redis
def test_two_replicas_share_postgres_and_hear_each_other_through_redis(
    tmp_path: Path, postgres_url: str
) -> None:
    require_redis()
    database = postgres_url
    # no reconcile within the test: a change made on one replica reaches the other's relays
    # only as the change published on Redis
    slow = {"VANE_RECONCILE_S": "600"}
    first = start_control_plane(database, tmp_path, redis_url=REDIS_URL, extra_env=slow)
    second = start_control_plane(
        database, tmp_path, redis_url=REDIS_URL, keys=first.keys, extra_env=slow
    )
    public = first.keys["public"]
    relays = [
        start_relay(first.url, first.keys["relay"], tmp_path / "a"),
        start_relay(second.url, first.keys["relay"], tmp_path / "b"),
    ]
    try:
        assert first.api("POST", "/flags", {"key": "shared"}).status_code == 201
        for relay in relays:
            eventually(
                serves(relay, public, "shared", False), what="new flag on both replicas' relays"
            )
        first.api("POST", "/flags/shared/environments/production/toggle", {"enabled": True})
        for relay in relays:
            eventually(
                serves(relay, public, "shared", True), timeout=3, what="change made on replica 1"
            )
        second.api("POST", "/flags/shared/environments/production/toggle", {"enabled": False})
        for relay in relays:
            eventually(
                serves(relay, public, "shared", False), timeout=3, what="change made on replica 2"
            )
    finally:
        for relay in relays:
            relay.process.stop()
        second.process.stop()
        first.process.stop()


def test_openfeature_python_sdk_resolves_flags_from_a_relay(
    stack: tuple[ControlPlane, list[Relay]],
) -> None:
    from openfeature import api as openfeature
    from openfeature.contrib.provider.ofrep import OFREPProvider
    from openfeature.evaluation_context import EvaluationContext

    cp, relays = stack
    cp.api(
        "POST",
        "/flags",
        {
            "key": "banner",
            "type": "string",
            "variations": [{"value": "blue", "name": "Blue"}, {"value": "green", "name": "Green"}],
        },
    )
    cp.api(
        "PUT",
        "/flags/banner/environments/production",
        {"enabled": True, "fallthrough": {"variation": 0}},
    )
    cp.api(
        "PUT",
        "/flags/banner/environments/production/rules",
        {
            "rules": [
                {
                    "clauses": [{"attribute": "country", "op": "in", "values": ["DE"]}],
                    "variation": 1,
                }
            ]
        },
    )
    public = cp.keys["public"]
    eventually(serves(relays[0], public, "banner", "blue"), what="banner served")
    openfeature.set_provider(
        OFREPProvider(relays[0].url, headers_factory=lambda: {"Authorization": f"Bearer {public}"}),
        domain="vane-e2e",
    )
    client = openfeature.get_client("vane-e2e")
    german = client.get_string_details(
        "banner", "default", EvaluationContext(targeting_key="u1", attributes={"country": "DE"})
    )
    assert (german.value, german.variant, german.reason) == ("green", "Green", "TARGETING_MATCH")
    other = client.get_string_details(
        "banner", "default", EvaluationContext(targeting_key="u2", attributes={"country": "US"})
    )
    assert (other.value, other.reason) == ("blue", "DEFAULT")
    missing = client.get_boolean_details(
        "no-such-flag", False, EvaluationContext(targeting_key="u1")
    )
    assert missing.value is False
    assert str(missing.error_code).endswith("FLAG_NOT_FOUND")
    openfeature.shutdown()


def _held(url: str, headers: dict[str, str]) -> dict[str, Any]:
    """A stream held open in a thread: ``status`` once it is open, ``clean`` once it ended
    (True: the server ended it; False: the connection broke, ``error`` says how)."""
    ended: dict[str, Any] = {}

    def hold() -> None:
        try:
            with httpx.stream("GET", url, headers=headers, timeout=None) as answer:
                ended["status"] = answer.status_code
                for _ in answer.iter_bytes():
                    pass
            ended["clean"] = True
        except httpx.HTTPError as exc:
            ended["clean"] = False
            ended["error"] = repr(exc)

    ended["thread"] = threading.Thread(target=hold, daemon=True)
    ended["thread"].start()
    eventually(lambda: "status" in ended, what="the stream is open")
    return ended


def test_a_relay_asked_to_stop_ends_its_open_streams_first(tmp_path: Path) -> None:
    """Issue #35: a relay holding an open stream (a page's live flags, a provider's feed) waited
    out its grace period before stopping, so clients could not reconnect elsewhere meanwhile.
    Asked to stop, it ends every stream itself (the client reads a clean end, not a broken
    connection), shuts down as usual and never falls back to leaving without its shutdown."""
    cp = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
    relay = start_relay(cp.url, cp.keys["relay"], tmp_path / "relay")
    try:
        assert cp.api("POST", "/flags", {"key": "f"}).status_code == 201
        headers = {"Authorization": f"Bearer {cp.keys['public']}", "Origin": "https://a.example"}
        bulk = httpx.post(
            f"{relay.url}/ofrep/v1/evaluate/flags",
            json={"context": {"targetingKey": "u"}},
            headers=headers,
            timeout=10,
        )
        [stream] = bulk.json()["eventStreams"]
        ended = _held(stream["url"], {"Origin": "https://a.example"})
        assert relay.process.stop() == 0
        ended["thread"].join(timeout=30)
        assert ended.get("clean") is True, ended
        assert "did not stop within" not in relay.process.output
    finally:
        relay.process.stop()
        cp.process.stop()


def test_a_control_plane_asked_to_stop_ends_its_feeds_and_relay_streams_first(
    tmp_path: Path,
) -> None:
    """Issue #35, the control plane's side: with a provider's feed open and a relay connected,
    a stop ended neither, and the process was still there 20 s later. Asked to stop, it ends the
    feed (a clean end) and closes the relay's stream (the relay reconnects, to another replica
    where there is one), and stops as usual."""
    cp = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
    relay = start_relay(cp.url, cp.keys["relay"], tmp_path / "relay")
    try:
        assert cp.api("POST", "/flags", {"key": "f"}).status_code == 201
        feed = _held(
            f"{cp.url}/api/v1/snapshot/stream",
            {"Authorization": f"Bearer {cp.keys['server']}"},
        )
        assert cp.process.stop() == 0
        feed["thread"].join(timeout=30)
        assert feed.get("clean") is True, feed
        assert "did not stop within" not in cp.process.output
        # the relay was told why its stream ended (1012: service restart), not left to find out
        relay.process.wait_for_line(r"1012|the control plane is stopping", timeout=30)
    finally:
        relay.process.stop()
        cp.process.stop()
