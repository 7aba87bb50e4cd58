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
- A write that fails (a full disk: ``ENOSPC``, or any I/O error) leaves nothing behind: the
  records of the failed group are cut off again (truncate + fsync), their senders get
  ``SpoolUnavailable`` (a ``SpoolFull``: 503 with Retry-After), and what was accepted before is
  untouched. If even the cut fails, the next write starts a new segment, and a reader meets the
  leftover bytes only at the end of an older segment, which it skips (counted in
  ``corrupt_bytes``, logged). A corrupt record in an older segment is skipped the same way.
- No file I/O on the event loop: writes with their fsync (group commit: one fsync per group of
  concurrent appends), reads and cursor commits run in a worker thread (``append``,
  ``read_async``, ``acknowledge``); the blocking ``read``/``commit`` are for tools and tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import time
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

logger = logging.getLogger("vane.relay.spool")

_HEADER = struct.Struct(">II")
_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[list[dict[str, Any]]] = msgspec.msgpack.Decoder(
    list[dict[str, Any]]
)
_cursor_codec = struct.Struct(">QQ")
_crc = struct.Struct(">I")


class SpoolFull(Exception):
    """More than ``max_bytes`` are waiting to be forwarded."""


class SpoolUnavailable(SpoolFull):
    """The disk refused the write (full, read-only, failing); nothing of it was kept."""


def _write_all(handle: BinaryIO, data: bytes) -> None:
    """Write ``data`` to the segment file (the one place bytes reach it; tests fail it here)."""
    handle.write(data)


@dataclass(frozen=True, order=True, slots=True)
class Position:
    segment: int
    offset: int


@dataclass(frozen=True, slots=True)
class Batch:
    events: list[dict[str, Any]]
    end: Position
    bytes: int


@dataclass(frozen=True, slots=True)
class _Frame:
    offset: int
    end: int
    events: list[dict[str, Any]]


def _frames(handle: BinaryIO, start: int, limit: int) -> Iterator[_Frame]:
    """The one reader of the record format: each whole, intact record of ``handle`` from
    ``start`` that ends by ``limit``, in order. It stops at the first record that is cut short,
    fails its checksum or does not decode (where it stopped is the last record's ``end``, or
    ``start``)."""
    offset = start
    handle.seek(start)
    while offset + _HEADER.size <= limit:
        header = handle.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        length, crc = _HEADER.unpack(header)
        end = offset + _HEADER.size + length
        if end > limit:
            return
        payload = handle.read(length)
        if len(payload) != length or zlib.crc32(payload) != crc:
            return
        try:
            events = _decoder.decode(payload)
        except msgspec.DecodeError:
            return
        yield _Frame(offset, end, events)
        offset = end


