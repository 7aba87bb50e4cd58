"""Experiments in a document: their canonical form, what cannot change (refused naming the path,
as the experiments' service would refuse it), and the steps that create or change one, each one
call of the experiments' own services (``create_experiment``, ``patch_experiment``,
``set_metrics``, ``set_status``). Experiments are never pruned: deleting one deletes its
exposures, which no file brings back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from control_plane.domain.experiments import schemas as ex
from control_plane.domain.experiments import services as experiments
from control_plane.domain.experiments.canonical import CONTROL
from control_plane.domain.problems import Problems
from control_plane.domain.projectfile import compare
from control_plane.domain.projectfile import schemas as s
from control_plane.domain.projectfile.export import plain
from control_plane.domain.projectfile.steps import Phase, Run

if TYPE_CHECKING:
    from control_plane.domain.projectfile.planner import Planner

PATCHABLE = (
    "name",
    "description",
    "statsEngine",
    "cuped",
    "url",
    "selector",
    "goal",
    "variants",
    "layer",
    "traffic",
    "dimensions",
)
CREATED = (*PATCHABLE, "type", "unitKind")
PAGE = ("url", "selector", "goal", "variants")  # fixed once units are exposed
# the order of an experiment's steps: back to draft, made or edited, its metrics, started/stopped
TO_DRAFT, WRITE, METRICS, STATUS = 0, 1, 2, 3


def experiment(given: s.ExperimentDoc, live: s.ExperimentDoc | None) -> dict[str, Any]:
    """Defaults as the service gives them: the key as name, ``control`` and ``treatment``,
    the control variant first, ``cta_click`` as an element's or a cta's goal; a status or a
    manual experiment's goal left out is as it is."""
    out: dict[str, Any] = plain(given)
    del out["key"]
    out["name"] = given.name if given.name is not None else given.key
    status = given.status or (live.status if live is not None else None)
    out["status"] = status or "draft"
    goal = given.goal
    if goal is None:
        goal = live.goal if live is not None else None
    if goal is None and given.type != "manual":
        goal = experiments.DEFAULT_GOAL
    out.pop("goal", None)
    if goal is not None:
        out["goal"] = goal
    variants = given.variants
    if variants is None:
        variants = [ex.VariantIn(key=CONTROL), ex.VariantIn(key="treatment")]
    given_variants: list[dict[str, Any]] = [plain(v) for v in variants]
    out["variants"] = sorted(given_variants, key=lambda v: v["key"] != CONTROL)
    return out


def _shape(after: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(v["key"], v.get("weight")) for v in after["variants"]]


def _changed(before: Any, after: Any) -> bool:
    return bool(compare.diff(before, after))


def _status(problems: Problems, path: str, frm: str, to: str, exposed: int) -> None:
    if frm != to and (frm, to) not in experiments.TRANSITIONS:
        hint = ": start it first (running)" if (frm, to) == ("draft", "stopped") else ""
        problems.add(f"{path}.status", f"an experiment cannot go from {frm} to {to}{hint}")
    elif (frm, to) == ("running", "draft") and exposed:
        problems.add(
            f"{path}.status",
            f"units are already exposed ({exposed}): stop the experiment instead of moving it "
            "back to draft",
        )


def _fixed(problems: Problems, path: str, old: dict[str, Any], after: dict[str, Any]) -> None:
    for name in ("type", "unitKind"):
        if after[name] != old[name]:
            problems.add(
                f"{path}.{name}",
                f"cannot change once the experiment is made (it is {old[name]!r})",
            )
    if _changed(_shape(old), _shape(after)):
        problems.add(
            f"{path}.variants",
            "variants' keys and weights cannot change once the experiment is made (they are "
            + ", ".join(f"{k} {w if w is not None else 'equal share'}" for k, w in _shape(old))
            + "): create a new experiment instead",
        )


def _moving(
    problems: Problems, path: str, old: dict[str, Any], after: dict[str, Any], exposed: int
) -> None:
    """What a started experiment keeps: its page once units are exposed, its layer and traffic
    unless it is, or goes back to, a draft."""
    if exposed:
        for name in PAGE:
            reported = name == "variants" and _shape(old) != _shape(after)  # by _fixed
            if _changed(old.get(name), after.get(name)) and not reported:
                problems.add(
                    f"{path}.{name}",
                    f"cannot change once units are exposed ({exposed}): start a new experiment "
                    "instead",
                )
    draft = old["status"] == "draft" or (after["status"] == "draft" and not exposed)
    for name in ("layer", "traffic"):
        if not draft and _changed(old.get(name), after.get(name)):
            problems.add(
                f"{path}.{name}",
                f"changes only while the experiment is a draft; it is {old['status']}: create "
                "a new experiment instead",
            )


