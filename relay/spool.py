"""The relay's durable event spool: nothing acknowledged is ever lost, nothing is sent twice.

Layout (one directory): segment files ``00000000000000000001.log`` … holding records, and a
``cursor`` file naming the first record not yet forwarded. A record is one accepted request's
events: ``len (4 bytes, big endian) | crc32 (4) | msgpack(list of event dicts)``.

- ``append`` returns only after the record is written and fsync'd, so a 200 to the sender means
  the events survive a crash of the relay (SIGKILL included). Concurrent appends share one fsync
  (group commit).
- A torn record at the end of the newest segment (the process died mid-write, so it was never
  acknowledged) is cut off at start-up.
- The forwarder reads whole records from the cursor and moves the cursor (written atomically)
  only after the control plane acknowledged them; every event carries an ``eventId`` from spool
  time, so a batch resent after a crash is counted once upstream.
- The spool is bounded in bytes: beyond ``max_bytes`` not yet forwarded, ``append`` raises
  ``SpoolFull`` (the caller answers 503 with Retry-After).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

logger = logging.getLogger("vane.relay.spool")

_HEADER = struct.Struct(">II")
_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[list[dict[str, Any]]] = msgspec.msgpack.Decoder(
    list[dict[str, Any]]
)
_cursor_codec = struct.Struct(">QQ")


class SpoolFull(Exception):
    """More than ``max_bytes`` are waiting to be forwarded."""


@dataclass(frozen=True, order=True, slots=True)
class Position:
    segment: int
    offset: int


@dataclass(frozen=True, slots=True)
class Batch:
    events: list[dict[str, Any]]
    end: Position
    bytes: int


def _fsync_dir(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


class Spool:
    def __init__(
        self, directory: Path, *, max_bytes: int = 256 << 20, segment_bytes: int = 16 << 20
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._cursor = self._read_cursor()
        self._segments = self._recover()
        if self._cursor.segment not in self._segments:
            self._cursor = Position(self._segments[0], 0) if self._segments else Position(1, 0)
        if not self._segments:
            self._segments = [self._cursor.segment]
            self._path(self._cursor.segment).touch()
        self._write_segment = self._segments[-1]
        self._write_offset = self._path(self._write_segment).stat().st_size
        self.pending_bytes, self.pending_events = self._measure()
        self._queue: list[tuple[bytes, int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._data = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self.appended_events = 0
        self.forwarded_events = 0

    # --- files ----------------------------------------------------------------------------------

    def _path(self, segment: int) -> Path:
        return self.directory / f"{segment:020d}.log"

    def _read_cursor(self) -> Position:
        try:
            segment, offset = _cursor_codec.unpack((self.directory / "cursor").read_bytes())
        except (OSError, struct.error):
            return Position(0, 0)
        return Position(segment, offset)

    def _recover(self) -> list[int]:
        """Existing segments, oldest first; a torn tail of the newest one is cut off."""
        segments = sorted(int(p.stem) for p in self.directory.glob("*.log") if p.stem.isdigit())
        for segment in segments:
            if segment < self._cursor.segment:
                self._path(segment).unlink(missing_ok=True)
        segments = [s for s in segments if s >= self._cursor.segment]
        if segments:
            path = self._path(segments[-1])
            good = self._scan(path.read_bytes())[1]
            if good < path.stat().st_size:
                logger.warning("cutting a torn record off %s at byte %d", path.name, good)
                with open(path, "r+b") as handle:
                    handle.truncate(good)
                    os.fsync(handle.fileno())
        return segments

    @staticmethod
    def _scan(data: bytes, start: int = 0) -> tuple[list[tuple[int, int, int]], int]:
        """(offset, end, event count) of each whole record from ``start``, and the end of the last."""
        records = []
        offset = start
        while offset + _HEADER.size <= len(data):
            length, crc = _HEADER.unpack_from(data, offset)
            end = offset + _HEADER.size + length
            if end > len(data):
                break
            payload = data[offset + _HEADER.size : end]
            if zlib.crc32(payload) != crc:
                break
            records.append((offset, end, len(_decoder.decode(payload))))
            offset = end
        return records, offset

    def _measure(self) -> tuple[int, int]:
        total_bytes = total_events = 0
        for segment in self._segments:
            start = self._cursor.offset if segment == self._cursor.segment else 0
            records, _ = self._scan(self._path(segment).read_bytes(), start)
            total_bytes += sum(end - offset for offset, end, _ in records)
            total_events += sum(count for _, _, count in records)
        return total_bytes, total_events

    # --- appending --------------------------------------------------------------------------------

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop())
        if self.pending_events:
            self._data.set()

    async def stop(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(BaseException):
                await self._writer

    async def append(self, events: list[dict[str, Any]]) -> None:
        """Durably add one request's events; returns after fsync. ``SpoolFull`` when over budget."""
        payload = _encoder.encode(events)
        record = _HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        queued = sum(len(r) for r, _, _ in self._queue)
        if self.pending_bytes + queued + len(record) > self.max_bytes:
            raise SpoolFull
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((record, len(events), future))
        self._wake.set()
        await future

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._queue = self._queue, []
            if not batch:
                continue
            try:
                await asyncio.to_thread(self._write, [record for record, _, _ in batch])
            except OSError as exc:
                for _, _, future in batch:
                    future.set_exception(exc)
                continue
            for record, count, future in batch:
                self.pending_bytes += len(record)
                self.pending_events += count
                self.appended_events += count
                future.set_result(None)
            self._data.set()

    def _write(self, records: list[bytes]) -> None:
        """Append records (rotating segments when full), then one fsync per touched file."""
        handle = open(self._path(self._write_segment), "ab")  # noqa: SIM115 - rotated below
        new_segment = False
        try:
            for record in records:
                if self._write_offset >= self.segment_bytes:
                    handle.flush()
                    os.fsync(handle.fileno())
                    handle.close()
                    self._write_segment += 1
                    self._segments.append(self._write_segment)
                    handle = open(self._path(self._write_segment), "ab")  # noqa: SIM115
                    self._write_offset = 0
                    new_segment = True
                handle.write(record)
                self._write_offset += len(record)
            handle.flush()
            os.fsync(handle.fileno())
        finally:
            handle.close()
        if new_segment:
            _fsync_dir(self.directory)  # a new segment's name must survive a crash too

    # --- forwarding -------------------------------------------------------------------------------

    async def wait_for_data(self, timeout: float) -> None:  # noqa: ASYNC109
        if self.pending_events:
            return
        self._data.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._data.wait(), timeout)

    @property
    def cursor(self) -> Position:
        return self._cursor

    def read(self, max_events: int, origin: Position | None = None) -> Batch:
        """Whole records from ``origin`` (default: the cursor), up to ``max_events`` (at least one
        record if any)."""
        events: list[dict[str, Any]] = []
        position = self._cursor if origin is None else origin
        size = 0
        for segment in [s for s in self._segments if s >= position.segment]:
            start = position.offset if segment == position.segment else 0
            data = self._path(segment).read_bytes()
            offset = start
            while offset + _HEADER.size <= len(data):
                length, crc = _HEADER.unpack_from(data, offset)
                end = offset + _HEADER.size + length
                if end > len(data):
                    break
                payload = data[offset + _HEADER.size : end]
                if zlib.crc32(payload) != crc:
                    break
                record = _decoder.decode(payload)
                if events and len(events) + len(record) > max_events:
                    return Batch(events, Position(segment, offset), size)
                events.extend(record)
                size += end - offset
                offset = end
            position = Position(segment, offset)
            if segment != self._write_segment and offset >= len(data):
                position = Position(segment + 1, 0)
        return Batch(events, position, size)

    def commit(self, batch: Batch) -> None:
        """The control plane has ``batch``: move the cursor past it, durably; drop old segments."""
        temporary = self.directory / "cursor.tmp"
        with open(temporary, "wb") as handle:
            handle.write(_cursor_codec.pack(batch.end.segment, batch.end.offset))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.directory / "cursor")
        _fsync_dir(self.directory)
        self._cursor = batch.end
        for segment in [s for s in self._segments if s < batch.end.segment]:
            self._path(segment).unlink(missing_ok=True)
            self._segments.remove(segment)
        self.pending_bytes -= batch.bytes
        self.pending_events -= len(batch.events)
        self.forwarded_events += len(batch.events)
