"""Evaluations a request asks for, run where they cannot hold the event loop.

The rule (``off_loop``, issue #33): what an evaluation costs is bounded by the size of its
context times the rules' budget. So an evaluation runs on the loop only when both are small:

* the environment's worst searches (``EnvironmentState.searches``: more than
  ``INLINE_SEARCH_UNITS`` of the search budget, ``shared.engine.operators``), and
* the context: at most ``INLINE_CONTEXT_BYTES`` of JSON. A clause reads one attribute, and
  an array attribute is read element by element (``in`` looks each one up; the string
  operators' 16 KiB cap counts the elements too), so a 1 MiB body of 300,000 elements cost every
  clause naming it ~0.1 s. Nothing caps the elements (that would change what ``in`` means); a
  context past the limit is evaluated off the loop instead, whatever the environment. SDK and
  browser contexts are a few hundred bytes and stay inline.

Anything else is evaluated on a worker thread: RE2 searches release the GIL, and a Python pass
(``contains``, ``in`` over an array) gives it up every switch interval, so ``/healthz`` and
other requests keep being served while it runs. The interval is ``SWITCH_INTERVAL_S`` once the
worker exists (Python's 5 ms default made a ``/healthz``, which needs the GIL a few times, wait
up to 60-80 ms behind one such evaluation). One worker: such evaluations queue behind each other
rather than take every core."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from relay.store import EnvironmentState
from shared.engine import Evaluation, evaluate, evaluate_all

INLINE_CONTEXT_BYTES = 4 * 1024
"""The largest context (its JSON bytes) evaluated on the event loop: at most ~2,000 array
elements, a fraction of a millisecond a clause."""

SWITCH_INTERVAL_S = 0.001
"""How often a thread holding the GIL hands it on, once the worker runs: the loop then waits at
most about this long per step while a worker evaluation runs (with one thread, nothing
switches, so the relay's usual path pays nothing)."""

_worker: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _worker
    if _worker is None:
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        _worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vane-search")
    return _worker


def off_loop(state: EnvironmentState, context_bytes: int) -> bool:
    """Whether an evaluation of a context of ``context_bytes`` JSON bytes in ``state`` runs on
    the worker thread: when the environment's rules search or the context is large."""
    return state.searches or context_bytes > INLINE_CONTEXT_BYTES


async def all_flags(
    state: EnvironmentState,
    context: Mapping[str, Any],
    now_ms: int,
    *,
    client_side_only: bool,
    context_bytes: int,
) -> dict[str, Evaluation]:
    """``evaluate_all`` for ``state``, off the loop when ``off_loop`` says so."""
    if not off_loop(state, context_bytes):
        return evaluate_all(state.compiled, context, now_ms, client_side_only=client_side_only)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        _executor(),
        lambda: evaluate_all(state.compiled, context, now_ms, client_side_only=client_side_only),
    )


async def one_flag(
    state: EnvironmentState, key: str, context: Mapping[str, Any], now_ms: int, context_bytes: int
) -> Evaluation:
    """``evaluate`` for ``state``, off the loop when ``off_loop`` says so."""
    if not off_loop(state, context_bytes):
        return evaluate(state.compiled, key, context, now_ms)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), evaluate, state.compiled, key, context, now_ms)