def check(
    problems: Problems, doc: s.ProjectDoc, live: s.ProjectDoc, exposed: dict[str, int]
) -> None:
    """What the experiments' service would refuse of a change to an existing experiment, named
    by its path; a new experiment is checked by the service when the plan runs its steps."""
    seen: set[str] = set()
    before = {e.key: e for e in live.experiments}
    for i, given in enumerate(doc.experiments):
        path = f"experiments[{i}]"
        if given.key in seen:
            problems.add(f"{path}.key", f"{given.key!r} is listed twice")
        seen.add(given.key)
        live_one = before.get(given.key)
        if live_one is None:
            continue
        old, after = experiment(live_one, live_one), experiment(given, live_one)
        count = exposed.get(given.key, 0)
        _fixed(problems, path, old, after)
        _status(problems, path, old["status"], after["status"], count)
        _moving(problems, path, old, after, count)


def _create(key: str, after: dict[str, Any]) -> Run:
    fields = {name: after.get(name) for name in CREATED}
    body = msgspec.convert(
        {**fields, "key": key, "activate": after["status"] != "draft"}, ex.ExperimentCreate
    )
    return lambda unit: experiments.create_experiment(unit.scope, body)


def _variant_patch(variant: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": variant["key"],
        "content": variant.get("content", ""),
        **{name: variant.get(name) for name in ("href", "bg", "color")},
    }


def _patch(key: str, after: dict[str, Any], names: set[str]) -> Run:
    """A field left out (``selector``, ``layer``) is removed: sent as null."""
    fields = {name: after.get(name) for name in PATCHABLE if name in names}
    if "variants" in fields:
        fields["variants"] = [_variant_patch(v) for v in after["variants"]]
    body = msgspec.convert(fields, ex.ExperimentPatch)
    return lambda unit: experiments.patch_experiment(unit.scope, key, body)


def _metrics(key: str, after: dict[str, Any]) -> Run:
    body = ex.MetricsIn(primary=after.get("primary"), guardrails=after["guardrails"])
    return lambda unit: experiments.set_metrics(unit.scope, key, body)


def _set_status(key: str, status: ex.Status) -> Run:
    body = ex.StatusIn(status=status)
    return lambda unit: experiments.set_status(unit.scope, key, body)


def plan(p: Planner) -> None:
    live = {e.key: e for e in p.live.doc.experiments}
    for i, given in enumerate(p.doc.experiments):
        before, where = live.get(given.key), f"experiments[{i}]"
        after = experiment(given, before)
        status = after["status"]
        if before is None:
            p.note("experiment", given.key, "create", compare.diff({}, after))
            p.step(Phase.EXPERIMENT, where, _create(given.key, after), WRITE)
            if after.get("primary") is not None or after["guardrails"]:
                p.step(Phase.EXPERIMENT, where, _metrics(given.key, after), METRICS)
            if status == "stopped":  # created running, then stopped
                p.step(Phase.EXPERIMENT, where, _set_status(given.key, status), STATUS)
            continue
        changes = compare.diff(experiment(before, before), after)
        if not changes:
            p.unchanged.append(f"experiment {given.key}")
            continue
        p.note("experiment", given.key, "update", changes)
        names = compare.fields(changes)
        if "status" in names and status == "draft":
            p.step(Phase.EXPERIMENT, where, _set_status(given.key, status), TO_DRAFT)
        if names & set(PATCHABLE):
            p.step(Phase.EXPERIMENT, where, _patch(given.key, after, names), WRITE)
        if names & {"primary", "guardrails"}:
            p.step(Phase.EXPERIMENT, where, _metrics(given.key, after), METRICS)
        if "status" in names and status != "draft":
            p.step(Phase.EXPERIMENT, where, _set_status(given.key, status), STATUS)
    p.never_pruned("experiment", live, (e.key for e in p.doc.experiments))
