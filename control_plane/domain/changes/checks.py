"""The checks of a change request as proposed or edited (its text, when it applies, each
item against what is live), its dry run through the flags' and segments' services, and who may
act on it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec
from sqlalchemy import select

from control_plane.db.models import ChangeRequest, Environment, Flag
from control_plane.db.types import utcnow
from control_plane.domain import problems as base
from control_plane.domain.changes import schemas as s
from control_plane.domain.changes.items import (
    base_key,
    item_name,
    live_item,
)
from control_plane.domain.common import Scope
from control_plane.domain.flags import schemas as flags
from control_plane.domain.flags.services import (
    archive_flag,
    patch_flag,
    restore_flag,
)
from control_plane.domain.flags.settings import put_rules, put_settings
from control_plane.domain.segments import schemas as segments
from control_plane.domain.segments.services import get_segment, patch_segment
from control_plane.errors import ApiError, FieldError
from control_plane.publishing.change import Change

MAX_CHANGES = 50
PAST_SLACK = timedelta(minutes=1)
HORIZON = timedelta(days=5 * 366)
OWN = "own_change_request"


def check_text(problems: base.Problems, title: str | None, description: str | None) -> None:
    if title is not None:
        base.check_name(problems, "title", title)
    if description is not None and len(description) > 10_000:
        problems.add("description", "at most 10000 characters")


def check_apply_at(problems: base.Problems, at: datetime | None) -> None:
    if at is None:
        return
    now = utcnow()
    if at.tzinfo is None:
        problems.add("applyAt", "an RFC 3339 time with its offset (Z or +hh:mm)")
    elif at < now - PAST_SLACK:
        problems.add("applyAt", "is in the past")
    elif at > now + HORIZON:
        problems.add("applyAt", "more than five years ahead")


async def _check_segment(
    scope: Scope, problems: base.Problems, i: int, key: str, change: s.ChangeIn, seen: set[str]
) -> None:
    where = f"changes[{i}]"
    try:
        await get_segment(scope, key)
    except ApiError:
        problems.add(f"{where}.segment", f"unknown segment {key!r}")
    if key in seen:
        problems.add(f"{where}.segment", f"{key!r} is listed twice: one item a segment")
    seen.add(key)
    for name, value in (
        ("settings", change.settings),
        ("rules", change.rules),
        ("flagPatch", change.flag_patch),
        ("archived", change.archived),
    ):
        if value is not None:
            problems.add(f"{where}.{name}", "a flag's: a segment's change is given as patch")
    if change.patch is None:
        problems.add(f"{where}.patch", "give the segment's patch (the body of PATCH /segments)")
    elif not msgspec.to_builtins(change.patch):
        problems.add(f"{where}.patch", "names no field to change")


def _check_flag(
    problems: base.Problems, i: int, change: s.ChangeIn, flag: Flag | None, seen: set[str]
) -> None:
    """A flag's item: its setting's (settings, rules) or its own (flagPatch, archived)."""
    where = f"changes[{i}]"
    own = change.flag_patch is not None or change.archived is not None
    if change.patch is not None:
        problems.add(f"{where}.patch", "a segment's: a flag's change is settings/rules/flagPatch")
    if flag is None:
        problems.add(f"{where}.flag", f"unknown flag {change.flag!r}")
    elif flag.archived and not own:
        problems.add(f"{where}.flag", f"flag {change.flag!r} is archived")
    seen_as = f"flag:{change.flag}" if own else str(change.flag)
    if seen_as in seen:
        problems.add(f"{where}.flag", f"{change.flag!r} is listed twice: one item a flag")
    seen.add(seen_as)
    if own:
        if change.settings is not None or change.rules is not None:
            problems.add(
                where,
                "the flag's own change (flagPatch, archived) and its settings or rules "
                "are two items",
            )
        elif change.flag_patch is not None and not msgspec.to_builtins(change.flag_patch):
            problems.add(f"{where}.flagPatch", "names no field to change")
    elif change.settings is None and change.rules is None:
        problems.add(where, "give settings, rules, flagPatch or archived")
    elif change.settings is not None and not msgspec.to_builtins(change.settings):
        problems.add(f"{where}.settings", "names no field to change")


async def check_changes(scope: Scope, problems: base.Problems, changes: list[s.ChangeIn]) -> None:
    if not changes:
        problems.add("changes", "at least one flag's or segment's change")
    elif len(changes) > MAX_CHANGES:
        problems.add("changes", f"at most {MAX_CHANGES} items in one request")
    keys = {c.flag for c in changes if c.flag is not None}
    flags_found = {
        f.key: f
        for f in await scope.session.scalars(
            select(Flag).where(Flag.project_id == scope.project_id, Flag.key.in_(keys))
        )
    }
    seen: set[str] = set()
    seen_segments: set[str] = set()
    for i, change in enumerate(changes):
        if change.flag is None:
            if change.segment is None:
                problems.add(f"changes[{i}].flag", "name a flag or a segment")
            else:
                await _check_segment(scope, problems, i, change.segment, change, seen_segments)
        elif change.segment is not None:
            problems.add(f"changes[{i}].segment", "an item names a flag or a segment, not both")
        else:
            _check_flag(problems, i, change, flags_found.get(change.flag), seen)


async def run_changes(scope: Scope, env: Environment, changes: list[dict[str, Any]]) -> None:
    """Carry the changes out with the flags' and segments' services (the unit of work is marked
    applying)."""
    for i, item in enumerate(changes):
        try:
            if "segment" in item:
                patch = msgspec.convert(item["patch"], segments.SegmentPatch)
                await patch_segment(scope, item["segment"], patch)
            if "flagPatch" in item:
                own = msgspec.convert(item["flagPatch"], flags.FlagPatch)
                await patch_flag(scope, item["flag"], own)
            if item.get("archived") is True:
                await archive_flag(scope, item["flag"])
            elif item.get("archived") is False:
                await restore_flag(scope, item["flag"])
            if "settings" in item:
                body = msgspec.convert(item["settings"], flags.EnvironmentSettingsIn)
                await put_settings(scope, item["flag"], env.key, body)
            if "rules" in item:
                rules = msgspec.convert({"rules": item["rules"]}, flags.RulesIn)
                await put_rules(scope, item["flag"], env.key, rules)
        except ApiError as exc:
            where = f"changes[{i}]"
            raise exc.at(where, f"{where} ({item_name(item)})") from exc


async def dry_run(scope: Scope, env: Environment, changes: list[dict[str, Any]]) -> None:
    """Refuse now a change that could never apply: run it in a savepoint, then roll it back."""
    saved = (scope.change, scope.if_match, scope.applying)
    scope.change, scope.if_match = Change(scope.project_id), None
    scope.applying = {"id": "dry run"}
    savepoint = await scope.session.begin_nested()
    try:
        await run_changes(scope, env, changes)
    finally:
        await savepoint.rollback()
        scope.change, scope.if_match, scope.applying = saved
    await scope.session.refresh(env)


async def bases_of(scope: Scope, env: Environment, changes: list[dict[str, Any]]) -> dict[str, Any]:
    bases: dict[str, Any] = {}
    for item in changes:
        version, state = await live_item(scope, env, item)
        bases[base_key(item)] = {"version": version, "state": state}
    return bases


def summary(row: ChangeRequest, env: Environment, **more: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "title": row.title,
        "environment": env.key,
        "status": row.status,
        "version": row.version,
        "author": row.author,
        "flags": [item["flag"] for item in row.changes if "flag" in item],
        "segments": [item["segment"] for item in row.changes if "segment" in item],
        **more,
    }


def refuse_own(scope: Scope, row: ChangeRequest, verb: str) -> None:
    if scope.actor.identity and scope.actor.identity == row.author_identity:
        raise ApiError(
            403,
            f"you wrote change request {row.id}: someone else must {verb} it (a second "
            "session, token or key of yours is still you)",
            code=OWN,
            details=[FieldError("author", row.author)],
        )


def refuse_unless_open(row: ChangeRequest, doing: str) -> None:
    if row.status != "open":
        hint = ": its author may edit it to reopen it" if row.status == "rejected" else ""
        raise ApiError(409, f"change request {row.id} is {row.status}, so cannot be {doing}{hint}")
