"""Last-known-good snapshots on disk, so a relay restarted while the control plane is away
still serves. Each environment is one file, replaced atomically (write, fsync, rename, fsync dir).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path

import msgspec

from shared.wire.protocol import Access
from shared.wire.snapshot import Snapshot

logger = logging.getLogger("vane.relay.persistence")


class Saved(msgspec.Struct, frozen=True):
    snapshot: Snapshot
    access: Access
    saved_at: float


_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[Saved] = msgspec.msgpack.Decoder(Saved)


class SnapshotFiles:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._pending: dict[str, Saved | None] = {}  # None: delete the environment's file
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def path_of(self, environment: str) -> Path:
        return self.directory / f"{environment}.snapshot"

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
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def delete(self, environment: str) -> None:
        """Remove one environment's file durably (blocking); no file is fine."""
        self.path_of(environment).unlink(missing_ok=True)
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
                saved.append(_decoder.decode(path.read_bytes()))
            except (OSError, msgspec.DecodeError, msgspec.ValidationError):
                logger.exception("ignoring unreadable snapshot file %s", path)
        return saved

    # --- background writer: latest wins per environment -----------------------------------------

    def schedule(self, snapshot: Snapshot, access: Access) -> None:
        self._pending[snapshot.environment] = Saved(snapshot=snapshot, access=access, saved_at=0.0)
        self._wake.set()

    def schedule_removal(self, environment: str) -> None:
        """Forget ``environment`` on disk too (after any write still queued for it)."""
        self._pending[environment] = None
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self.flush()

    async def flush(self) -> None:
        while self._pending:
            environment, saved = next(iter(self._pending.items()))
            del self._pending[environment]
            try:
                if saved is None:
                    await asyncio.to_thread(self.delete, environment)
                else:
                    await asyncio.to_thread(self.write, saved.snapshot, saved.access)
            except Exception:  # a full disk above all; the next version is tried again
                logger.exception("could not save (or delete) the snapshot of %s", environment)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()
