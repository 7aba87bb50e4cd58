"""Announces committed changes to whoever serves snapshots (in-process subscribers).

``announce`` is what a request calls after its commit: it returns at once, and the listeners
(compiling the new snapshot, pushing it to relays, the Redis notice to other replicas) run in a
background task. A committed write is therefore answered with its success whatever happens to
publishing; a listener that fails is logged, and the hub's periodic reconcile (which compares
served versions with the database) delivers the change anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable

logger = logging.getLogger("vane.publishing")

Listener = Callable[[str, frozenset[str]], Awaitable[None]]


class ChangeNotifier:
    """After a commit, tells each listener which environments of a project changed."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.failures = 0

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    def announce(self, project_id: str, environment_ids: Iterable[str]) -> None:
        """Publish in the background; never raises, never waits."""
        task = asyncio.get_running_loop().create_task(
            self.environments_changed(project_id, environment_ids)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def environments_changed(self, project_id: str, environment_ids: Iterable[str]) -> None:
        """Tell every listener now; one failing does not stop the others (each is logged)."""
        ids = frozenset(environment_ids)
        for listener in list(self._listeners):
            try:
                await listener(project_id, ids)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failures += 1
                logger.exception(
                    "publishing a change to %s failed; the reconciler will deliver it",
                    ", ".join(sorted(ids)),
                )

    async def drain(self) -> None:
        """Wait for announcements still running (at shutdown)."""
        while self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
