"""Prefixed, time-sortable identifiers (``flg_01j…``): 48 bits of milliseconds + 80 random bits.

Within one process ids are strictly increasing, even inside one millisecond (the random part is
incremented, as monotonic ULIDs do), so ordering by id orders by creation.
"""

from __future__ import annotations

import secrets
import threading

from shared.clock import now_ms

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lowercase
_lock = threading.Lock()
_last = (0, 0)


def _base32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def first_id_at(prefix: str, millis: int) -> str:
    """The smallest id ``prefix`` can have at epoch millisecond ``millis``: every id made
    before then sorts below it."""
    return f"{prefix}_{_base32(millis, 10)}{'0' * 16}"


def new_id(prefix: str) -> str:
    global _last
    with _lock:
        millis = now_ms()
        last_millis, last_random = _last
        if millis <= last_millis:
            millis, random_part = last_millis, (last_random + 1) % (1 << 80)
        else:
            random_part = secrets.randbits(80)
        _last = (millis, random_part)
    return f"{prefix}_{_base32(millis, 10)}{_base32(random_part, 16)}"
