"""The durable spool: what was appended survives a reopen; torn tails are cut; bounds hold."""

from __future__ import annotations

import asyncio
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from relay.spool import Spool, SpoolFull


def events(start: int, count: int) -> list[dict[str, Any]]:
    return [
        {"unit": f"u{i}", "event": "e", "eventId": f"id-{i}"} for i in range(start, start + count)
    ]


def drain(spool: Spool, max_events: int = 1000) -> list[str]:
    seen: list[str] = []
    while True:
        batch = spool.read(max_events)
        if not batch.events:
            return seen
        seen.extend(e["eventId"] for e in batch.events)
        spool.commit(batch)


def test_appended_events_survive_a_reopen_and_are_read_once(tmp_path: Path) -> None:
    async def fill() -> None:
        spool = Spool(tmp_path, segment_bytes=2048)
        spool.start()
        await asyncio.gather(*(spool.append(events(i * 10, 10)) for i in range(30)))
        assert spool.pending_events == 300
        await spool.stop()

    asyncio.run(fill())
    reopened = Spool(tmp_path, segment_bytes=2048)
    assert reopened.pending_events == 300
    assert len(list(tmp_path.glob("*.log"))) > 1  # it rotated segments
    first = reopened.read(100)
    assert len(first.events) == 100
    reopened.commit(first)
    again = Spool(tmp_path, segment_bytes=2048)  # a crash after the commit
    rest = drain(again, 100)
    assert sorted(rest + [e["eventId"] for e in first.events]) == sorted(
        f"id-{i}" for i in range(300)
    )
    assert again.pending_events == 0
    assert again.pending_bytes == 0
    assert len(list(tmp_path.glob("*.log"))) == 1


def test_an_uncommitted_batch_is_read_again_after_a_crash(tmp_path: Path) -> None:
    async def fill() -> None:
        spool = Spool(tmp_path)
        spool.start()
        await spool.append(events(0, 5))
        await spool.stop()

    asyncio.run(fill())
    spool = Spool(tmp_path)
    batch = spool.read(1000)
    assert len(batch.events) == 5
    # no commit: the forward was not acknowledged
    assert [e["eventId"] for e in Spool(tmp_path).read(1000).events] == [
        e["eventId"] for e in batch.events
    ]


def test_a_torn_tail_is_cut_and_earlier_records_kept(tmp_path: Path) -> None:
    async def fill() -> None:
        spool = Spool(tmp_path)
        spool.start()
        await spool.append(events(0, 3))
        await spool.append(events(3, 3))
        await spool.stop()

    asyncio.run(fill())
    [segment] = list(tmp_path.glob("*.log"))
    data = segment.read_bytes()
    segment.write_bytes(data + data[: len(data) // 3])  # half of a record, never acknowledged
    spool = Spool(tmp_path)
    assert spool.pending_events == 6
    assert segment.stat().st_size == len(data)
    assert drain(spool) == [f"id-{i}" for i in range(6)]


def test_a_tail_whose_checksum_holds_but_does_not_decode_is_cut_too(tmp_path: Path) -> None:
    """Start-up and reading share one reader of the record format: a record that passes its
    checksum but is not a list of events ends the good part for both (start-up used to raise)."""

    async def fill() -> None:
        spool = Spool(tmp_path)
        spool.start()
        await spool.append(events(0, 2))
        await spool.stop()

    asyncio.run(fill())
    [segment] = list(tmp_path.glob("*.log"))
    good = segment.read_bytes()
    junk = b"\xc1not msgpack"
    segment.write_bytes(good + struct.pack(">II", len(junk), zlib.crc32(junk)) + junk)
    spool = Spool(tmp_path)
    assert spool.pending_events == 2
    assert segment.stat().st_size == len(good)
    assert drain(spool) == ["id-0", "id-1"]


def test_full_spool_refuses(tmp_path: Path) -> None:
    async def fill() -> None:
        spool = Spool(tmp_path, max_bytes=4000)
        spool.start()
        await spool.append(events(0, 20))
        accepted = 0
        for i in range(100):
            try:
                await spool.append(events(100 + i * 20, 20))
            except SpoolFull:
                break
            accepted += 1
        assert accepted < 99
        with pytest.raises(SpoolFull):
            await spool.append(events(5000, 20))
        batch = spool.read(1000)
        spool.commit(batch)
        await spool.append(events(1000, 20))  # room again once forwarded
        await spool.stop()

    asyncio.run(fill())


def test_reads_whole_records_up_to_the_limit(tmp_path: Path) -> None:
    async def fill() -> None:
        spool = Spool(tmp_path)
        spool.start()
        for i in range(5):
            await spool.append(events(i * 400, 400))
        await spool.stop()

    asyncio.run(fill())
    spool = Spool(tmp_path)
    sizes = []
    while (batch := spool.read(1000)).events:
        sizes.append(len(batch.events))
        spool.commit(batch)
    assert sizes == [800, 800, 400]
