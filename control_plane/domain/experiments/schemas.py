"""Experiment request and response bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut

ExperimentType = Literal["element", "cta", "manual"]
Status = Literal["draft", "running", "stopped"]
Engine = Literal["frequentist", "bayesian", "sequential"]


class VariantIn(ApiIn):
    key: str
    content: str = ""
    href: str | None = None  # cta: where the button links
    bg: str | None = None  # cta: background colour
    color: str | None = None  # cta: text colour
    weight: float | None = None  # percent; all or none; equal shares when left out


class ExperimentCreate(ApiIn):
    name: str
    description: str = ""
    type: ExperimentType = "manual"
    key: str | None = None
    url: str = "*"
    selector: str | None = None
    goal: str | None = None
    stats_engine: Engine = "frequentist"
    variants: list[VariantIn] | None = None
    activate: bool = True
    cuped: bool = False
    # the context kind it randomizes on (an account: "organization"); set once, at creation
    unit_kind: str = "user"
    # the key of the layer it belongs to (its units are in no other experiment of the layer)
    layer: str | None = None
    traffic: float = 1.0  # its share of the layer's units, 0 < traffic <= 1 (only with a layer)
    # context attributes (names or references) each exposure captures, to split results by
    dimensions: list[str] = msgspec.field(default_factory=list)


class VariantPatch(ApiIn):
    """A variant's content, named by its key (variants are neither added nor removed)."""

    key: str
    content: str | UnsetType = UNSET
    href: str | UnsetType | None = UNSET
    bg: str | UnsetType | None = UNSET
    color: str | UnsetType | None = UNSET


class ExperimentPatch(ApiIn):
    """``name``, ``description``, ``statsEngine`` and ``cuped`` change at any time; ``url``,
    ``selector``, ``goal`` and the variants' content only while no unit is exposed; ``layer``
    (null: none) and ``traffic`` only while a draft; ``dimensions`` at any time (values are
    captured from then on)."""

    name: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    stats_engine: Engine | UnsetType = UNSET
    cuped: bool | UnsetType = UNSET
    url: str | UnsetType = UNSET
    selector: str | UnsetType | None = UNSET
    goal: str | UnsetType = UNSET
    variants: list[VariantPatch] | UnsetType = UNSET
    layer: str | UnsetType | None = UNSET
    traffic: float | UnsetType = UNSET
    dimensions: list[str] | UnsetType = UNSET


class ExperimentDeleted(ApiOut):
    id: str
    key: str
    deleted: bool


class StatusIn(ApiIn):
    status: Status | UnsetType = UNSET


class AssignIn(ApiIn):
    """``unit``: the key of the experiment's unit kind (a user's, an organization's…);
    ``unitKind``, when sent, must be that kind."""

    unit: str
    url: str | None = None
    unit_kind: str | None = None
    # the unit's context (LaunchDarkly's shape), whose attributes the experiment's dimensions read
    context: dict[str, Any] | None = None


class MetricsIn(ApiIn):
    """Fields left out keep their setting; ``primary: null`` clears the primary metric."""

    primary: str | msgspec.UnsetType | None = msgspec.UNSET
    guardrails: list[str] | msgspec.UnsetType = msgspec.UNSET


class Variant(ApiOut):
    key: str
    content: str
    href: str | None = None
    bg: str | None = None
    color: str | None = None
    weight: float | int | None = None


class LayerRange(ApiOut):
    """The part of its layer a started experiment holds, as fractions of the layer's buckets:
    units whose layer bucket / 100000 lies in ``[start, end)`` are in it."""

    start: float
    end: float


class Experiment(ApiOut):
    """``layer``: its layer's key (null: none); ``traffic``: its share of the layer (1 without
    one); ``range``: the fractions of the layer it holds, fixed when it first starts (null
    before; kept when it stops, though a stopped experiment holds nothing)."""

    id: str
    key: str
    name: str
    description: str
    type: str
    status: str
    url: str
    selector: str | None
    goal: str
    unit_kind: str
    stats_engine: str
    variants: list[Variant]
    primary: str | None
    guardrails: list[str]
    cuped: bool
    version: int
    started_at: datetime | None
    stopped_at: datetime | None
    created_at: datetime
    updated_at: datetime
    exposed: int
    layer: str | None
    traffic: float
    range: LayerRange | None
    dimensions: list[str]


class ExperimentWithResults(Experiment):
    results: dict[str, Any]


class ExperimentList(ApiOut):
    experiments: list[Experiment]
    count: int  # items on this page
    next_cursor: str | None = None
    has_more: bool = False


class Assignment(ApiOut):
    experiment: str
    variant: str
    assigned: bool
    reason: str
    content: str | None = None


class MetricsSetting(ApiOut):
    experiment: str
    primary: str | None
    guardrails: list[str]


class PowerIn(ApiIn):
    """Plan an experiment: ``baselineRate`` for a conversion metric, or ``baselineMean`` and
    ``baselineSd`` (per unit) for a mean; ``mde`` is relative (0.05 = +5 %)."""

    mde: float
    baseline_rate: float | None = None
    baseline_mean: float | None = None
    baseline_sd: float | None = None
    alpha: float = 0.05
    power: float = 0.8
    variants: int = 2


class PowerOut(ApiOut):
    metric: str  # conversion | mean
    units_per_variant: int
    total_units: int
    variants: int
    mde: float
    treated_value: float  # the rate or mean the plan detects
    alpha: float
    alpha_per_comparison: float
    power: float
    test: str


class Timeseries(ApiOut):
    """Per UTC day, cumulative per variant: exposed, conversions, rate, and for treatments the
    uplift, interval, p-value and significance the engine gave at the end of that day."""

    experiment: str
    metric: dict[str, Any]
    engine: str
    control: str
    capping: dict[str, Any] | None
    days: list[dict[str, Any]]
    notes: list[str]
    slice: TimeSlice | None = None


class TimeSlice(ApiOut):
    """The slice a time series is of: ``slice`` value (``value`` the attribute's value), other
    (values past the top ones) or none (units without a value)."""

    dimension: str
    value: str | None
    slice: str
