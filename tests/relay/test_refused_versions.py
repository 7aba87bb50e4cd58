"""A version a relay refuses (its snapshot does not compile): the relay says so, keeps serving the
last good one, asks for the full snapshot instead of the refused patch, and recovers with the
first good version, without a restart.

Found from outside (issue #33): a prerequisite cycle published to relays made them refuse every
later snapshot (1,500 log lines a second, replaying the same patch), while ``/readyz`` said
ready, the refused counters stayed 0 and the control plane heard nothing; a restart sat at the
old version refusing the same patch.

The upstream is a websocket server on loopback speaking the relay protocol from a script: it
answers a resync ``Hello`` the way the control plane does (the patch chain from the versions
named, the full snapshot of an environment not named).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

import msgspec
import pytest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from relay.persistence import SnapshotFiles
from relay.store import EnvironmentState
from shared.wire import protocol as p
from shared.wire.snapshot import Prerequisite, Snapshot
from tests.processes import free_port
from tests.relay.helpers import ENV, build_snapshot, make_relay, public_access
from tests.relay.test_sync_faults import eventually, served_dark_mode, syncing, welcome

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def with_cycle(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` where two flags are each other's prerequisite (what no relay can compile)."""
    flags = dict(snapshot.flags)
    first, second = sorted(key for key in flags if key != "dark-mode")[:2]
    flags[first] = msgspec.structs.replace(
        flags[first], prerequisites=(Prerequisite(key=second, variation=0),)
    )
    flags[second] = msgspec.structs.replace(
        flags[second], prerequisites=(Prerequisite(key=first, variation=0),)
    )
    return msgspec.structs.replace(snapshot, flags=flags)


