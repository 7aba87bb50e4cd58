"""Layer and holdout request and response bodies. Shares (an experiment's traffic, a holdout's
share, a range's ends) are fractions of units: 0.05 is 5 %."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from msgspec import UNSET, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut

HoldoutStatus = Literal["running", "stopped"]


class LayerCreate(ApiIn):
    name: str
    key: str | None = None  # from the name when left out
    description: str = ""


class LayerPatch(ApiIn):
    name: str | UnsetType = UNSET
    description: str | UnsetType = UNSET


class LayerShare(ApiOut):
    """A running experiment's part of the layer: units whose layer bucket / 100000 lies in
    ``[start, end)``."""

    experiment: str
    start: float
    end: float


class Layer(ApiOut):
    """``running``: the parts of the layer its running experiments hold, lowest first;
    ``free``: the fraction no running experiment holds."""

    id: str
    key: str
    name: str
    description: str
    running: list[LayerShare]
    free: float
    version: int
    created_at: datetime
    updated_at: datetime


class LayerList(ApiOut):
    layers: list[Layer]
    count: int
    next_cursor: str | None = None
    has_more: bool = False


class Deleted(ApiOut):
    id: str
    key: str
    deleted: bool


class HoldoutCreate(ApiIn):
    """``share``: the fraction of units held out, 0 < share < 1 (0.05: 5 %); ``layer``: a
    layer's key to hold out of that layer's experiments only (left out: every experiment of the
    project); ``metrics``: metric keys or ids, the first one primary. Created running."""

    name: str
    share: float
    metrics: list[str]
    key: str | None = None
    description: str = ""
    layer: str | None = None


class HoldoutPatch(ApiIn):
    """``status``: ``stopped`` releases the held-out units into the experiments (results stay
    readable), ``running`` holds them out again. ``share`` and ``layer`` are fixed."""

    name: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    metrics: list[str] | UnsetType = UNSET
    status: HoldoutStatus | UnsetType = UNSET


class Holdout(ApiOut):
    """``exposed``: units recorded per group, ``holdout`` (held out) and ``general`` (the
    others), counted when they reach an experiment the holdout covers."""

    id: str
    key: str
    name: str
    description: str
    share: float
    layer: str | None
    metrics: list[str]
    status: str
    exposed: dict[str, int]
    version: int
    started_at: datetime | None
    stopped_at: datetime | None
    created_at: datetime
    updated_at: datetime


class HoldoutList(ApiOut):
    holdouts: list[Holdout]
    count: int
    next_cursor: str | None = None
    has_more: bool = False


class HoldoutResults(ApiOut):
    """The holdout and the combined effect of everything launched in its scope on its metrics:
    the ``results`` block of an experiment's, with arms ``holdout`` (the control) and
    ``general``."""

    holdout: Holdout
    results: dict[str, Any]
