"""Last-known-good snapshots on disk, so a relay restarted while the control plane is away
still serves. Each environment is one snapshot file, replaced atomically (write, fsync, rename,
fsync dir), and a log of the patches accepted since it was written (appended and fsynced).

A patch costs the disk what it changed: it is appended to the log rather than rewriting a
10,000-flag snapshot (encoding which holds the interpreter for tens of milliseconds, a stall
for every request the relay serves meanwhile). The snapshot is rewritten when a full snapshot
arrives and after ``LOG_LIMIT`` patches. Loading applies the log's patches that follow each
other from the snapshot's version and stops at the first that does not (or a torn last record).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path

import msgspec

from shared.wire.protocol import Access, Patch, apply_patch
from shared.wire.snapshot import Snapshot

logger = logging.getLogger("vane.relay.persistence")


class Saved(msgspec.Struct, frozen=True):
    snapshot: Snapshot
    access: Access
    saved_at: float


class _Pending(msgspec.Struct):
    """What to save for one environment: a full snapshot to write first (or none), patches to
    append after it, and the state they lead to (written whole where the log cannot be used)."""

    full: Saved | None
    patches: list[Patch]
    latest: Saved


_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[Saved] = msgspec.msgpack.Decoder(Saved)
_patch_decoder: msgspec.msgpack.Decoder[Patch] = msgspec.msgpack.Decoder(Patch)
LOG_LIMIT = 256
_LENGTH = 4  # bytes of the big-endian length before each record of the log


class SnapshotFiles:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # None: delete the environment's files
        self._pending: dict[str, _Pending | None] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._on_disk: dict[str, tuple[int, int]] = {}  # version on disk, patches in its log

    def path_of(self, environment: str) -> Path:
        return self.directory / f"{environment}.snapshot"

    def log_of(self, environment: str) -> Path:
        return self.directory / f"{environment}.patches"

    def write(self, snapshot: Snapshot, access: Access) -> None:
        """Write one environment's snapshot durably (blocking)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.path_of(snapshot.environment)
        temporary = target.with_suffix(".tmp")
        data = _encoder.encode(Saved(snapshot=snapshot, access=access, saved_at=time.time()))
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
        self.log_of(snapshot.environment).unlink(missing_ok=True)  # older than the snapshot
        self._fsync_directory()
        self._on_disk[snapshot.environment] = (snapshot.version, 0)

    def append(self, environment: str, patches: list[Patch]) -> None:
        """Append ``patches`` to the environment's log durably (blocking)."""
        records = b"".join(
            len(data).to_bytes(_LENGTH, "big") + data for data in map(_encoder.encode, patches)
        )
        with open(self.log_of(environment), "ab") as handle:
            handle.write(records)
            handle.flush()
            os.fsync(handle.fileno())
        count = self._on_disk[environment][1]
        self._on_disk[environment] = (patches[-1].version, count + len(patches))

    def _fsync_directory(self) -> None:
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def delete(self, environment: str) -> None:
        """Remove one environment's files durably (blocking); no file is fine."""
        self._on_disk.pop(environment, None)
        self.path_of(environment).unlink(missing_ok=True)
        self.log_of(environment).unlink(missing_ok=True)
        if self.directory.is_dir():
            directory = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    def load_all(self) -> list[Saved]:
        """Every readable saved snapshot; an unreadable file is logged and skipped."""
        if not self.directory.is_dir():
            return []
        saved = []
        for path in sorted(self.directory.glob("*.snapshot")):
            try:
                base = _decoder.decode(path.read_bytes())
            except (OSError, msgspec.DecodeError, msgspec.ValidationError):
                logger.exception("ignoring unreadable snapshot file %s", path)
                continue
            latest, count = self._replay(base)
            self._on_disk[latest.snapshot.environment] = (latest.snapshot.version, count)
            saved.append(latest)
        return saved

    def _replay(self, saved: Saved) -> tuple[Saved, int]:
        """``saved`` with the patches of its log that follow on from it; how many there were."""
        try:
            data = self.log_of(saved.snapshot.environment).read_bytes()
        except FileNotFoundError:
            return saved, 0
        except OSError:
            logger.exception("ignoring the unreadable patch log of %s", saved.snapshot.environment)
            return saved, 0
        snapshot, access, count, offset = saved.snapshot, saved.access, 0, 0
        while offset + _LENGTH <= len(data):
            size = int.from_bytes(data[offset : offset + _LENGTH], "big")
            record = data[offset + _LENGTH : offset + _LENGTH + size]
            if len(record) < size:
                break  # torn by a crash while appending: what came before stands
            try:
                patch = _patch_decoder.decode(record)
            except (msgspec.DecodeError, msgspec.ValidationError):
                break
            if patch.from_version != snapshot.version:
                break
            snapshot, access = apply_patch(snapshot, patch), patch.access or access
            count, offset = count + 1, offset + _LENGTH + size
        return Saved(snapshot=snapshot, access=access, saved_at=saved.saved_at), count

    # --- background writer: latest wins per environment -----------------------------------------

    def schedule(self, snapshot: Snapshot, access: Access, patch: Patch | None = None) -> None:
        """Save ``snapshot`` (with ``access``); ``patch``: the patch that led to it from the
        version scheduled before, which is appended to the log instead where it follows on."""
        latest = Saved(snapshot=snapshot, access=access, saved_at=0.0)
        pending = self._pending.get(snapshot.environment)
        if patch is None:
            self._pending[snapshot.environment] = _Pending(latest, [], latest)
        elif pending is not None:
            pending.patches.append(patch)
            pending.latest = latest
        elif snapshot.environment not in self._pending:
            self._pending[snapshot.environment] = _Pending(None, [patch], latest)
        else:  # a removal is queued: the full state replaces it
            self._pending[snapshot.environment] = _Pending(latest, [], latest)
        self._wake.set()

    def schedule_removal(self, environment: str) -> None:
        """Forget ``environment`` on disk too (after any write still queued for it)."""
        self._pending[environment] = None
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Save what is pending and stop. The writer is let finish the write it is in (not
        cancelled: its thread would go on writing after ``stop`` returned, and whatever it
        held would be lost)."""
        if self._task is not None:
            self._stopping = True
            self._wake.set()
            with contextlib.suppress(Exception):
                await self._task
        await self.flush()

    async def flush(self) -> None:
        while self._pending:
            environment, pending = next(iter(self._pending.items()))
            del self._pending[environment]
            try:
                if pending is None:
                    await asyncio.to_thread(self.delete, environment)
                    continue
                full, patches, latest = pending.full, pending.patches, pending.latest
                if full is not None and len(patches) <= LOG_LIMIT:
                    await asyncio.to_thread(self.write, full.snapshot, full.access)
                    full = None
                if full is None and (not patches or self._follows(environment, patches)):
                    if patches:
                        await asyncio.to_thread(self.append, environment, patches)
                else:
                    await asyncio.to_thread(self.write, latest.snapshot, latest.access)
            except Exception:  # a full disk above all; the next version is tried again
                logger.exception("could not save (or delete) the snapshot of %s", environment)

    def _follows(self, environment: str, patches: list[Patch]) -> bool:
        """Whether ``patches`` continue what is on disk, in a log that is not too long."""
        on_disk = self._on_disk.get(environment)
        if on_disk is None:
            return False
        version, count = on_disk
        return patches[0].from_version == version and count + len(patches) <= LOG_LIMIT

    async def _run(self) -> None:
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()
