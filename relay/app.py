"""The relay process: load last-known-good snapshots, sync with the control plane, serve HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import gc
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from relay.forwarder import Forwarder
from relay.persistence import SnapshotFiles
from relay.prometheus import RelayMetrics
from relay.routes.compose import build_http_app
from relay.settings import RelaySettings
from relay.spool import Spool
from relay.store import EnvironmentState, Store
from relay.sync import SyncClient
from shared.engine import CompileError

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("vane.relay")

Scope = dict[str, Any]


class RelayApp:
    """An ASGI app: ``lifespan`` starts and stops the sync client; ``http`` goes to the routes."""

    def __init__(
        self, settings: RelaySettings, *, events_client: httpx.AsyncClient | None = None
    ) -> None:
        """``events_client``: what the forwarder posts events with (default: its own)."""
        self.settings = settings
        self.store = Store(stale_after=settings.stale_after_s)
        self.files = SnapshotFiles(settings.data_dir)
        self.metrics = RelayMetrics(self.store)
        self.sync = SyncClient(settings, self.store, self.files)
        self.spool_lock = claim_spool_dir(settings.data_dir)
        self.spool = Spool(self.spool_lock.path, max_bytes=settings.spool_max_bytes)
        self.forwarder = Forwarder(
            settings, self.spool, events_client, upstream=lambda: self.sync.upstream
        )
        self.http = build_http_app(self.store, settings, self.metrics, spool=self.spool)
        self._tasks: list[asyncio.Task[None]] = []
        self._register_fault_metrics()

    def _register_fault_metrics(self) -> None:
        """What a fault looks like from outside: ``/metrics`` gauges and ``/readyz`` sections."""
        spool, forwarder, sync, gauge = self.spool, self.forwarder, self.sync, self.metrics
        gauge.register_gauge_callback(
            "upstream_info",
            "1 for the control plane the relay is connected to (or tried last).",
            lambda: {(sync.upstream,): 1.0},
            labels=("upstream",),
        )
        gauge.register_gauge_callback(
            "upstream_failures",
            "Failed connection attempts to control planes.",
            lambda: sync.failures,
        )
        gauge.register_gauge_callback(
            "snapshots_refused",
            "Snapshots or patches refused for not being newer than the served version.",
            lambda: sync.refused,
        )
        gauge.register_gauge_callback(
            "event_spool_write_errors",
            "Appends refused (503) because the disk failed (full, read-only).",
            lambda: spool.write_errors,
        )
        gauge.register_gauge_callback(
            "event_spool_corrupt_bytes",
            "Unreadable spool bytes skipped.",
            lambda: spool.corrupt_bytes,
        )
        gauge.register_gauge_callback(
            "forward_failures",
            "Forwarding rounds that failed and were retried.",
            lambda: forwarder.failures,
        )
        gauge.register_status(
            "sync",
            lambda: {
                "connects": sync.connects,
                "failures": sync.failures,
                "refusedVersions": sync.refused,
                "upstreams": list(self.settings.upstream_urls),
            },
        )
        gauge.register_status(
            "spool",
            lambda: {
                "pendingEvents": spool.pending_events,
                "pendingBytes": spool.pending_bytes,
                "maxBytes": spool.max_bytes,
                "writeErrors": spool.write_errors,
                "corruptBytes": spool.corrupt_bytes,
            },
        )
        self._register_forwarding()

    def _register_forwarding(self) -> None:
        """The forwarder's ``/readyz`` section and condition, and its ``/metrics`` (issue #33):
        what it set aside and why, how old the oldest waiting event is, whether it is stalled."""
        spool, forwarder, store, gauge = self.spool, self.forwarder, self.store, self.metrics

        def stall() -> str | None:
            # with the control plane away the relay keeps serving (``stale`` says so); stalled
            # while connected is a fault of forwarding itself
            return forwarder.stall() if store.connected else None

        gauge.register_readiness("forwarder", stall)
        gauge.register_status(
            "forwarder",
            lambda: {
                "upstreamOk": forwarder.upstream_ok,
                "failures": forwarder.failures,
                "accepted": forwarder.accepted,
                "duplicates": forwarder.duplicates,
                "rejected": forwarder.rejected,
                "setAside": dict(forwarder.set_aside),
                "splits": forwarder.splits,
                "maxBodyBytes": forwarder.max_body_bytes,
                "oldestPendingSeconds": round(spool.oldest_pending_age(), 3),
                "stalledSeconds": round(forwarder.stalled_for(), 3),
                "stalled": forwarder.stall() is not None,
                "lastFailure": forwarder.last_failure,
            },
        )
        gauge.register_gauge_callback(
            "events_set_aside",
            "Events the control plane refused, set aside in rejected.jsonl, by reason "
            "(too_large: alone over its body limit; refused: named by a 422).",
            lambda: {(reason,): float(n) for reason, n in forwarder.set_aside.items()},
            labels=("reason",),
        )
        gauge.register_gauge_callback(
            "forward_oldest_pending_seconds",
            "Age of the oldest spooled event not yet forwarded (0: none waiting).",
            spool.oldest_pending_age,
        )
        gauge.register_gauge_callback(
            "forward_stalled_seconds",
            "Seconds events have waited while no batch went through (0: none waiting).",
            forwarder.stalled_for,
        )
        gauge.register_gauge_callback(
            "forward_splits",
            "Batches halved after a 413, or a 422 naming no event.",
            lambda: forwarder.splits,
        )
        gauge.register_gauge_callback(
            "forward_max_body_bytes",
            "The largest body the forwarder sends (lowered by a 413).",
            lambda: forwarder.max_body_bytes,
        )

    def load_saved(self) -> None:
        for saved in self.files.load_all():
            try:
                state = EnvironmentState.build(
                    saved.snapshot, saved.access, received_at=saved.saved_at
                )
            except CompileError:
                logger.exception(
                    "saved snapshot of %s does not compile", saved.snapshot.environment
                )
                continue
            self.store.swap(state)
            logger.info(
                "serving saved %s v%d until upstream answers", state.environment, state.version
            )

    async def startup(self) -> None:
        # after the swap's notifications have gone out, not before (kill-switch latency)
        loop = asyncio.get_running_loop()

        def freeze_soon(_state: EnvironmentState) -> None:
            loop.call_later(0.2, freeze_heap)

        self.store.listen(freeze_soon)
        self.load_saved()
        self.files.start()
        self.spool.start()
        self._tasks = [
            asyncio.create_task(supervise("upstream sync", self.sync.run)),
            asyncio.create_task(supervise("event forwarder", self.forwarder.run)),
        ]

    def stopping(self) -> None:
        """The server was asked to stop (its signal handler calls this before it waits for the
        requests in flight): end the open streams, which would otherwise hold it to its grace
        period, so their clients reconnect elsewhere at once."""
        self.http.stopping()

    async def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        await self.spool.stop()
        await self.forwarder.close()
        await self.files.stop()
        self.spool_lock.release()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        await self.http(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    logger.exception("relay failed to start")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return


class SpoolLock:
    """This process's own spool directory, held with an exclusive ``flock`` for its lifetime."""

    def __init__(self, path: Path, handle: IO[bytes]) -> None:
        self.path = path
        self.handle = handle  # the lock lives as long as this file stays open

    def release(self) -> None:
        self.handle.close()


