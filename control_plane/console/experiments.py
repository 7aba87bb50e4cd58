"""Experiments: the list, create, start and stop, metrics, dimensions, and the results page
(with the results split by a dimension, as the API's ``?dimension=`` gives them)."""

from __future__ import annotations

from typing import Any

from litestar import Request, get, post
from litestar.params import FromPath
from litestar.response import Response, Template

from control_plane.console import forms
from control_plane.console.charts import forest, time_series
from control_plane.console.pages import ListPage, write_or_show
from control_plane.console.web import FRAGMENT, Who, error_page, field_errors, page, reading
from control_plane.domain.common import Scope
from control_plane.domain.experiments import results as experiment_results
from control_plane.domain.experiments import schemas as s
from control_plane.domain.experiments import services
from control_plane.domain.metrics import services as metrics
from control_plane.domain.paging import MAX_LIMIT
from control_plane.errors import ApiError

PAGE_SIZE = 50
VARIANT_ROWS = 4
FIELDS = ("key", "content", "href", "bg", "color", "weight")


class ExperimentPages(ListPage):
    path = "/console/experiments"
    template = "experiments.html"
    title = "Experiments"

    async def context(self, scope: Scope, request: Request[Any, Any, Any]) -> dict[str, Any]:
        found = await services.list_experiments(
            scope,
            limit=PAGE_SIZE,
            cursor=request.query_params.get("cursor") or None,
            status=None,
            type=None,
            q=None,
        )
        return {
            "experiments": found.items,
            "next_cursor": found.next_cursor,
            "rows": range(VARIANT_ROWS),
        }

    @get("/")
    async def experiments(self, request: Request[Any, Any, Any], who: Who) -> Template:
        return await self.listing(request, who)

    @post("/")
    async def create(self, request: Request[Any, Any, Any], who: Who) -> Response[Any]:
        form = await request.form()
        variants = []
        for i in range(VARIANT_ROWS):
            values = {f: forms.text(form, f"variants[{i}].{f}").strip() for f in FIELDS}
            if not values["key"]:
                continue
            weight = None
            if values["weight"]:
                try:
                    weight = float(values["weight"])
                except ValueError:
                    weight = -1.0  # the API names the field and the range
            variants.append(
                s.VariantIn(
                    key=values["key"],
                    content=values["content"],
                    href=values["href"] or None,
                    bg=values["bg"] or None,
                    color=values["color"] or None,
                    weight=weight,
                )
            )
        kind = forms.text(form, "type") or "manual"
        body = s.ExperimentCreate(
            name=forms.text(form, "name").strip(),
            key=forms.text(form, "key").strip() or None,
            type=kind if kind in ("element", "cta", "manual") else "manual",  # type: ignore[arg-type]
            url=(forms.text(form, "url") or "*").strip() or "*",
            selector=forms.text(form, "selector").strip() or None,
            goal=forms.text(form, "goal").strip() or None,
            variants=variants or None,
            activate=forms.text(form, "activate") == "on",
            unit_kind=forms.text(form, "unitKind").strip() or "user",
            dimensions=forms.names_of(forms.text(form, "dimensions")),
        )
        return await self.write(
            request,
            who,
            lambda scope: services.create_experiment(scope, body),
            done=lambda created: f"/console/experiments/{created.key}",
            form=form,
        )

    @get("/{key:str}")
    async def experiment(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Template:
        return await self._show(request, who, key)

    async def _show(
        self, request: Request[Any, Any, Any], who: Who, key: str, status: int = 200, **extra: Any
    ) -> Template:
        split = split_query(request) if request.method == "GET" else {}
        split_error = None
        async with reading(request, who) as scope:
            try:
                found = await experiment_results.with_results(
                    scope,
                    key,
                    dimension=split.get("dimension"),
                    top=_number(split.get("top")),
                    min_units=_number(split.get("minUnits")),
                )
            except ApiError as exc:
                if exc.status != 422 or not split.get("dimension"):
                    return error_page(request, who, exc, key)
                # the split the API refused (its message, beside the form), the totals all the same
                split_error, status = exc, exc.status
                try:
                    found = await experiment_results.with_results(scope, key)
                except ApiError as again:
                    return error_page(request, who, again, key)
            defined = (
                await metrics.list_metrics(scope, limit=MAX_LIMIT, cursor=None, event=None)
            ).items
        results = found.results
        blocks = [(results.get("metric", {}).get("name", "primary"), results)]
        blocks += [
            (g.get("metric", {}).get("name", "guardrail"), g) for g in results.get("guardrails", [])
        ]
        return page(
            request,
            who,
            "experiment.html",
            status=status,
            title=found.name,
            experiment=found,
            results=results,
            forest=forest(blocks),
            metrics=defined,
            split=split,
            split_error=split_error.message if split_error else None,
            slices=slice_tables(results),
            **extra,
        )

    @get("/{key:str}/daily")
    async def daily(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Template:
        """The primary metric's cumulative time series: a page of its own, and the part of the
        results page its script loads after the results (``X-Vane-Fragment``), so that the
        results come as fast as the API's and the series, computed apart, follows."""
        async with reading(request, who) as scope:
            try:
                series = await experiment_results.timeseries(scope, key, None)
            except ApiError as exc:
                return error_page(request, who, exc, key)
        template = "_daily.html" if request.headers.get(FRAGMENT) else "experiment_daily.html"
        return page(
            request,
            who,
            template,
            title=f"{key} per day",
            key=key,
            metric_name=series.metric.get("name", "primary"),
            series=time_series(series.days),
        )

    @post("/{key:str}/status")
    async def status(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        wanted = forms.text(form, "status")
        body = s.StatusIn(status=wanted)  # type: ignore[arg-type]
        return await write_or_show(
            request,
            who,
            lambda scope: services.set_status(scope, key, body),
            done=lambda _: f"/console/experiments/{key}",
            shown=lambda error: self._show(request, who, key, error.status, error=error.message),
            version=forms.text(form, "version"),
        )

    @post("/{key:str}/dimensions")
    async def dimensions(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Response[Any]:
        """The "split results by" field: the experiment's dimensions, edited as the API's
        ``PATCH {"dimensions": [...]}`` (checked, versioned and audited by the same service)."""
        form = await request.form()
        typed = forms.text(form, "dimensions")
        body = s.ExperimentPatch(dimensions=forms.names_of(typed))
        return await write_or_show(
            request,
            who,
            lambda scope: services.patch_experiment(scope, key, body),
            done=lambda _: f"/console/experiments/{key}#dimensions",
            shown=lambda error: self._show(
                request,
                who,
                key,
                error.status,
                dimensions_error=error.message,
                dimensions_errors=field_errors(error.details),
                dimensions_typed=typed,
            ),
            version=forms.text(form, "version"),
        )

    @post("/{key:str}/metrics")
    async def choose_metrics(
        self, request: Request[Any, Any, Any], who: Who, key: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        primary = forms.text(form, "primary") or None
        guardrails = forms.texts(form, "guardrails")
        body = s.MetricsIn(primary=primary, guardrails=guardrails)
        return await write_or_show(
            request,
            who,
            lambda scope: services.set_metrics(scope, key, body),
            done=lambda _: f"/console/experiments/{key}#results",
            shown=lambda error: self._show(request, who, key, error.status, error=error.message),
        )


SPLIT_FIELDS = ("dimension", "top", "minUnits")


def split_query(request: Request[Any, Any, Any]) -> dict[str, str]:
    """The results page's "split by" form (a GET, the API's own query parameters), as given."""
    found = {name: (request.query_params.get(name) or "").strip() for name in SPLIT_FIELDS}
    return {name: value for name, value in found.items() if value}


def _number(text: str | None) -> int | None:
    """A count as typed; anything not a whole number goes to the API as one it refuses (0), so
    that its message, naming the field and the range, is the one shown."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return 0


def slice_tables(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The API's results by dimension (``results["dimension"]``: per slice, per metric) turned
    to one table per metric, one row per slice; nothing is computed here."""
    split = results.get("dimension")
    if not split:
        return []
    tables: list[dict[str, Any]] = []
    for piece in split["slices"]:
        for position, block in enumerate(piece["metrics"]):
            if position == len(tables):
                tables.append({"metric": block["metric"], "rows": []})
            variants = {v["key"]: v for v in block["variants"]}
            tables[position]["rows"].append({"slice": piece, "variants": variants})
    for table in tables:
        table["tested"] = sum(1 for row in table["rows"] if row["slice"]["tested"])
    return tables
