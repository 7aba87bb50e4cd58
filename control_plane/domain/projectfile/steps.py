"""The writes a plan is made of, each one call of another domain's own service (validated,
audited, versioned and published exactly as the API's), and the order they run in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import msgspec

from control_plane.domain.common import Scope
from control_plane.domain.environments import schemas as envs
from control_plane.domain.environments import services as environments
from control_plane.domain.flags import schemas as fl
from control_plane.domain.flags import services as flags
from control_plane.domain.metrics import schemas as mt
from control_plane.domain.metrics import services as metrics
from control_plane.domain.segments import schemas as sg
from control_plane.domain.segments import services as segments

Run = Callable[[Scope], Awaitable[Any]]


class Phase(IntEnum):
    """Environments first (a flag's setting there needs them), segments before the rules that
    use them, flags restored before their settings change and archived after, prerequisites
    before the flags that name them, segments deleted once no rule uses them, a new
    environment's protection last (it starts as the document says). Layers and holdouts after
    the metrics they name, experiments after their layers and before a metric they stop using
    is deleted. Webhooks, which nothing else names, at the end."""

    ENVIRONMENT = 0
    SEGMENT = 1
    METRIC = 2
    LAYER = 3
    EXPERIMENT = 4
    FLAG = 5
    SETTING = 6
    ARCHIVE = 7
    DELETE = 8
    PROTECT = 9
    WEBHOOK = 10


@dataclass(frozen=True, slots=True)
class Step:
    phase: Phase
    order: int
    where: str  # the document's path the step comes from, to name in an error
    run: Run


def _some(fields: dict[str, Any], names: set[str]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k in names}


def create_environment(key: str, after: dict[str, Any]) -> Run:
    body = envs.EnvironmentCreate(key=key, name=after["name"], critical=after["critical"])
    return lambda scope: environments.create_environment(scope, body)


def patch_environment(key: str, after: dict[str, Any], names: set[str]) -> Run:
    body = msgspec.convert(_some(after, names), envs.EnvironmentPatch)
    return lambda scope: environments.patch_environment(scope, key, body)


def create_segment(key: str, after: dict[str, Any]) -> Run:
    body = msgspec.convert({**after, "key": key}, sg.SegmentCreate)
    return lambda scope: segments.create_segment(scope, body)


def segment_patch(after: dict[str, Any], names: set[str]) -> sg.SegmentPatch:
    return msgspec.convert(_some(after, names), sg.SegmentPatch)


def patch_segment(key: str, after: dict[str, Any], names: set[str]) -> Run:
    body = segment_patch(after, names)
    return lambda scope: segments.patch_segment(scope, key, body)


def delete_segment(key: str) -> Run:
    return lambda scope: segments.delete_segment(scope, key)


def create_metric(key: str, after: dict[str, Any]) -> Run:
    body = msgspec.convert({**after, "key": key}, mt.MetricCreate)
    return lambda scope: metrics.create_metric(scope, body)


def update_metric(key: str, after: dict[str, Any], names: set[str]) -> Run:
    """A field left out (``capping``, ``currency``) is removed: sent as null."""
    body = msgspec.convert({name: after.get(name) for name in names}, mt.MetricPatch)
    return lambda scope: metrics.update_metric(scope, key, body)


def delete_metric(key: str) -> Run:
    return lambda scope: metrics.delete_metric(scope, key)


def create_flag(after: dict[str, Any]) -> Run:
    body = msgspec.convert({k: v for k, v in after.items() if k != "archived"}, fl.FlagCreate)
    return lambda scope: flags.create_flag(scope, body)


def flag_patch_body(after: dict[str, Any], names: set[str], idxs: set[int]) -> fl.FlagPatch:
    """``idxs``: the live variations'; a variation added is sent without its idx, which the
    flags' service takes as "add" (it is given the next free idx)."""
    fields = _some(after, names)
    if "variations" in fields:
        fields["variations"] = [
            v if v["idx"] in idxs else {k: x for k, x in v.items() if k != "idx"}
            for v in fields["variations"]
        ]
    return msgspec.convert(fields, fl.FlagPatch)


def patch_flag(key: str, after: dict[str, Any], names: set[str], idxs: set[int]) -> Run:
    body = flag_patch_body(after, names, idxs)
    return lambda scope: flags.patch_flag(scope, key, body)


def archive_flag(key: str) -> Run:
    return lambda scope: flags.archive_flag(scope, key)


def restore_flag(key: str) -> Run:
    return lambda scope: flags.restore_flag(scope, key)


def settings_body(after: dict[str, Any], names: set[str]) -> fl.EnvironmentSettingsIn:
    return msgspec.convert(_some(after, names - {"rules"}), fl.EnvironmentSettingsIn)


def rules_body(after: dict[str, Any]) -> list[fl.RuleIn]:
    return msgspec.convert(after["rules"], list[fl.RuleIn])


def put_setting(key: str, env: str, after: dict[str, Any], names: set[str]) -> Run:
    settings = settings_body(after, names) if names - {"rules"} else None
    rules = fl.RulesIn(rules=rules_body(after)) if "rules" in names else None

    async def run(scope: Scope) -> None:
        if settings is not None:
            await flags.put_settings(scope, key, env, settings)
        if rules is not None:
            await flags.put_rules(scope, key, env, rules)

    return run


def topological(keys: list[str], needs: dict[str, list[str]]) -> dict[str, int]:
    """Each key's place with what it needs first (a cycle is left to the services to refuse)."""
    placed: dict[str, int] = {}
    visiting: set[str] = set()

    def visit(key: str) -> None:
        if key in placed or key in visiting or key not in needs:
            return
        visiting.add(key)
        for other in needs[key]:
            visit(other)
        placed[key] = len(placed)

    for key in keys:
        visit(key)
    return placed
