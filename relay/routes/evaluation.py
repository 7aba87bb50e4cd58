"""Evaluations a request asks for, run where they cannot hold the event loop.

An environment whose worst searches are small (``EnvironmentState.searches``: at most
``INLINE_SEARCH_UNITS`` of the search budget, ``shared.engine.operators``) evaluates on the loop:
every other operator's work is bounded by the length caps and takes microseconds. Any other is
evaluated on a worker thread: the budget bounds a flag's work, not how many flags a request
evaluates; RE2 searches release the GIL, and a ``contains`` pass is one C call of at most 16 KiB,
so ``/healthz`` and the other environments' requests keep being served while it runs. One
worker: evaluations that search queue behind each other rather than take every core."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from relay.store import EnvironmentState
from shared.engine import Evaluation, evaluate, evaluate_all

_worker: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _worker
    if _worker is None:
        _worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vane-search")
    return _worker


async def all_flags(
    state: EnvironmentState, context: Mapping[str, Any], now_ms: int, *, client_side_only: bool
) -> dict[str, Evaluation]:
    """``evaluate_all`` for ``state``, off the loop when its rules search."""
    if not state.searches:
        return evaluate_all(state.compiled, context, now_ms, client_side_only=client_side_only)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        _executor(),
        lambda: evaluate_all(state.compiled, context, now_ms, client_side_only=client_side_only),
    )


async def one_flag(
    state: EnvironmentState, key: str, context: Mapping[str, Any], now_ms: int
) -> Evaluation:
    """``evaluate`` for ``state``, off the loop when its rules search."""
    if not state.searches:
        return evaluate(state.compiled, key, context, now_ms)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), evaluate, state.compiled, key, context, now_ms)
