"""``VaneClient``: batched event tracking for threaded Python backends."""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from types import TracebackType

import httpx

from shared.client.batcher import (
    BatchingCore,
    FlushMarker,
    Outcome,
    Post,
    Reply,
    Sleep,
    Wait,
    logger,
)

_live: weakref.WeakSet[VaneClient] = weakref.WeakSet()


class _ThreadMarker(FlushMarker):
    __slots__ = ("done",)

    def __init__(self, baseline: int) -> None:
        super().__init__(baseline)
        self.done = threading.Event()

    def resolve(self, ok: bool) -> None:
        self.ok = ok
        self.done.set()


class VaneClient(BatchingCore):
    """Sends events to ``POST {base_url}/api/v1/events`` from a background daemon thread.

    ``track()`` only validates and appends to a bounded in-memory queue; a daemon thread sends
    a batch when ``batch_size`` events are waiting or every ``flush_interval`` seconds, over one
    keep-alive ``httpx.Client``. Transient failures are retried with the same eventIds (see
    :mod:`shared.client.batcher`) until ``max_retries`` or, by default, until ``close()``'s
    deadline. ``close()`` is registered with :mod:`atexit`, so a process that exits normally
    sends what it queued. A forked child (gunicorn ``--preload``) gets its own empty queue,
    sender thread and connection pool.

    ``transport`` is an ``httpx.BaseTransport`` (for example a proxy or a test transport).
    """

    def __init__(
        self,
        base_url: str,
        server_key: str,
        *,
        batch_size: int = 500,
        flush_interval: float = 1.0,
        max_queue: int = 100_000,
        timeout: float = 10.0,
        max_retries: int | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            server_key,
            batch_size=batch_size,
            flush_interval=flush_interval,
            max_queue=max_queue,
            timeout=timeout,
            max_retries=max_retries,
        )
        self._transport = transport
        self._open_sender()
        atexit.register(self.close)
        _live.add(self)

    def _open_sender(self) -> None:
        self._wake_event = threading.Event()
        self._stop_event = threading.Event()
        self._http = httpx.Client(
            headers=self.headers, timeout=self._timeout, transport=self._transport
        )
        self._thread = threading.Thread(target=self._run, name="vane-client-sender", daemon=True)
        self._start_sender()

    def _start_sender(self) -> None:
        self._thread.start()

    def _wake(self) -> None:
        self._wake_event.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every event tracked before this call is acknowledged, or ``timeout``.

        True if they were all delivered; False on timeout, or if any was rejected or dropped.
        """
        if self._closing or not self._thread.is_alive():
            return self.queued == 0
        marker = _ThreadMarker(self._failed)
        self._queue_marker(marker)
        return marker.done.wait(timeout) and marker.ok

    def close(self, timeout: float = 10.0) -> None:
        """Stop accepting events, send what is queued within ``timeout`` seconds, release all.

        Idempotent. Events still unsent at the deadline are counted in ``dropped``.
        """
        if not self._begin_close(timeout):
            return
        atexit.unregister(self.close)
        self._stop_event.set()
        self._wake_event.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout + 1.0)
        if self._thread.is_alive():
            logger.error("vane: sender still busy after close(timeout=%s); giving up", timeout)
        else:
            self._drop_leftovers()
        self._http.close()

    def __enter__(self) -> VaneClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self) -> None:
        sender = self._sender()
        try:
            step = next(sender)
            while True:
                outcome: Outcome = None
                if type(step) is Post:
                    outcome = self._post(step)
                elif type(step) is Wait:
                    self._wake_event.wait(step.seconds)
                    self._wake_event.clear()
                elif type(step) is Sleep:
                    if step.interruptible:
                        self._stop_event.wait(step.seconds)
                    else:
                        time.sleep(step.seconds)
                step = sender.send(outcome)
        except StopIteration:
            pass
        except Exception:
            logger.exception("vane: event sender stopped by an unexpected error")

    def _post(self, step: Post) -> Outcome:
        try:
            response = self._http.post(self.events_url, content=step.body, timeout=step.timeout)
        except Exception as exc:  # transport errors, and a client closed under our feet
            return exc
        return Reply(response.status_code, response.headers.get("retry-after"), response.content)

    def _reset_after_fork(self) -> None:
        if self._closed:
            return
        super()._reset_after_fork()
        # The parent's sockets stay the parent's: open a new pool rather than close that one.
        self._open_sender()


def _after_fork_in_child() -> None:
    for client in list(_live):
        client._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
