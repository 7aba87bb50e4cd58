"""The relay's sync client under faults: long outages, lagging replicas, scope changes, failover.

The upstream here is a websocket server speaking the relay protocol (``shared.wire.protocol``)
from a script, so a test can make it do what a faulty control plane does: lag behind, drop an
environment, vanish. What the relay then serves is read over its own HTTP API.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import pytest
from websockets.asyncio.server import Server, ServerConnection, serve

from relay.persistence import SnapshotFiles
from relay.sync import SyncClient
from shared.backoff import Backoff, backoff_delay
from shared.keys import hash_token
from shared.wire import protocol as p
from shared.wire.protocol import Access
from shared.wire.snapshot import Snapshot
from tests.chaos.cluster import report
from tests.processes import free_port
from tests.relay.helpers import (
    ENV,
    OTHER_ENV_PUBLIC,
    PUBLIC,
    Relay,
    StreamDriver,
    auth,
    build_snapshot,
    make_relay,
    public_access,
)

pytestmark = pytest.mark.anyio

STAGING = "staging"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def staging_snapshot(version: int) -> tuple[Snapshot, Access]:
    snapshot = build_snapshot(version)
    snapshot = Snapshot(
        project=snapshot.project,
        environment=STAGING,
        version=version,
        flags=snapshot.flags,
        segments=snapshot.segments,
        generated_at=snapshot.generated_at,
    )
    access = Access(
        keys=(p.AccessKey(id="key_staging", kind="public", hash=hash_token(OTHER_ENV_PUBLIC)),)
    )
    return snapshot, access


class ScriptedUpstream:
    """A control plane on loopback that answers each connection with the next script."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.scripts: list[list[p.Message]] = []
        self.hellos: list[p.Hello] = []
        self._server: Server | None = None

    async def start(self) -> None:
        self._server = await serve(self._handle, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, socket: ServerConnection) -> None:
        hello = p.decode_to_control_plane(await socket.recv(decode=False))
        assert isinstance(hello, p.Hello)
        self.hellos.append(hello)
        script = self.scripts.pop(0) if self.scripts else []
        for message in script:
            await socket.send(p.encode(message))

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(0.3)
                await socket.send(p.encode(p.Ping(sent_at=0)))

        beating = asyncio.create_task(heartbeat())
        beating.add_done_callback(lambda task: task.cancelled() or task.exception())
        with contextlib.suppress(Exception):
            async for frame in socket:  # answer pings; hold the connection until closed
                message = p.decode_to_control_plane(frame if isinstance(frame, bytes) else b"")
                if isinstance(message, p.Hello):  # a relay asking to resync
                    self.hellos.append(message)
                if isinstance(message, p.Ping):
                    await socket.send(p.encode(p.Pong(sent_at=message.sent_at)))
        beating.cancel()


def welcome(*environments: str) -> p.Welcome:
    return p.Welcome(environments=environments, heartbeat_ms=1000)


def full(version: int, **kwargs: Any) -> p.SnapshotMessage:
    return p.SnapshotMessage(snapshot=build_snapshot(version, **kwargs), access=public_access())


