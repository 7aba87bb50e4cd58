"""``AsyncVaneClient``: batched event tracking for asyncio applications."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

import httpx

from shared.client.batcher import BatchingCore, Outcome, Post, Reply, Step, Wait, logger


class AsyncVaneClient(BatchingCore[httpx.AsyncBaseTransport]):
    """The asyncio twin of :class:`~shared.client.VaneClient`: same batching, retries, counters.

    ``track()`` is a plain method that queues and returns; a background task sends the batches
    with one ``httpx.AsyncClient``. The task starts on the first ``track()``, ``flush()`` or
    ``async with`` inside a running event loop, and is bound to that loop: call ``track()``
    from the loop's thread. There is no exit hook: use ``async with`` or ``await aclose()``,
    or events still queued when the loop ends are lost.

    ``transport`` is an ``httpx.AsyncBaseTransport``.
    """

    def _open(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None
        self._wake_event: asyncio.Event | None = None
        self._stop_event: asyncio.Event | None = None
        self._needs_start = True

    def _start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not inside a loop yet: events wait in the queue until we are
        self._needs_start = False
        self._wake_event = asyncio.Event()
        self._stop_event = asyncio.Event()
        self._http = httpx.AsyncClient(
            headers=self.headers, timeout=self._timeout, transport=self._transport
        )
        self._task = loop.create_task(self._run(), name="vane-client-sender")

    def _wake(self) -> None:
        if self._wake_event is not None:
            self._wake_event.set()

    def _sender_running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def flush(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 (same API as VaneClient)
        """Wait until every event tracked before this call is acknowledged, or ``timeout``.

        True if they were all delivered; False on timeout, or if any was rejected or dropped.
        """
        marker = self._flush_marker(asyncio.Event())
        if marker is None:
            return self.queued == 0
        try:
            async with asyncio.timeout(timeout):
                await marker.done.wait()
        except TimeoutError:
            return False
        return marker.ok

    async def aclose(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109 (a delivery deadline)
        """Stop accepting events, send what is queued within ``timeout`` seconds, release all.

        Idempotent. Events still unsent at the deadline are counted in ``dropped``.
        """
        if self._needs_start:
            self._start()
        if not self._begin_close(timeout):
            return
        task = self._task
        if self._stop_event is not None and self._wake_event is not None:
            self._stop_event.set()
            self._wake_event.set()
        if task is not None and not task.done():
            try:
                async with asyncio.timeout(timeout + 1.0):
                    await asyncio.shield(task)
            except TimeoutError:
                logger.error("vane: sender still busy after aclose(timeout=%s); giving up", timeout)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._drop_leftovers()
        if self._http is not None:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncVaneClient:
        if self._needs_start:
            self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self) -> None:
        steps = self._steps()
        outcome: Outcome = None
        while (step := steps.send(outcome)) is not None:
            outcome = await self._do(step)

    async def _do(self, step: Step) -> Outcome:
        """Carry out one step of the sender in the sender task: what came of it."""
        assert self._http is not None
        assert self._wake_event is not None
        assert self._stop_event is not None
        if isinstance(step, Post):
            try:
                response = await self._http.post(
                    self.events_url, content=step.body, timeout=step.timeout
                )
            except Exception as exc:  # transport errors, and a client closed under our feet
                return exc
            return Reply.of(response)
        if isinstance(step, Wait):
            await _wait(self._wake_event, step.seconds)
            self._wake_event.clear()
        elif step.interruptible:
            await _wait(self._stop_event, step.seconds)
        else:
            await asyncio.sleep(step.seconds)
        return None


async def _wait(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
