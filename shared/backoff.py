"""One capped, jittered backoff for every loop that reconnects or retries.

Full jitter (AWS "Exponential Backoff And Jitter"): the n-th consecutive failure waits a uniform
delay in ``[0, min(cap, base * 2**n))``. The exponent is clamped before it is raised, so the
computation never overflows however long an outage lasts (``0.1 * 2**1024`` raises
``OverflowError``; a relay cut off for a few hours used to die of exactly that).

Pure: randomness is injectable (``rng``) and nothing here sleeps; the caller awaits the delay
with whatever sleep it uses (tests inject a simulated clock).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

# 2**60 * any sane base is far past any cap; the clamp only exists so the float never overflows
_MAX_EXPONENT = 60


def backoff_delay(
    attempt: int, *, base: float, cap: float, rng: Callable[[float, float], float] = random.uniform
) -> float:
    """Seconds to wait after ``attempt`` consecutive failures (1 = the first): full jitter."""
    exponent = min(max(attempt, 0), _MAX_EXPONENT)
    return rng(0.0, min(cap, base * (2.0**exponent)))


@dataclass
class Backoff:
    """A loop's failure count and the delay it earns; ``reset()`` after a success."""

    base: float = 0.1
    cap: float = 10.0
    rng: Callable[[float, float], float] = field(default=random.uniform, repr=False)
    attempt: int = 0

    def failed(self, at_least: float = 0.0) -> float:
        """Count one more failure; the delay before the next try. ``at_least`` (a server's
        ``Retry-After``) is honoured even beyond ``cap``: the server knows best."""
        self.attempt += 1
        return max(
            at_least, backoff_delay(self.attempt, base=self.base, cap=self.cap, rng=self.rng)
        )

    def reset(self) -> None:
        self.attempt = 0
