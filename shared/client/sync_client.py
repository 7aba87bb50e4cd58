"""``VaneClient``: batched event tracking for threaded Python backends."""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from types import TracebackType

import httpx

from shared.client.batcher import BatchingCore, Outcome, Post, Reply, Step, Wait, logger

_live: weakref.WeakSet[VaneClient] = weakref.WeakSet()


class VaneClient(BatchingCore[httpx.BaseTransport]):
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

    def _open(self) -> None:
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

    def _sender_running(self) -> bool:
        return self._thread.is_alive()

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every event tracked before this call is acknowledged, or ``timeout``.

        True if they were all delivered; False on timeout, or if any was rejected or dropped.
        """
        marker = self._flush_marker(threading.Event())
        if marker is None:
            return self.queued == 0
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
        steps = self._steps()
        outcome: Outcome = None
        while (step := steps.send(outcome)) is not None:
            outcome = self._do(step)

    def _do(self, step: Step) -> Outcome:
        """Carry out one step of the sender on the sender thread: what came of it."""
        if isinstance(step, Post):
            try:
                response = self._http.post(self.events_url, content=step.body, timeout=step.timeout)
            except Exception as exc:  # transport errors, and a client closed under our feet
                return exc
            return Reply.of(response)
        if isinstance(step, Wait):
            self._wake_event.wait(step.seconds)
            self._wake_event.clear()
        elif step.interruptible:
            self._stop_event.wait(step.seconds)
        else:
            time.sleep(step.seconds)
        return None

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
