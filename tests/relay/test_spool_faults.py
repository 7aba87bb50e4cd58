"""The event spool under faults: a full disk, torn records, and no file I/O on the event loop.

A full disk is simulated where bytes reach the segment file (``relay.spool._write_all``): it
writes half the record, then fails with ``ENOSPC``, as a real full disk does mid-write.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import httpx
import pytest

import relay.spool
from relay.forwarder import Forwarder
from relay.prometheus import RelayMetrics
from relay.routes.compose import build_http_app
from relay.spool import Spool, SpoolFull
from relay.store import EnvironmentState, Store
from tests.chaos.harness import small_disk
from tests.e2e.test_relays import start_control_plane
from tests.relay.helpers import BASE, SERVER, build_snapshot, public_access, settings
from tests.relay.test_spool import drain, events


class Disk:
    """Switch the spool's disk between working and full."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        self.failed_writes = 0
        real = relay.spool._write_all

        def write(handle: BinaryIO, data: bytes) -> None:
            if self.full:
                self.failed_writes += 1
                handle.write(data[: len(data) // 2])  # a partial record reaches the file
                handle.flush()
                raise OSError(errno.ENOSPC, "No space left on device")
            real(handle, data)

        monkeypatch.setattr(relay.spool, "_write_all", write)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


def test_a_write_on_a_full_disk_leaves_nothing_and_later_events_flow(
    tmp_path: Path, disk: Disk
) -> None:
    async def scenario() -> None:
        spool = Spool(tmp_path)
        spool.start()
        await spool.append(events(0, 3))
        disk.full = True
        with pytest.raises(SpoolFull):
            await spool.append(events(3, 2))
        disk.full = False
        await spool.append(events(5, 4))
        assert spool.pending_events == 7
        assert spool.write_errors == 1
        await spool.stop()

    asyncio.run(scenario())
    assert disk.failed_writes == 1
    accepted = [f"id-{i}" for i in (0, 1, 2, 5, 6, 7, 8)]
    reopened = Spool(tmp_path)  # a restart sees exactly the accepted events
    assert reopened.pending_events == 7
    assert drain(reopened) == accepted
    assert drain(Spool(tmp_path)) == []  # and, once forwarded, never again


def relay_with_events(spool: Spool) -> httpx.AsyncClient:
    store = Store()
    store.swap(EnvironmentState.build(build_snapshot(), public_access()))
    relay_settings = settings()
    app = build_http_app(
        store,
        relay_settings,
        RelayMetrics(store),
        spool=spool,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)


def test_a_full_disk_answers_503_with_retry_after_and_loses_nothing_accepted(
    tmp_path: Path, disk: Disk
) -> None:
    answers: list[tuple[int, str | None]] = []
    sent: list[str] = []

    async def scenario() -> None:
        spool = Spool(tmp_path)
        spool.start()
        async with relay_with_events(spool) as client:
            for i in range(9):
                disk.full = i in (3, 4, 5)
                event_id = f"evt-{i}"
                response = await client.post(
                    "/api/v1/track",
                    json={"unit": f"u{i}", "event": "signup", "eventId": event_id},
                    headers={"Authorization": f"Bearer {SERVER}"},
                )
                answers.append((response.status_code, response.headers.get("retry-after")))
                if response.status_code == 200:
                    sent.append(event_id)
                else:
                    assert response.json()["error"]["code"] == "spool_full"
        await spool.stop()

    asyncio.run(scenario())
    assert [status for status, _ in answers] == [200, 200, 200, 503, 503, 503, 200, 200, 200]
    assert all(retry for status, retry in answers if status == 503)
    assert drain(Spool(tmp_path)) == sent  # every 200 kept, in order, once


@pytest.fixture
def fsyncs_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of threads that ran ``os.fsync`` while running an event loop."""
    import os

    offenders: list[str] = []
    real = os.fsync

    def fsync(fd: Any) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            offenders.append(threading.current_thread().name)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return offenders


def test_the_forwarder_never_fsyncs_on_the_event_loop(
    tmp_path: Path, fsyncs_on_the_loop: list[str]
) -> None:
    control_plane = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
    spool = Spool(tmp_path / "spool", segment_bytes=512)  # opening it (recovery) is start-up work
    try:

        async def scenario() -> None:
            spool.start()
            upstream = settings(upstream=control_plane.url, key=control_plane.keys["relay"])
            forwarder = Forwarder(upstream, spool)
            task = asyncio.create_task(forwarder.run())
            for i in range(20):
                await spool.append(events(i * 5, 5))
            for _ in range(3000):  # until forwarded (at most ~30 s)
                if not spool.pending_events:
                    break
                await asyncio.sleep(0.01)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await spool.stop()
            await forwarder.close()
            assert forwarder.accepted == 100
            assert spool.forwarded_events == 100

        asyncio.run(scenario())
    finally:
        control_plane.process.stop()
    assert fsyncs_on_the_loop == []


def rot(segment: Path) -> None:
    """Bit rot in the last byte: the record's checksum no longer matches."""
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF
    segment.write_bytes(bytes(data))


def test_the_forwarder_yields_when_pending_events_cannot_be_read(tmp_path: Path) -> None:
    """A record that cannot be read (damaged on disk under a running relay) must not make the
    forwarder spin: the event loop, and every request on it, would freeze."""
    ticks: list[int] = []
    stop = threading.Event()

    def run_relay_loop() -> None:
        async def relay_loop() -> None:
            spool = Spool(tmp_path)
            spool.start()
            await spool.append(events(0, 3))
            rot(tmp_path / "00000000000000000001.log")
            forwarder = Forwarder(settings(), spool)
            task = asyncio.create_task(forwarder.run())
            while not stop.is_set():  # the relay's other work: it must keep getting turns
                ticks.append(1)
                await asyncio.sleep(0.01)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await spool.stop()
            await forwarder.close()

        asyncio.run(relay_loop())

    thread = threading.Thread(target=run_relay_loop, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while len(ticks) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(timeout=10)
    assert len(ticks) >= 50, "the event loop froze"


@pytest.mark.parametrize("segment_bytes", [8192, 16 << 20], ids=["small-segments", "one-segment"])
def test_a_really_full_disk_refuses_appends_and_frees_itself_by_forwarding(
    tmp_path: Path, segment_bytes: int
) -> None:
    """On a real (tmpfs) disk of 64 KiB: appends fail with ENOSPC, yet forwarding still moves
    the cursor (no new file is needed for it) and frees the disk — old segments deleted, or the
    one segment larger than the disk emptied — and appends work again."""
    with small_disk(tmp_path / "disk", "64k") as mounted:
        if not mounted:
            pytest.skip("cannot mount a tmpfs here (needs root)")

        async def scenario() -> list[str]:
            spool = Spool(tmp_path / "disk", segment_bytes=segment_bytes)
            spool.start()
            accepted: list[str] = []

            async def fill() -> None:
                for i in range(10_000):
                    await spool.append(events(i, 1))
                    accepted.append(f"id-{i}")

            with pytest.raises(SpoolFull):
                await fill()
            assert spool.write_errors == 1
            forwarded: list[str] = []
            while batch := await spool.read_async(100):
                if not batch.events:
                    break
                forwarded += [e["eventId"] for e in batch.events]
                await spool.acknowledge(batch)
            assert forwarded == accepted
            await spool.append(events(20_000, 1))  # room again
            await spool.append(events(20_001, 300))  # and more than a little
            await spool.stop()
            return accepted

        accepted = asyncio.run(scenario())
        assert len(accepted) > 100
        assert drain(Spool(tmp_path / "disk")) == [f"id-{i}" for i in range(20_000, 20_301)]