def _whole(path: Path, start: int = 0) -> tuple[list[_Frame], int]:
    """Every intact record of a segment file from ``start``, and where they end."""
    with open(path, "rb") as handle:
        frames = list(_frames(handle, start, os.fstat(handle.fileno()).st_size))
    return frames, frames[-1].end if frames else start


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
        if not (directory / "cursor").exists():  # made now, so later moves need no new file
            try:
                self._write_cursor(self._cursor)
            except OSError as exc:
                logger.error("could not create the spool cursor yet: %s", exc)
        self._write_segment = self._segments[-1]
        self._write_offset = self._path(self._write_segment).stat().st_size
        self._durable = (self._write_segment, self._write_offset)  # end of what was fsync'd
        self.pending_bytes, self.pending_events = self._measure()
        self._queue: list[tuple[bytes, int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._data = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self.appended_events = 0
        self.forwarded_events = 0
        self.write_errors = 0  # appends refused because the disk failed
        self.corrupt_bytes = 0  # unreadable bytes skipped by the reader
        self._rotate = False  # a failed write could not be cut off: start a new segment
        self._reclaim = False  # a write failed: empty the write segment once all is forwarded
        self._skipped: set[tuple[int, int]] = set()  # (segment, offset) already reported
        # (when, end): the records before ``end`` were all appended at ``when`` or later; one
        # entry per second of appends, so the oldest pending record's age is known to a second
        self._appended_at: deque[tuple[float, Position]] = deque()
        if self.pending_events:  # spooled before this start: at least as old as it
            self._appended_at.append((time.monotonic(), Position(*self._durable)))

    # --- files ----------------------------------------------------------------------------------

    def _path(self, segment: int) -> Path:
        return self.directory / f"{segment:020d}.log"

    def _read_cursor(self) -> Position:
        """The saved cursor; an unreadable one means "from the oldest segment" (what is sent
        again is counted once upstream: every event has its id)."""
        try:
            data = (self.directory / "cursor").read_bytes()
        except OSError:
            return Position(0, 0)
        body, check = data[: _cursor_codec.size], data[_cursor_codec.size :]
        if len(body) != _cursor_codec.size or (
            check and check != _crc.pack(zlib.crc32(body))  # 16-byte files predate the check
        ):
            logger.error("unreadable spool cursor; forwarding again from the oldest segment")
            return Position(0, 0)
        segment, offset = _cursor_codec.unpack(body)
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
            good = _whole(path)[1]
            if good < path.stat().st_size:
                logger.warning("cutting a torn record off %s at byte %d", path.name, good)
                with open(path, "r+b") as handle:
                    handle.truncate(good)
                    os.fsync(handle.fileno())
        return segments

    def _measure(self) -> tuple[int, int]:
        total_bytes = total_events = 0
        for segment in self._segments:
            start = self._cursor.offset if segment == self._cursor.segment else 0
            frames, _ = _whole(self._path(segment), start)
            total_bytes += sum(f.end - f.offset for f in frames)
            total_events += sum(len(f.events) for f in frames)
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
            if self._reclaim:
                await self._reclaim_write_segment()
            try:
                await asyncio.to_thread(self._write, [record for record, _, _ in batch])
            except asyncio.CancelledError:
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(SpoolUnavailable("the relay is stopping"))
                raise
            except Exception as exc:  # OSError above all; anything else must not end the loop
                self.write_errors += len(batch)
                self._reclaim = True
                log = logger.error if isinstance(exc, OSError) else logger.exception
                log("spool write failed (%s); refusing %d appends", exc, len(batch))
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(SpoolUnavailable(str(exc)))
                continue
            self._note_appended()
            for record, count, future in batch:
                self.pending_bytes += len(record)
                self.pending_events += count
                self.appended_events += count
                future.set_result(None)
            self._data.set()

    def _note_appended(self) -> None:
        now, end = time.monotonic(), Position(*self._durable)
        if self._appended_at and now - self._appended_at[-1][0] < 1.0:
            self._appended_at[-1] = (self._appended_at[-1][0], end)
        else:
            self._appended_at.append((now, end))

    def oldest_pending_age(self, now: float | None = None) -> float:
        """Seconds since the oldest event not yet forwarded was appended (0 when none is; at
        most a second more than exact; for events spooled before this start, since the start)."""
        if not self.pending_events or not self._appended_at:
            return 0.0
        return max(0.0, (time.monotonic() if now is None else now) - self._appended_at[0][0])

    async def _reclaim_write_segment(self) -> None:
        """After a failed write (a full disk): once everything in the write segment has been
        forwarded, empty it in place. Forwarded bytes are otherwise freed only by deleting whole
        segments, and a disk smaller than a segment (or too full to start a new one) would stay
        full for good. Runs between writes, in the loop's order: with the cursor at the durable
        end, no read or acknowledgement can hold a position inside the segment."""
        segment, end = self._durable
        if end == 0 or self._cursor != Position(segment, end) or segment != self._write_segment:
            return
        try:
            await asyncio.to_thread(self._empty_segment, segment)
        except OSError as exc:
            logger.error("could not empty the forwarded spool segment yet: %s", exc)
            return
        self._cursor = Position(segment, 0)
        for old in [s for s in self._segments if s < segment]:
            self._segments.remove(old)
        self._durable = (segment, 0)
        self._write_offset = 0
        self._rotate = False
        self._reclaim = False
        self.pending_bytes = self.pending_events = 0
        self._appended_at.clear()
        logger.info("emptied the forwarded spool segment %s to free the disk", segment)

    def _empty_segment(self, segment: int) -> None:
        # the cursor first: a crash between the two only resends forwarded events (deduplicated)
        self._write_cursor(Position(segment, 0))
        with open(self._path(segment), "r+b") as handle:
            handle.truncate(0)
            os.fsync(handle.fileno())

    def _write(self, records: list[bytes]) -> None:
        """Append records (rotating segments when full), then one fsync per touched file. On an
        error, whatever this call wrote is cut off again before the error propagates."""
        if self._rotate:
            self._start_segment()
            self._rotate = False
        touched: list[tuple[int, int]] = [(self._write_segment, self._write_offset)]
        handle = open(self._path(self._write_segment), "ab")  # noqa: SIM115 - rotated below
        new_segment = False
        try:
            for record in records:
                if self._write_offset >= self.segment_bytes:
                    handle.flush()
                    os.fsync(handle.fileno())
                    handle.close()
                    self._start_segment()
                    touched.append((self._write_segment, 0))
                    handle = open(self._path(self._write_segment), "ab")  # noqa: SIM115
                    new_segment = True
                _write_all(handle, record)
                self._write_offset += len(record)
            handle.flush()
            os.fsync(handle.fileno())
            if new_segment:
                _fsync_dir(self.directory)  # a new segment's name must survive a crash too
            self._durable = (self._write_segment, self._write_offset)
        except OSError:
            with contextlib.suppress(OSError):
                handle.close()
            self._undo(touched)
            raise
        finally:
            handle.close()

    def _start_segment(self) -> None:
        self._path(self._write_segment + 1).touch()
        self._write_segment += 1
        self._segments.append(self._write_segment)
        self._write_offset = 0

    def _undo(self, touched: list[tuple[int, int]]) -> None:
        """Cut each touched segment back to where this write started in it."""
        try:
            for segment, offset in reversed(touched):
                with open(self._path(segment), "r+b") as handle:
                    handle.truncate(offset)
                    os.fsync(handle.fileno())
            first_segment, first_offset = touched[0]
            self._write_offset = first_offset
            for segment, _ in touched[1:]:  # segments begun by this write: empty again; drop
                self._path(segment).unlink(missing_ok=True)
                self._segments.remove(segment)
            self._write_segment = first_segment
        except OSError as exc:
            logger.error("could not cut a failed spool write off (%s); next write rotates", exc)
            self._rotate = True

    # --- forwarding -------------------------------------------------------------------------------

    async def wait_for_data(
        self,
        timeout: float,  # noqa: ASYNC109
        *,
        appended_since: int | None = None,
    ) -> None:
        """Return when events are pending (at once if some are), or after ``timeout``. With
        ``appended_since`` (a value of ``appended_events``), wait for an append after it (or the
        timeout) even if some are pending: the caller read everything readable then, so
        returning at once would only make it spin."""
        if appended_since is None:
            if self.pending_events:
                return
        elif self.appended_events != appended_since:
            return
        self._data.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._data.wait(), timeout)

    async def read_async(
        self, max_events: int, origin: Position | None = None, max_bytes: int | None = None
    ) -> Batch:
        """``read`` in a worker thread (segment files are read off the event loop)."""
        return await asyncio.to_thread(self.read, max_events, origin, max_bytes)

    @property
    def cursor(self) -> Position:
        return self._cursor

    def read(
        self, max_events: int, origin: Position | None = None, max_bytes: int | None = None
    ) -> Batch:
        """Whole, durable records from ``origin`` (default: the cursor), up to ``max_events`` and
        ``max_bytes`` of records (at least one record if any). Records a write is still adding
        (not yet fsync'd, so not yet acknowledged to their sender) are not read; unreadable
        bytes at the end of an older segment are skipped. Only the records read (and the next,
        to see that it does not fit) are read from disk, not the rest of their segment."""
        events: list[dict[str, Any]] = []
        position = self._cursor if origin is None else origin
        durable_segment, durable_offset = self._durable
        size = 0
        for segment in [
            s for s in list(self._segments) if position.segment <= s <= durable_segment
        ]:
            start = position.offset if segment == position.segment else 0
            try:
                handle = open(self._path(segment), "rb")  # noqa: SIM115 - closed below
            except FileNotFoundError:
                handle = None
            try:
                length_on_disk = 0 if handle is None else os.fstat(handle.fileno()).st_size
                limit = durable_offset if segment == durable_segment else length_on_disk
                limit = min(limit, length_on_disk)
                offset = start
                for frame in [] if handle is None else _frames(handle, start, limit):
                    too_big = max_bytes is not None and size + frame.end - frame.offset > max_bytes
                    too_many = len(events) + len(frame.events) > max_events
                    if events and (too_big or too_many):
                        return Batch(events, Position(segment, frame.offset), size)
                    events.extend(frame.events)
                    size += frame.end - frame.offset
                    offset = frame.end
            finally:
                if handle is not None:
                    handle.close()
            position = Position(segment, offset)
            if segment < durable_segment:  # complete: no write will ever add to it
                if offset < length_on_disk:
                    self._skip(segment, offset, length_on_disk - offset)
                position = Position(segment + 1, 0)
        return Batch(events, position, size)

    def _skip(self, segment: int, offset: int, length: int) -> None:
        """Unreadable bytes that no write will ever complete (an older segment's tail)."""
        if (segment, offset) in self._skipped:
            return
        self._skipped.add((segment, offset))
        self.corrupt_bytes += length
        logger.error(
            "skipping %d unreadable bytes at %s:%d (a failed write or a damaged disk)",
            length,
            self._path(segment).name,
            offset,
        )

    def commit(self, batch: Batch) -> None:
        """The control plane has ``batch``: move the cursor past it, durably; drop old segments
        (blocking: the relay itself uses ``acknowledge``)."""
        self._write_cursor(batch.end)
        self._advance(batch)

    async def acknowledge(self, batch: Batch) -> None:
        """``commit`` with the cursor's write and fsyncs in a worker thread."""
        await asyncio.to_thread(self._write_cursor, batch.end)
        self._advance(batch)

    def _write_cursor(self, end: Position) -> None:
        body = _cursor_codec.pack(end.segment, end.offset)
        record = body + _crc.pack(zlib.crc32(body))
        path = self.directory / "cursor"
        try:
            handle = os.open(path, os.O_WRONLY)
        except FileNotFoundError:  # the first cursor: a new file, made whole then renamed
            temporary = self.directory / "cursor.tmp"
            with open(temporary, "wb") as new:
                new.write(record)
                new.flush()
                os.fsync(new.fileno())
            os.replace(temporary, path)
            _fsync_dir(self.directory)
        else:
            # Overwritten in place: needs no new disk space, so the cursor still moves (and
            # segments are freed) on a full disk, where a new file could not be created. A
            # torn write fails the checksum and only means resending (deduplicated upstream).
            try:
                os.pwrite(handle, record, 0)
                os.fsync(handle)
            finally:
                os.close(handle)
        for segment in [s for s in self._segments if s < end.segment]:
            self._path(segment).unlink(missing_ok=True)

    def _advance(self, batch: Batch) -> None:
        self._cursor = batch.end
        while self._appended_at and self._appended_at[0][1] <= batch.end:
            self._appended_at.popleft()
        for segment in [s for s in self._segments if s < batch.end.segment]:
            self._segments.remove(segment)
        self.pending_bytes -= batch.bytes
        self.pending_events -= len(batch.events)
        self.forwarded_events += len(batch.events)
