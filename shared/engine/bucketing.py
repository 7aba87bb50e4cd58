"""Deterministic percentage bucketing: flagd-compatible murmur3 at LaunchDarkly's precision.

The rule, applied to every percentage rollout, weighted segment rule and experiment::

    h      = MurmurHash3_x86_32(utf8(salt + value), seed=0)    # unsigned 32-bit
    bucket = (h * 100_000) >> 32                               # integer in [0, 100000)
    serve the first rollout item whose cumulative weight exceeds ``bucket``;
    if none does (weights short of 100000, which compiling refuses), the last item.

``salt`` is the flag's ``salt``, defaulting to the flag key (a segment's salt defaults to the
segment key). ``value`` is the context's ``bucketBy`` attribute, ``key`` by default:

* a string is used as is;
* an integral number is written in decimal, so ``42`` and ``42.0`` both hash ``"42"``
  (LaunchDarkly does the same);
* anything else (booleans, fractional numbers, null, arrays, objects) cannot be bucketed, and
  neither can a missing attribute: such a context gets bucket 0, i.e. the first item with a
  non-zero weight.

Experiments hash ``experimentKey + "." + unit`` (``experiment_bucket``); a layer places a unit
by ``"layer:" + layerKey + "." + unit`` (``layer_bucket``) and a holdout by
``"holdout:" + holdoutKey + "." + unit`` (``holdout_bucket``): three independent hashes, so which
experiment of a layer a unit is in, whether it is held out and its variant do not depend on one
another.

Why this formula: ``(h * total) >> 32`` is flagd's ``fractional`` (v2) with ``total`` = 100000,
LaunchDarkly's weight precision (weights are integers out of 100000 = 100 %). For whole-percent
weights the chosen item is the same as flagd's, whose ``total`` is 100: ``floor(100000 x) <
1000 c`` and ``floor(100 x) < c`` both hold exactly when ``x < c / 100`` (``x = h / 2**32``,
``c`` an integer cumulative percentage). So flagd's published murmur3 vectors apply. Buckets are
stable when weights change: raising an item from 10 % to 20 % keeps everyone who was in it.

Non-ASCII strings are encoded to UTF-8 here rather than inside mmh3: mmh3 5.x crashes the
interpreter (segfault) on a ``str`` holding a lone surrogate, which any JSON context can carry.
Such strings are hashed as their ``surrogatepass`` bytes, so bucketing never raises or crashes.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

import mmh3

WEIGHT_SCALE = 100_000

mmh3_hash = mmh3.hash


def hash32(data: str) -> int:
    """Unsigned MurmurHash3_x86_32 (seed 0) of the UTF-8 bytes of ``data``."""
    if data.isascii():
        return int(mmh3_hash(data, 0, False))
    return int(mmh3_hash(data.encode("utf-8", "surrogatepass"), 0, False))


def bucket(salt: str, value: str) -> int:
    """The bucket in ``[0, 100000)`` of ``value`` under ``salt``."""
    return (hash32(salt + value) * WEIGHT_SCALE) >> 32


def experiment_bucket(experiment_key: str, unit: str) -> int:
    """An experiment unit's bucket: murmur3 of ``experimentKey + "." + unit``."""
    return bucket(experiment_key + ".", unit)


def layer_bucket(layer_key: str, unit: str) -> int:
    """A unit's place in a layer: murmur3 of ``"layer:" + layerKey + "." + unit``."""
    return bucket("layer:" + layer_key + ".", unit)


def holdout_bucket(holdout_key: str, unit: str) -> int:
    """A unit's place in a holdout: murmur3 of ``"holdout:" + holdoutKey + "." + unit``."""
    return bucket("holdout:" + holdout_key + ".", unit)


def bucketable(value: Any) -> str | None:
    """The string an attribute value is hashed as, or ``None`` if it cannot be bucketed."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return None


def cumulative(weights: Iterable[int]) -> tuple[int, ...]:
    """Running totals of ``weights``: the thresholds ``choose`` compares a bucket with."""
    total = 0
    out = []
    for weight in weights:
        total += weight
        out.append(total)
    return tuple(out)


def choose(thresholds: Sequence[int], bucket_: int) -> int:
    """Index of the first item whose cumulative weight exceeds ``bucket_`` (else the last)."""
    return min(bisect_right(thresholds, bucket_), len(thresholds) - 1)
