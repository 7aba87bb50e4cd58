"""The checks of an experiment's fields as created or edited (its variants, a call to action's
fields, the page it runs on), each problem named by its field, collected before anything is
written so that one 422 names them all."""

from __future__ import annotations

from typing import Any

import msgspec

from control_plane.db.models import Experiment
from control_plane.domain import problems as base
from control_plane.domain.experiments import cta
from control_plane.domain.experiments import schemas as s
from shared.engine.experiments import (
    dimensions_problem,
)
from shared.wire.snapshot import WEIGHT_SCALE

CONTROL = "control"
MIN_VARIANTS, MAX_VARIANTS = 2, 6


def new_variants(problems: base.Problems, body: s.ExperimentCreate) -> list[dict[str, Any]]:
    given = body.variants
    if given is None:
        given = [s.VariantIn(key=CONTROL), s.VariantIn(key="treatment")]
    if not MIN_VARIANTS <= len(given) <= MAX_VARIANTS:
        problems.add("variants", f"an experiment has {MIN_VARIANTS} to {MAX_VARIANTS} variants")
    keys = [x.key for x in given]
    if keys.count(CONTROL) != 1:
        problems.add("variants", "exactly one variant has key 'control' (the baseline)")
    weighted = [x.weight is not None for x in given]
    if any(weighted) and not all(weighted):
        problems.add("variants", "give a weight on every variant or on none")
    out = []
    seen: set[str] = set()
    for i, item in enumerate(given):
        field = f"variants[{i}]"
        base.check_key(problems, f"{field}.key", item.key)
        if item.key in seen:
            problems.add(f"{field}.key", f"variant key {item.key!r} is used twice")
        seen.add(item.key)
        if len(item.content) > 10_000:
            problems.add(f"{field}.content", "at most 10000 characters")
        stored: dict[str, Any] = {
            "key": item.key,
            "content": item.content,
            **_cta_fields(problems, field, item, body.type),
        }
        if item.weight is not None:
            if not 0 <= item.weight <= 100:
                problems.add(f"{field}.weight", "a percentage from 0 to 100")
            stored["weight"] = round(item.weight * 1000)
        out.append(stored)
    if all(weighted) and out and sum(x.get("weight", 0) for x in out) != WEIGHT_SCALE:
        problems.add("variants", "weights must sum to 100")
    # the control variant first, so results list the baseline first
    return sorted(out, key=lambda x: x["key"] != CONTROL)


def _cta_fields(
    problems: base.Problems, field: str, item: s.VariantIn, kind: str
) -> dict[str, str]:
    """A variant's ``href``, ``bg`` and ``color`` as given: a cta's, each checked (``cta``)."""
    given = {name: getattr(item, name) for name in ("href", "bg", "color")}
    given = {name: value for name, value in given.items() if value is not None}
    for name, value in given.items():
        if kind != "cta":
            problems.add(f"{field}.{name}", "only cta variants have href, bg and color")
        elif (problem := cta.check(name, value)) is not None:
            problems.add(f"{field}.{name}", problem)
    return given


def check_url(problems: base.Problems, url: str) -> None:
    if url == "*" or url.startswith(("/", "http://", "https://")):
        return
    problems.add("url", "'*', a path such as /pricing or /pricing*, or a full URL")


def patch_problems(row: Experiment, body: s.ExperimentPatch) -> base.Problems:
    """What is wrong with the fields of an edit, each checked on its own."""
    problems = base.Problems()
    if body.name is not msgspec.UNSET:
        base.check_name(problems, "name", body.name)
    if body.description is not msgspec.UNSET and len(body.description) > 10_000:
        problems.add("description", "at most 10000 characters")
    if body.url is not msgspec.UNSET:
        check_url(problems, body.url)
    selector = row.selector if body.selector is msgspec.UNSET else body.selector
    if body.selector is not msgspec.UNSET:
        if row.type in {"element", "cta"} and not (selector or "").strip():
            problems.add("selector", f"a CSS selector is required for {row.type} experiments")
        if row.type == "manual" and selector is not None:
            problems.add("selector", "manual experiments do not touch the page: no selector")
    if body.goal is not msgspec.UNSET and not body.goal.strip():
        problems.add("goal", "the goal event name must not be blank")
    if body.dimensions is not msgspec.UNSET and (problem := dimensions_problem(body.dimensions)):
        problems.add(*problem)
    return problems


def edited_variants(
    problems: base.Problems, row: Experiment, given: list[s.VariantPatch]
) -> list[dict[str, Any]]:
    out = [dict(x) for x in row.variants]
    by_key = {x["key"]: x for x in out}
    seen: set[str] = set()
    for i, item in enumerate(given):
        field = f"variants[{i}]"
        stored = by_key.get(item.key)
        if stored is None:
            problems.add(f"{field}.key", f"no variant {item.key!r}: variants are not added here")
            continue
        if item.key in seen:
            problems.add(f"{field}.key", f"variant key {item.key!r} is listed twice")
        seen.add(item.key)
        if item.content is not msgspec.UNSET:
            if len(item.content) > 10_000:
                problems.add(f"{field}.content", "at most 10000 characters")
            stored["content"] = item.content
        for name in ("href", "bg", "color"):
            value = getattr(item, name)
            if value is msgspec.UNSET:
                continue
            if row.type != "cta" and value is not None:
                problems.add(f"{field}.{name}", "only cta variants have href, bg and color")
            elif value is None:
                stored.pop(name, None)
            elif (problem := cta.check(name, value)) is not None:
                problems.add(f"{field}.{name}", problem)
            else:
                stored[name] = value
    return out
