"""The wall clock in epoch milliseconds: the unit of every time on the wire (``ts``, ``sentAt``,
a snapshot's ``generatedAt``) and of the engine's ``now_ms``. One home, so every part reads it
the same way (the engine itself never reads a clock: its callers pass this)."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
