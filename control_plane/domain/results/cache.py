"""What results are computed from, cached by the events they read.

The costly part of a results view is the SQL over exposures and events (the per-arm sums, the
time series' day increments, the exposed count); the engines' arithmetic on them takes
milliseconds. Those are kept here, per database (per engine), under the ingest generation read
*before* computing them (see :mod:`control_plane.db.generation`): a repeat view while no event or
exposure was written reads nothing but that number, and the first view after a write computes
afresh. Keys name everything else the value depends on (project, subject, the metrics' full
definitions, CUPED), so an edited metric or experiment is a different key. Each process keeps
its own; replicas share the generation through the database.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.db import generation

T = TypeVar("T")

ENTRIES = 128  # per database: a few values per experiment viewed (sums, series, count)

_by_engine: WeakKeyDictionary[Any, OrderedDict[tuple[int, Hashable], Any]] = WeakKeyDictionary()


async def cached(session: AsyncSession, key: Hashable, compute: Callable[[], Awaitable[T]]) -> T:
    """``compute()``'s value for ``key``, from the cache while no event or exposure was written
    since it was computed. Values are shared between callers: treat them as read-only."""
    engine = session.bind
    if engine is None:
        return await compute()
    seen = await generation.current(session)
    entries = _by_engine.setdefault(engine, OrderedDict())
    slot = (seen, key)
    if slot in entries:
        entries.move_to_end(slot)
        value: T = entries[slot]
        return value
    value = await compute()
    entries[slot] = value
    while len(entries) > ENTRIES:
        entries.popitem(last=False)
    return value


def clear() -> None:
    """Forget every value (a benchmark times the computation, not a repeat view)."""
    _by_engine.clear()
