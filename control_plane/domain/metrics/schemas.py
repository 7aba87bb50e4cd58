from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from msgspec import UNSET, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut

Aggregation = Literal["sum", "mean", "count", "conversion"]
Direction = Literal["higher", "lower"]
CappingType = Literal["absolute", "percentile"]


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
    name: str
    event: str
    aggregation: Aggregation
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
