"""Layers and holdouts in a document: their canonical form, what cannot change (a holdout's
share and layer, refused naming the path), and the steps that create or change them, each one
call of the layers' own services (``create_layer``, ``update_layer``, ``create_holdout``,
``update_holdout``). Neither is pruned: a layer is named by experiments, and deleting a holdout
deletes its exposures, which no file brings back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from control_plane.domain.layers import schemas as ly
from control_plane.domain.layers import services as layers
from control_plane.domain.problems import Problems
from control_plane.domain.projectfile import compare
from control_plane.domain.projectfile import schemas as s
from control_plane.domain.projectfile.export import plain
from control_plane.domain.projectfile.steps import Phase, Run

if TYPE_CHECKING:
    from control_plane.domain.projectfile.planner import Planner

FIXED_HOLDOUT_FIELDS = ("share", "layer")
# the order within Phase.LAYER: layers, then the holdouts that may name them
LAYERS, HOLDOUTS, HOLDOUT_STATUS = 0, 1, 2


def layer(given: s.LayerDoc) -> dict[str, Any]:
    return {
        "name": given.name if given.name is not None else given.key,
        "description": given.description,
    }


def holdout(given: s.HoldoutDoc, live: s.HoldoutDoc | None) -> dict[str, Any]:
    """The key as name; a status left out is as it is (a new holdout runs)."""
    out: dict[str, Any] = plain(given)
    del out["key"]
    out["name"] = given.name if given.name is not None else given.key
    out["status"] = given.status or (live.status if live is not None else None) or "running"
    return out


def _twice(problems: Problems, name: str, keys: list[str]) -> None:
    for i, key in enumerate(keys):
        if key in keys[:i]:
            problems.add(f"{name}[{i}].key", f"{key!r} is listed twice")


def check(problems: Problems, doc: s.ProjectDoc, live: s.ProjectDoc) -> None:
    """Keys listed twice, and a holdout's share or layer changed (fixed once it is made)."""
    _twice(problems, "layers", [x.key for x in doc.layers])
    _twice(problems, "holdouts", [x.key for x in doc.holdouts])
    before = {h.key: holdout(h, h) for h in live.holdouts}
    for i, given in enumerate(doc.holdouts):
        old = before.get(given.key)
        if old is None:
            continue
        after = holdout(given, None)
        for name in FIXED_HOLDOUT_FIELDS:
            if compare.diff(old.get(name), after.get(name)):
                problems.add(
                    f"holdouts[{i}].{name}",
                    f"cannot change once the holdout is made (it is {old.get(name)!r}): create a "
                    "new holdout instead",
                )


def _create_layer(key: str, after: dict[str, Any]) -> Run:
    body = ly.LayerCreate(key=key, name=after["name"], description=after["description"])
    return lambda unit: layers.create_layer(unit.scope, body)


def _update_layer(key: str, after: dict[str, Any]) -> Run:
    body = ly.LayerPatch(name=after["name"], description=after["description"])
    return lambda unit: layers.update_layer(unit.scope, key, body)


def _create_holdout(key: str, after: dict[str, Any]) -> Run:
    fields = {k: v for k, v in after.items() if k != "status"}
    body = msgspec.convert({**fields, "key": key}, ly.HoldoutCreate)
    return lambda unit: layers.create_holdout(unit.scope, body)


def _update_holdout(key: str, after: dict[str, Any], names: set[str]) -> Run:
    body = msgspec.convert({k: v for k, v in after.items() if k in names}, ly.HoldoutPatch)
    return lambda unit: layers.update_holdout(unit.scope, key, body)


def _layers(p: Planner) -> None:
    live = {x.key: x for x in p.live.doc.layers}
    for i, given in enumerate(p.doc.layers):
        before, after, where = live.get(given.key), layer(given), f"layers[{i}]"
        if before is None:
            p.note("layer", given.key, "create", compare.diff({}, after))
            p.step(Phase.LAYER, where, _create_layer(given.key, after), LAYERS)
            continue
        changes = compare.diff(layer(before), after)
        if not changes:
            p.unchanged.append(f"layer {given.key}")
            continue
        p.note("layer", given.key, "update", changes)
        p.step(Phase.LAYER, where, _update_layer(given.key, after), LAYERS)
    p.never_pruned("layer", live, (x.key for x in p.doc.layers))


def _holdouts(p: Planner) -> None:
    live = {x.key: x for x in p.live.doc.holdouts}
    for i, given in enumerate(p.doc.holdouts):
        before, where = live.get(given.key), f"holdouts[{i}]"
        after = holdout(given, before)
        if before is None:
            p.note("holdout", given.key, "create", compare.diff({}, after))
            p.step(Phase.LAYER, where, _create_holdout(given.key, after), HOLDOUTS)
            if after["status"] == "stopped":  # created running, then stopped
                run = _update_holdout(given.key, after, {"status"})
                p.step(Phase.LAYER, where, run, HOLDOUT_STATUS)
            continue
        changes = compare.diff(holdout(before, before), after)
        if not changes:
            p.unchanged.append(f"holdout {given.key}")
            continue
        p.note("holdout", given.key, "update", changes)
        run = _update_holdout(given.key, after, compare.fields(changes))
        p.step(Phase.LAYER, where, run, HOLDOUTS)
    p.never_pruned("holdout", live, (x.key for x in p.doc.holdouts))


def plan(p: Planner) -> None:
    _layers(p)
    _holdouts(p)
