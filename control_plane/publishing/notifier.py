"""Announces committed changes to whoever serves snapshots (in-process subscribers)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

Listener = Callable[[str, frozenset[str]], Awaitable[None]]


class ChangeNotifier:
    """After a commit, tells each listener which environments of a project changed."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    async def environments_changed(self, project_id: str, environment_ids: Iterable[str]) -> None:
        ids = frozenset(environment_ids)
        for listener in list(self._listeners):
            await listener(project_id, ids)