class Upstream:
    """A control plane holding one environment's versions: sends ``script`` on connection, and
    answers each resync ``Hello`` with the patches from the version named, or the full snapshot
    of the newest version when the environment is not named. Keeps every ``Ping`` received."""

    def __init__(self, versions: dict[int, Snapshot]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.versions = versions
        self.newest = max(versions)
        self.hellos: list[p.Hello] = []
        self.pings: list[p.Ping] = []
        self.socket: ServerConnection | None = None
        self._server: Server | None = None

    async def start(self) -> None:
        self._server = await serve(self._handle, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def frames_for(self, held: int | None) -> list[p.Message]:
        if held == self.newest:
            return []
        if held in self.versions:
            return [
                p.diff(self.versions[v], self.versions[v + 1]) for v in range(held, self.newest)
            ]
        return [p.SnapshotMessage(snapshot=self.versions[self.newest], access=public_access())]

    async def publish(self, snapshot: Snapshot) -> None:
        """A new version: the patch from the previous one, as the hub sends it."""
        previous = self.versions[self.newest]
        self.versions[snapshot.version] = snapshot
        self.newest = snapshot.version
        assert self.socket is not None
        await self.socket.send(p.encode(p.diff(previous, snapshot)))

    async def _handle(self, socket: ServerConnection) -> None:
        self.socket = socket
        beating = asyncio.create_task(self._heartbeat(socket))
        try:
            with contextlib.suppress(ConnectionClosed):
                await self._serve(socket)
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await beating

    async def _heartbeat(self, socket: ServerConnection) -> None:
        """The control plane's heartbeats: without them the relay takes upstream for gone after
        three heartbeat periods and reconnects, which is not what these tests are about."""
        while True:
            await asyncio.sleep(0.3)
            await socket.send(p.encode(p.Ping(sent_at=time.time_ns() // 1_000_000)))

    async def _serve(self, socket: ServerConnection) -> None:
        async for frame in socket:
            message = p.decode_to_control_plane(frame if isinstance(frame, bytes) else b"")
            match message:
                case p.Hello(versions=versions):
                    if not self.hellos:
                        await socket.send(p.encode(welcome(ENV)))
                    self.hellos.append(message)
                    for answer in self.frames_for(versions.get(ENV)):
                        await socket.send(p.encode(answer))
                case p.Ping(sent_at=sent_at):
                    self.pings.append(message)
                    await socket.send(p.encode(p.Pong(sent_at=sent_at)))


async def test_a_refused_version_is_reported_and_a_good_one_recovers_without_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    relay = make_relay(loaded=False)
    v5, v6 = build_snapshot(5), with_cycle(build_snapshot(6))
    upstream = Upstream({5: v5})
    await upstream.start()
    caplog.set_level(logging.INFO, "vane.relay.sync")
    async with syncing(relay, tmp_path, upstream.url):
        await eventually(lambda: relay.store.version(ENV) == 5)
        await upstream.publish(v6)

        # it keeps serving v5, says why it is not ready, and tells the control plane
        await eventually(lambda: any(ping.refused for ping in upstream.pings))
        assert await served_dark_mode(relay) == (200, 5)
        async with relay.client() as client:
            ready = await client.get("/readyz")
            metrics = (await client.get("/metrics")).text
        assert ready.status_code == 503
        environment = ready.json()["environments"][ENV]
        assert environment["version"] == 5
        assert not environment["ready"]
        assert environment["refused"]["version"] == 6
        assert "cycle" in environment["refused"]["reason"]
        assert environment["refusedVersions"] == 1
        assert 'vane_relay_refused_versions_total{environment="production"} 1.0' in metrics
        assert 'vane_relay_refusing{environment="production"} 6.0' in metrics
        refused = next(ping.refused for ping in upstream.pings if ping.refused)
        assert refused[ENV].version == 6
        assert "cycle" in refused[ENV].reason

        # it asked for the whole snapshot, not the patch again, and got (and refused) it once
        await eventually(lambda: len(upstream.hellos) == 2)
        assert upstream.hellos[1].versions == {}
        await asyncio.sleep(0.5)  # room for a loop, if there were one
        assert len(upstream.hellos) == 2
        refusals = [r for r in caplog.records if "refusing version 6" in r.getMessage()]
        assert len(refusals) == 1, [r.getMessage() for r in caplog.records]

        # a later change, still on top of the bad version: refused too, still no replay
        await upstream.publish(with_cycle(build_snapshot(7)))
        await eventually(lambda: relay.store.refusing[ENV].version == 7)
        assert await served_dark_mode(relay) == (200, 5)

        # the bad data is removed upstream: the next version serves at once
        await upstream.publish(build_snapshot(8))
        await eventually(lambda: relay.store.version(ENV) == 8)
        assert await served_dark_mode(relay) == (200, 8)
        async with relay.client() as client:
            ready = await client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["environments"][ENV]["refused"] is None
        await eventually(lambda: upstream.pings[-1].refused == {})
    await upstream.stop()


async def test_a_restart_after_a_refusal_serves_the_last_good_version_and_recovers(
    tmp_path: Path,
) -> None:
    """Nothing refused is saved: a relay restarted while upstream still offers the patch chain
    through the bad version loads the good one from disk, asks for the whole snapshot when the
    chain does not compile, and serves the good version published since."""
    upstream = Upstream({5: build_snapshot(5)})
    await upstream.start()
    first = make_relay(loaded=False)
    async with syncing(first, tmp_path, upstream.url):
        await eventually(lambda: first.store.version(ENV) == 5)
        await upstream.publish(with_cycle(build_snapshot(6)))
        await eventually(lambda: ENV in first.store.refusing)
    upstream.versions[7] = build_snapshot(7)  # fixed while the relay was down
    upstream.newest = 7
    upstream.hellos.clear()
    restarted = make_relay(loaded=False)
    for saved in SnapshotFiles(tmp_path).load_all():
        restarted.store.swap(EnvironmentState.build(saved.snapshot, saved.access))
    assert restarted.store.version(ENV) == 5
    async with syncing(restarted, tmp_path, upstream.url):
        await eventually(lambda: restarted.store.version(ENV) == 7)
        assert upstream.hellos[0].versions == {ENV: 5}  # the chain 5 -> 6 -> 7 is offered
        assert upstream.hellos[1].versions == {}  # 5 -> 6 refused: the whole snapshot asked
        assert await served_dark_mode(restarted) == (200, 7)
        assert not restarted.store.refusing
    await upstream.stop()
