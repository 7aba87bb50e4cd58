"""A change request's items as stored (JSON, without nulls), what each names, its base and
desired state, and what moved of it since it was proposed."""

from __future__ import annotations

from typing import Any

import msgspec

from control_plane.db.models import Environment
from control_plane.domain.changes import schemas as s
from control_plane.domain.common import Scope, to_json
from control_plane.domain.flags.reads import get_flag, rules_out, settings_out
from control_plane.domain.rows import flag_setting
from control_plane.domain.segments.services import get_segment

FIELDS = ("enabled", "offVariation", "fallthrough", "targets", "prerequisites", "rules")
SEGMENT_FIELDS = (
    "name",
    "description",
    "included",
    "excluded",
    "includedContexts",
    "excludedContexts",
    "rules",
)
# the flag's own, in PATCH /flags/{key}'s order, then archived
FLAG_FIELDS = (
    "name",
    "description",
    "tags",
    "temporary",
    "clientSide",
    "bucketBy",
    "variations",
    "archived",
)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def is_own(item: dict[str, Any]) -> bool:
    """An item that changes the flag itself (``flagPatch``, ``archived``), not a setting."""
    return "flagPatch" in item or "archived" in item


def _stored_variations(patch: dict[str, Any]) -> dict[str, Any]:
    """A flag patch without its nulls, but a variation's value as given (JSON may hold null)."""
    out = {k: v for k, v in patch.items() if v is not None and k != "variations"}
    if patch.get("variations") is not None:
        out["variations"] = [
            {k: v for k, v in x.items() if v is not None or k == "value"}
            for x in patch["variations"]
        ]
    return out


def stored_item(item: s.ChangeIn) -> dict[str, Any]:
    if item.flag_patch is not None or item.archived is not None:
        own: dict[str, Any] = {"flag": item.flag}
        if item.flag_patch is not None:
            own["flagPatch"] = _stored_variations(msgspec.to_builtins(item.flag_patch))
        if item.archived is not None:
            own["archived"] = item.archived
        return own
    if item.segment is not None:
        patch = msgspec.to_builtins(item.patch) if item.patch is not None else {}
        return {"segment": item.segment, "patch": _without_nulls(patch)}
    out: dict[str, Any] = {"flag": item.flag}
    if item.settings is not None:
        out["settings"] = _without_nulls(msgspec.to_builtins(item.settings))
    if item.rules is not None:
        out["rules"] = _without_nulls(msgspec.to_builtins(item.rules))
    return out


async def _live(scope: Scope, flag_key: str, env_key: str) -> tuple[int, dict[str, Any]]:
    """The flag setting's version and state, in the API's shapes, field by field."""
    flag, env, setting = await flag_setting(scope, flag_key, env_key)
    settings = to_json(settings_out(flag, env.key, setting))
    state = {name: settings[name] for name in FIELDS[:-1]}
    state["rules"] = to_json(rules_out(setting.rules))
    return setting.version, state


async def _live_segment(scope: Scope, key: str) -> tuple[int, dict[str, Any]]:
    """The segment's version and state, in the API's shape, field by field."""
    out = to_json(await get_segment(scope, key))
    return int(out["version"]), {name: out[name] for name in SEGMENT_FIELDS}


async def _live_flag(scope: Scope, key: str) -> tuple[int, dict[str, Any]]:
    """The flag's own version and fields, in the API's shape."""
    out = to_json(await get_flag(scope, key))
    return int(out["version"]), {name: out[name] for name in FLAG_FIELDS}


def base_key(item: dict[str, Any]) -> str:
    """Where ``bases`` keeps an item's base: a flag setting's under the flag's key, the flag's
    own under ``flag:`` and its key, a segment's under ``segment:`` and its key."""
    if "segment" in item:
        return f"segment:{item['segment']}"
    return f"flag:{item['flag']}" if is_own(item) else str(item["flag"])


def item_name(item: dict[str, Any]) -> str:
    return f"segment {item['segment']!r}" if "segment" in item else f"flag {item['flag']!r}"


def _fields(item: dict[str, Any]) -> tuple[str, ...]:
    if "segment" in item:
        return SEGMENT_FIELDS
    return FLAG_FIELDS if is_own(item) else FIELDS


async def live_item(
    scope: Scope, env: Environment, item: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    if "segment" in item:
        return await _live_segment(scope, item["segment"])
    if is_own(item):
        return await _live_flag(scope, item["flag"])
    return await _live(scope, item["flag"], env.key)


def desired_state(item: dict[str, Any]) -> dict[str, Any]:
    """What the item sets, field by field, in the API's field order (JSONB keeps no order)."""
    if "segment" in item:
        given = item.get("patch", {})
        return {name: given[name] for name in SEGMENT_FIELDS if name in given}
    if is_own(item):
        own = {**item.get("flagPatch", {})}
        if "archived" in item:
            own["archived"] = item["archived"]
        return {name: own[name] for name in FLAG_FIELDS if name in own}
    desired = {**item.get("settings", {})}
    if "rules" in item:
        desired["rules"] = item["rules"]
    return desired


def moved_fields(
    item: dict[str, Any], base_state: dict[str, Any], live: dict[str, Any]
) -> list[s.Moved]:
    return [
        s.Moved(
            flag=item.get("flag"),
            segment=item.get("segment"),
            field=name,
            base=base_state.get(name),
            live=live.get(name),
        )
        for name in _fields(item)
        if base_state.get(name) != live.get(name)
    ]
