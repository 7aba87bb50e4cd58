from __future__ import annotations

from datetime import datetime
from typing import Literal

from control_plane.domain.schemas import ApiIn, ApiOut

Aggregation = Literal["sum", "mean", "count", "conversion"]
Direction = Literal["higher", "lower"]


class MetricCreate(ApiIn):
    name: str
    event: str
    aggregation: Aggregation
    direction: Direction = "higher"
    format: str = ""
    key: str | None = None
    description: str = ""


class Metric(ApiOut):
    id: str
    key: str
    name: str
    event: str
    aggregation: str
    direction: str
    format: str
    description: str
    created_at: datetime
    updated_at: datetime


class MetricList(ApiOut):
    metrics: list[Metric]
    count: int


class Deleted(ApiOut):
    id: str
    key: str
    deleted: bool