def claim_spool_dir(data_dir: Path, limit: int = 256) -> SpoolLock:
    """``spool`` for the first relay process on ``data_dir``, ``spool-2``, ``spool-3``, … for
    further workers (``vane relay --workers N``): two processes never append to one spool, and
    after a restart the same directories are taken again, so nothing spooled is stranded."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for slot in range(1, limit + 1):
        name = "spool" if slot == 1 else f"spool-{slot}"
        handle = open(data_dir / f".{name}.lock", "ab")  # noqa: SIM115 - held while we run
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return SpoolLock(data_dir / name, handle)
    raise RuntimeError(f"more than {limit} relay processes share {data_dir}")


async def supervise(name: str, run: Callable[[], Awaitable[None]]) -> None:
    """Run a loop that should never end; if it does (a bug), say so and start it again."""
    while True:
        try:
            await run()
            logger.error("%s stopped; restarting it", name)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s died; restarting it", name)
        await asyncio.sleep(1.0)


def freeze_heap() -> None:
    """Move what is alive now (modules, the compiled snapshot) out of the collector's sight.

    A relay holds a large, long-lived compiled snapshot; without this every full collection walks
    it, pausing all requests for tens of milliseconds under load. Frozen objects are still freed
    by reference counting when a newer snapshot replaces them.
    """
    gc.collect()
    gc.freeze()
    release_free_heap()


def release_free_heap() -> None:
    """Hand the heap pages that decoding and compiling a snapshot freed back to the system
    (glibc keeps them otherwise): a sidecar's resident size is what it holds, not its peak."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        return cast("Callable[[int], int]", ctypes.CDLL(None).malloc_trim)
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to hand back this way
        return None


_malloc_trim = _load_malloc_trim()


def create_app_from_env() -> RelayApp:
    """Granian factory: settings from ``VANE_RELAY_*``."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    return RelayApp(RelaySettings.from_env())
