"""Charts drawn by the server as SVG geometry (the templates draw the shapes): a forest plot of
uplift intervals and a cumulative time series. Each comes with the sentence a screen reader
reads instead, stating the numbers, so the pictures need no script and hide nothing."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

WIDTH = 640
LABEL = 170  # room for the row labels on the left
ROW = 30


@dataclass
class ForestRow:
    label: str
    low: float
    high: float
    point: float
    significant: bool
    x_low: float = 0
    x_high: float = 0
    x_point: float = 0
    y: float = 0


@dataclass
class Forest:
    rows: list[ForestRow]
    zero_x: float
    height: float
    ticks: list[tuple[float, str]] = field(default_factory=list)
    summary: str = ""


def _fmt(value: float) -> str:
    return f"{value:+.1f}%"


def forest(blocks: list[tuple[str, dict[str, Any]]]) -> Forest | None:
    """One row per treatment of each results block (``(title, block)``: the primary metric
    first, then each guardrail) that has an interval."""
    rows = [
        ForestRow(
            f"{title}: {variant['key']}",
            float(variant["ciLow"]),
            float(variant["ciHigh"]),
            float(variant["uplift"]),
            bool(variant.get("significant")),
        )
        for title, block in blocks
        for variant in block.get("variants", [])
        if variant.get("ciLow") is not None
        and variant.get("ciHigh") is not None
        and variant.get("uplift") is not None
        and all(math.isfinite(float(variant[k])) for k in ("ciLow", "ciHigh", "uplift"))
    ]
    if not rows:
        return None
    low = min(0.0, *(r.low for r in rows))
    high = max(0.0, *(r.high for r in rows))
    span = (high - low) or 1.0
    low, high = low - span * 0.05, high + span * 0.05
    plot = WIDTH - LABEL - 20

    def x(value: float) -> float:
        return round(LABEL + (value - low) / (high - low) * plot, 1)

    for i, row in enumerate(rows):
        row.x_low, row.x_high, row.x_point = x(row.low), x(row.high), x(row.point)
        row.y = 20 + i * ROW
    step = _nice_step((high - low) / 5)
    first = math.ceil(low / step) * step
    ticks = []
    value = first
    while value <= high:
        ticks.append((x(value), f"{value:g}%"))
        value += step
    summary = "; ".join(
        f"{r.label}: uplift {_fmt(r.point)}, 95% interval {_fmt(r.low)} to {_fmt(r.high)}"
        f"{', significant' if r.significant else ''}"
        for r in rows
    )
    return Forest(rows, x(0.0), 20 + len(rows) * ROW + 10, ticks, summary)


def _nice_step(raw: float) -> float:
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    magnitude = 10 ** math.floor(math.log10(raw))
    for multiple in (1, 2, 5, 10):
        if raw <= multiple * magnitude:
            return float(multiple * magnitude)
    return float(10 * magnitude)


@dataclass
class Series:
    key: str
    points: str  # "x,y x,y …" for a polyline
    last: float
    colour: int
    markers: list[tuple[str, str]] = field(default_factory=list)  # (x, y) of each day


@dataclass
class TimeSeries:
    series: list[Series]
    height: int
    days: list[str]
    summary: str
    y_max: float


def time_series(days: list[dict[str, Any]], height: int = 160) -> TimeSeries | None:
    """The cumulative rate of each variant per day."""
    if not days:
        return None
    keys = [v["key"] for v in days[0]["variants"]]
    rates = {key: [] for key in keys}  # type: dict[str, list[float]]
    for day in days:
        by_key = {v["key"]: v for v in day["variants"]}
        for key in keys:
            rate = by_key.get(key, {}).get("rate")
            rates[key].append(float(rate) if rate is not None else 0.0)
    y_max = max((max(v) for v in rates.values() if v), default=0.0) or 1.0
    plot_w, plot_h = WIDTH - 60, height - 30
    count = len(days)

    def point(i: int, value: float) -> str:
        x = 50 + (plot_w * i / (count - 1) if count > 1 else plot_w / 2)
        y = 10 + plot_h * (1 - value / y_max)
        return f"{x:.1f},{y:.1f}"

    series = []
    for n, (key, values) in enumerate(rates.items()):
        points = [point(i, r) for i, r in enumerate(values)]
        markers = [(p.split(",")[0], p.split(",")[1]) for p in points]
        series.append(Series(key, " ".join(points), values[-1], n % 6, markers))
    summary = "; ".join(f"{s.key}: {s.last:.4g} on {days[-1]['date']}" for s in series)
    return TimeSeries(series, height, [d["date"] for d in days], summary, y_max)