async def eventually(check: Any, within_s: float = 10.0) -> None:
    for _ in range(int(within_s * 100)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def served_dark_mode(relay: Relay, token: str = PUBLIC) -> tuple[int, Any]:
    async with relay.client() as client:
        response = await client.post(
            "/ofrep/v1/evaluate/flags/dark-mode",
            json={"context": {"targetingKey": "someone"}},
            headers=auth(token),
        )
    body = response.json()
    return response.status_code, body.get("metadata", {}).get("version")


@contextlib.asynccontextmanager
async def syncing(
    relay: Relay, data_dir: Path, *upstreams: str, **kwargs: Any
) -> AsyncIterator[SyncClient]:
    settings = relay.settings.__class__(
        upstream=upstreams[0],
        upstreams=upstreams,
        key="rsk_live_test",
        relay_id="relay-test",
        backoff_cap_s=0.2,
    )
    files = SnapshotFiles(data_dir)
    files.start()
    client = SyncClient(settings, relay.store, files, **kwargs)
    task = asyncio.create_task(client.run())
    try:
        yield client
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await files.stop()


# --------------------------------------------------------------------- finding 1: long outages


def test_the_backoff_stays_within_its_cap_for_any_number_of_failures() -> None:
    # 0.1 * 2**1024 raises OverflowError: the old loop died there after a few hours
    delays = [backoff_delay(n, base=0.1, cap=10.0) for n in range(1, 5001)]
    assert all(0.0 <= d <= 10.0 for d in delays)
    assert max(delays) > 5.0  # it does reach the cap's range: jittered, not stuck small
    backoff = Backoff(base=0.1, cap=10.0)
    assert [backoff.failed() <= 10.0 for _ in range(3000)] == [True] * 3000
    assert backoff.failed(at_least=42.0) == 42.0  # a server's Retry-After is honoured


@pytest.mark.chaos
async def test_the_relay_still_connects_after_2000_consecutive_failures(tmp_path: Path) -> None:
    relay = make_relay(loaded=False)
    upstream = ScriptedUpstream(free_port())
    upstream.scripts.append([welcome(ENV), full(7)])
    slept: list[float] = []

    async def simulated_sleep(seconds: float) -> None:  # a simulated clock: no real waiting
        slept.append(seconds)
        if len(slept) == 2000:  # the control plane comes back after 2,000 failed rounds
            await upstream.start()
        await asyncio.sleep(0)

    try:
        async with syncing(
            relay,
            tmp_path,
            upstream.url,
            sleep=simulated_sleep,
            backoff=Backoff(base=0.1, cap=10.0),  # the default cap: hours of simulated outage
        ) as client:
            await eventually(lambda: relay.store.version(ENV) == 7, within_s=60)
            assert client.failures == 2000
            assert client.connects == 1
            assert relay.store.connected
            reconnected = relay.store.connected
    finally:
        await upstream.stop()
    report(
        "2,000 consecutive upstream failures (simulated clock)",
        failures=len(slept),
        simulated_outage_h=round(sum(slept) / 3600, 2),
        longest_wait_s=round(max(slept), 3),
        reconnected=reconnected,
    )
    assert all(0 <= s <= 10.0 for s in slept)  # capped all along
    assert sum(slept) > 2000 * 10.0 / 4  # and it did back off (full jitter averages cap/2)
    assert await served_dark_mode(relay) == (200, 7)


# ------------------------------------------------------------------- finding 2: no rollback


async def test_an_older_snapshot_from_a_lagging_replica_is_refused(tmp_path: Path) -> None:
    relay = make_relay(loaded=False)
    fresh = ScriptedUpstream(free_port())
    lagging = ScriptedUpstream(free_port())
    fresh.scripts.append([welcome(ENV), full(5, dark_mode_enabled=False)])
    # the lagging replica missed versions 4 and 5: it sends v3, then a patch 3 -> 4
    v3, v4 = build_snapshot(3), build_snapshot(4, dark_mode_enabled=True)
    lagging.scripts.append(
        [
            welcome(ENV),
            p.SnapshotMessage(snapshot=v3, access=public_access()),
            p.diff(v3, v4),
        ]
    )
    await fresh.start()
    async with syncing(relay, tmp_path, fresh.url, lagging.url) as client:
        await eventually(lambda: relay.store.version(ENV) == 5)
        assert await served_dark_mode(relay) == (200, 5)
        await lagging.start()
        await fresh.stop()  # the fresh replica dies; the relay fails over to the lagging one
        await eventually(lambda: len(lagging.hellos) == 1)
        assert lagging.hellos[0].versions == {ENV: 5}  # it says what it holds
        await eventually(lambda: client.refused == 2)  # the v3 snapshot and the 3 -> 4 patch
        assert await served_dark_mode(relay) == (200, 5)
        assert relay.store.versions_behind(ENV) == 0
    await lagging.stop()


async def test_a_patch_from_the_future_makes_the_relay_ask_for_what_it_lacks(
    tmp_path: Path,
) -> None:
    relay = make_relay(loaded=False)
    upstream = ScriptedUpstream(free_port())
    v5, v6, v7 = build_snapshot(5), build_snapshot(6), build_snapshot(7)
    upstream.scripts.append(
        [welcome(ENV), p.SnapshotMessage(snapshot=v5, access=public_access()), p.diff(v6, v7)]
    )
    await upstream.start()
    async with syncing(relay, tmp_path, upstream.url):
        await eventually(lambda: len(upstream.hellos) == 2 and relay.store.version(ENV) == 5)
        assert upstream.hellos[1].versions == {ENV: 5}  # "I hold 5": send me what I lack
        assert relay.store.versions_behind(ENV) == 2
        assert 'vane_relay_versions_behind{environment="production"} 2.0' in (
            relay.metrics.render().decode()
        )
        assert await served_dark_mode(relay) == (200, 5)  # the patch 6 -> 7 was not applied
    await upstream.stop()


# ------------------------------------------------------- finding 5: leaving a relay's scope


async def test_an_environment_removed_from_scope_leaves_keys_streams_and_disk(
    tmp_path: Path,
) -> None:
    relay = make_relay(loaded=False)
    upstream = ScriptedUpstream(free_port())
    staging, staging_access = staging_snapshot(2)
    upstream.scripts.append(
        [
            welcome(ENV, STAGING),
            full(3),
            p.SnapshotMessage(snapshot=staging, access=staging_access),
        ]
    )
    upstream.scripts.append([welcome(ENV)])  # the next connection no longer names staging
    await upstream.start()
    files = SnapshotFiles(tmp_path)
    async with syncing(relay, tmp_path, upstream.url):
        await eventually(lambda: relay.store.version(STAGING) == 2)
        await eventually(lambda: files.path_of(STAGING).exists())
        assert (await served_dark_mode(relay, OTHER_ENV_PUBLIC))[0] == 200
        # a browser holds an event stream on staging
        async with relay.client() as http:
            bulk = await http.post(
                "/ofrep/v1/evaluate/flags",
                json={"context": {"targetingKey": "u"}},
                headers=auth(OTHER_ENV_PUBLIC),
            )
        parts = urlsplit(bulk.json()["eventStreams"][0]["url"])
        stream = StreamDriver(relay.app, parts.path, parts.query)
        await stream.start()
        assert stream.status == 200
        await stream.read()
        # the control plane drops the connection; on reconnecting, staging is gone
        await upstream.stop()
        await upstream.start()
        await eventually(lambda: STAGING not in relay.store.states)
        assert (await served_dark_mode(relay, OTHER_ENV_PUBLIC))[0] == 401
        assert await stream.read(wait_s=2.0) == b""
        assert stream.finished
        await eventually(lambda: not files.path_of(STAGING).exists())
        assert await served_dark_mode(relay) == (200, 3)
    await upstream.stop()
    # a restarted relay does not serve it from disk again
    assert [saved.snapshot.environment for saved in SnapshotFiles(tmp_path).load_all()] == [ENV]


# ------------------------------------------------------------------ finding 7: failover


async def test_the_relay_fails_over_to_a_live_upstream_and_comes_back(tmp_path: Path) -> None:
    relay = make_relay(loaded=False)
    first = ScriptedUpstream(free_port())
    second = ScriptedUpstream(free_port())
    second.scripts.append([welcome(ENV), full(4)])
    first.scripts.append([welcome(ENV), full(6)])
    await second.start()  # the preferred (first) upstream is down at start
    async with syncing(relay, tmp_path, first.url, second.url) as client:
        await eventually(lambda: relay.store.version(ENV) == 4)
        assert client.upstream == second.url
        await first.start()
        await second.stop()  # the second dies: the relay goes back to the first
        await eventually(lambda: relay.store.version(ENV) == 6)
        assert client.upstream == first.url
        assert first.hellos[0].versions == {ENV: 4}
    await first.stop()


# ------------------------------------------------ patches saved as they came (a log, not rewrites)


def saved_version(files: SnapshotFiles) -> int:
    """The version in the snapshot file alone, without its log."""
    return int(msgspec.msgpack.decode(files.path_of(ENV).read_bytes())["snapshot"]["version"])


def toggle(version: int, enabled: bool) -> p.Patch:
    flag = build_snapshot(version, dark_mode_enabled=enabled).flags["dark-mode"]
    return p.Patch(
        environment=ENV, from_version=version - 1, version=version, flags={"dark-mode": flag}
    )


async def test_patches_are_appended_to_a_log_and_a_restart_serves_them(tmp_path: Path) -> None:
    relay = make_relay(loaded=False)
    upstream = ScriptedUpstream(free_port())
    upstream.scripts.append([welcome(ENV), full(3), toggle(4, False), toggle(5, True)])
    await upstream.start()
    files = SnapshotFiles(tmp_path)
    async with syncing(relay, tmp_path, upstream.url):
        await eventually(lambda: relay.store.version(ENV) == 5)
    await upstream.stop()  # (leaving ``syncing`` saved what was pending)
    # the snapshot file still holds version 3: each patch cost the disk the patch only
    assert saved_version(files) == 3
    assert files.log_of(ENV).stat().st_size > 0
    # a relay restarted while the control plane is away serves version 5 from disk
    (restored,) = SnapshotFiles(tmp_path).load_all()
    assert restored.snapshot.version == 5
    assert restored.snapshot.flags["dark-mode"].enabled is True
    assert restored.snapshot == p.apply_patch(
        p.apply_patch(build_snapshot(3), toggle(4, False)), toggle(5, True)
    )
    # a record torn by a crash while appending: what came before it stands
    log = files.log_of(ENV)
    log.write_bytes(log.read_bytes()[:-3])
    (torn,) = SnapshotFiles(tmp_path).load_all()
    assert torn.snapshot.version == 4
    assert torn.snapshot.flags["dark-mode"].enabled is False


async def test_a_full_snapshot_or_a_long_log_rewrites_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("relay.persistence.LOG_LIMIT", 2)
    relay = make_relay(loaded=False)
    upstream = ScriptedUpstream(free_port())
    upstream.scripts.append(
        [welcome(ENV), full(3), toggle(4, False), toggle(5, True), toggle(6, False)]
    )
    await upstream.start()
    files = SnapshotFiles(tmp_path)
    async with syncing(relay, tmp_path, upstream.url):
        await eventually(lambda: relay.store.version(ENV) == 6)
    await upstream.stop()
    assert saved_version(files) == 6  # three patches outgrew the log of two: written whole
    (restored,) = SnapshotFiles(tmp_path).load_all()
    assert restored.snapshot.version == 6
    assert restored.snapshot.flags["dark-mode"].enabled is False
