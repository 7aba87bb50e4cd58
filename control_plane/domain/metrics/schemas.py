from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from msgspec import UNSET, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut

Aggregation = Literal["sum", "mean", "count", "conversion", "ratio", "quantile"]
Direction = Literal["higher", "lower"]
CappingType = Literal["absolute", "percentile"]
PartAggregation = Literal["sum", "count"]


class RatioPart(ApiIn):
    """One side of a ratio metric: per exposed unit, the ``sum`` of ``value`` or the ``count`` of
    its ``event`` events at or after exposure."""

    event: str
    aggregation: PartAggregation


class RatioPartOut(ApiOut):
    event: str
    aggregation: str


class Capping(ApiIn):
    """Outlier capping of ``sum`` and ``mean`` metrics: each unit's value (its sum of ``value``)
    is capped at ``value`` (``absolute``, in the metric's units, > 0) or at the ``value``
    percentile of the pooled exposed units (``percentile``, 0 < value < 1, e.g. 0.99)."""

    type: CappingType
    value: float


class CappingOut(ApiOut):
    type: str
    value: float


class MetricCreate(ApiIn):
    """``ratio``: the ratio of two per-unit aggregates over all exposed units (revenue per order:
    ``numerator`` the sum of ``purchase``, ``denominator`` the count of ``order``), analysed with
    the delta method; ``event`` is then the numerator's (give it or leave it out). ``mean`` is the
    ratio of one event's sum of value to its count. ``quantile``: the ``quantile`` (0 < q < 1, e.g.
    0.9 for p90) of ``event``'s value over the exposed units' events."""

    name: str
    aggregation: Aggregation
    event: str | None = None  # every aggregation but ratio: the event the metric reads
    numerator: RatioPart | None = None  # ratio only
    denominator: RatioPart | None = None  # ratio only
    quantile: float | None = None  # quantile only: p, 0 < p < 1
    direction: Direction = "higher"
    format: str = ""
    key: str | None = None
    description: str = ""
    capping: Capping | None = None
    currency: str | None = None  # sum and mean: count only events in this ISO 4217 currency


class MetricPatch(ApiIn):
    """What can change after creation (event and aggregation cannot: results would change
    meaning). ``capping: null`` removes capping, ``currency: null`` the currency."""

    name: str | UnsetType = UNSET
    direction: Direction | UnsetType = UNSET
    format: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    capping: Capping | UnsetType | None = UNSET
    currency: str | UnsetType | None = UNSET


class Metric(ApiOut):
    id: str
    key: str
    name: str
    event: str
    aggregation: str
    direction: str
    format: str
    description: str
    capping: CappingOut | None
    currency: str | None
    numerator: RatioPartOut | None  # ratio metrics only
    denominator: RatioPartOut | None  # ratio metrics only
    quantile: float | None  # quantile metrics only
    version: int
    created_at: datetime
    updated_at: datetime


class MetricList(ApiOut):
    metrics: list[Metric]
    count: int  # items on this page
    next_cursor: str | None = None
    has_more: bool = False


class Deleted(ApiOut):
    id: str
    key: str
    deleted: bool


class FlagMetricsIn(ApiIn):
    metrics: list[str]  # metric keys or ids


class FlagMetrics(ApiOut):
    flag: str
    metrics: list[str]
    baseline: int | None = None
    results: list[Any] | None = None
