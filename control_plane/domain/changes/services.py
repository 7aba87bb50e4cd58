"""Change requests: proposed changes to what one environment serves, reviewed by others, then
applied all at once through the flags' and the segments' own services (issue #34).

How apply reaches the flags and segments: this domain stands on a layer above the others and
imports the flags' and the segments' services alone (the import-linter contracts
"domain-independence" and "changes use the flags and segments only" in pyproject.toml). Applying
a request calls ``put_settings`` and ``put_rules``, the very services
``PUT /flags/{key}/environments/{env}`` and ``PUT …/rules`` call, and ``patch_segment``, that of
``PATCH /segments/{key}``: validated the same way, audited, versioned and published the same way,
in the request's one transaction (all or nothing, published once after the commit). The unit of work is marked as applying the request
(``Scope.applying``): the protection gate (``domain.protection``) lets those writes through, and
each audit entry they write names the request, its author and its approvers. A request is checked
the same way when made or edited: its changes are run through those services in a savepoint that
is rolled back, so a change that could never apply is refused at once, its field named.

The rules: ``edit`` to propose, review and apply; nobody approves or rejects their own request
(``Actor.identity``: a person's second session or token, or a key used twice, is still them); an
edit is a new version, and only approvals of the current version count; applying needs as many
approvals as the environment requires at that moment, and every flag setting still at the version
the request was based on, else 409 naming what moved.

Segments: an item may name a segment and carry ``patch``, the body of ``PATCH /segments/{key}``
(a segment used by a flag of a protected environment changes only this way). A segment is the
project's, not one environment's, so a segment item is accepted in a request of any environment
of the project; the request then needs as many approvals as the most demanding of its own
environment and of every environment where a flag uses the segment, counted now (so a request
made in an unprotected environment cannot carry a change to what production serves past
production's approvals). The segment's version and state are its base, as a flag setting's;
deleting a segment through a request is not offered (delete it once no protected flag uses it).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

import msgspec
from sqlalchemy import select

from control_plane.access import Permission
from control_plane.db.ids import new_id
from control_plane.db.models import ChangeRequest, ChangeRequestReview, Environment, Flag
from control_plane.db.types import utcnow
from control_plane.domain import problems as base
from control_plane.domain.changes import schemas as s
from control_plane.domain.common import Scope, to_json
from control_plane.domain.flags import schemas as flags
from control_plane.domain.flags.reads import get_flag, rules_out, settings_out
from control_plane.domain.flags.services import (
    archive_flag,
    patch_flag,
    restore_flag,
)
from control_plane.domain.flags.settings import put_rules, put_settings
from control_plane.domain.paging import Page, paged
from control_plane.domain.rows import flag_setting, take_given
from control_plane.domain.segments import schemas as segments
from control_plane.domain.segments.services import environments_using, get_segment, patch_segment
from control_plane.errors import ApiError, FieldError, not_found
from control_plane.publishing.change import Change

MAX_CHANGES = 50
PAST_SLACK = timedelta(minutes=1)
HORIZON = timedelta(days=5 * 366)
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
OWN = "own_change_request"


# --- stored JSON ---------------------------------------------------------------------------------


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _own(item: dict[str, Any]) -> bool:
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


def _stored(item: s.ChangeIn) -> dict[str, Any]:
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


def _base_key(item: dict[str, Any]) -> str:
    """Where ``bases`` keeps an item's base: a flag setting's under the flag's key, the flag's
    own under ``flag:`` and its key, a segment's under ``segment:`` and its key."""
    if "segment" in item:
        return f"segment:{item['segment']}"
    return f"flag:{item['flag']}" if _own(item) else str(item["flag"])


def _named(item: dict[str, Any]) -> str:
    return f"segment {item['segment']!r}" if "segment" in item else f"flag {item['flag']!r}"


def _fields(item: dict[str, Any]) -> tuple[str, ...]:
    if "segment" in item:
        return SEGMENT_FIELDS
    return FLAG_FIELDS if _own(item) else FIELDS


async def _live_item(
    scope: Scope, env: Environment, item: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    if "segment" in item:
        return await _live_segment(scope, item["segment"])
    if _own(item):
        return await _live_flag(scope, item["flag"])
    return await _live(scope, item["flag"], env.key)


def _desired(item: dict[str, Any]) -> dict[str, Any]:
    """What the item sets, field by field, in the API's field order (JSONB keeps no order)."""
    if "segment" in item:
        given = item.get("patch", {})
        return {name: given[name] for name in SEGMENT_FIELDS if name in given}
    if _own(item):
        own = {**item.get("flagPatch", {})}
        if "archived" in item:
            own["archived"] = item["archived"]
        return {name: own[name] for name in FLAG_FIELDS if name in own}
    desired = {**item.get("settings", {})}
    if "rules" in item:
        desired["rules"] = item["rules"]
    return desired


def _moved(item: dict[str, Any], base_state: dict[str, Any], live: dict[str, Any]) -> list[s.Moved]:
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


# --- reads ---------------------------------------------------------------------------------------


async def _reviews(scope: Scope, ids: list[str]) -> dict[str, list[ChangeRequestReview]]:
    found: dict[str, list[ChangeRequestReview]] = {i: [] for i in ids}
    if ids:
        for review in await scope.session.scalars(
            select(ChangeRequestReview)
            .where(ChangeRequestReview.change_request_id.in_(ids))
            .order_by(ChangeRequestReview.id)
        ):
            found[review.change_request_id].append(review)
    return found


def _approvers(row: ChangeRequest, reviews: list[ChangeRequestReview]) -> list[str]:
    """The distinct others who approved the current version, in the order they did."""
    seen: dict[str, str] = {}
    for review in reviews:
        if (
            review.decision == "approve"
            and review.request_version == row.version
            and review.reviewer_identity != row.author_identity
        ):
            seen.setdefault(review.reviewer_identity, review.reviewer)
    return list(seen.values())


async def _item_change(
    scope: Scope, row: ChangeRequest, env: Environment, item: dict[str, Any]
) -> s.ItemChange:
    based = row.bases.get(_base_key(item), {})
    base_state: dict[str, Any] = based.get("state", {})
    live_version: int | None
    try:
        live_version, live = await _live_item(scope, env, item)
    except ApiError:  # the flag or segment was deleted since
        live_version, live = None, {}
    desired = _desired(item)
    shown = base_state if row.status == "applied" else live
    diff = [
        s.FieldDiff(
            field=name,
            before=shown.get(name),
            after=value,
            changed=_differs(name, shown.get(name), value),
        )
        for name, value in desired.items()
    ]
    moved = (
        _moved(item, base_state, live)
        if row.status == "open" and live_version != based.get("version")
        else []
    )
    return s.ItemChange(
        flag=item.get("flag"),
        base_version=int(based.get("version", 0)),
        live_version=live_version,
        moved=moved,
        diff=diff,
        settings=item.get("settings"),
        rules=item.get("rules"),
        segment=item.get("segment"),
        patch=item.get("patch"),
        flag_patch=item.get("flagPatch"),
        archived=item.get("archived"),
    )


def _differs(name: str, before: Any, after: Any) -> bool:
    if name == "rules" and isinstance(before, list) and isinstance(after, list):
        # a rule given without an id gets a new one when applied: compare what else it says
        strip = [{k: v for k, v in r.items() if k != "id"} for r in before]
        given = [{k: v for k, v in r.items() if k != "id"} for r in after]
        return bool(strip != given)
    return bool(before != after)


async def _required(scope: Scope, row: ChangeRequest, env: Environment) -> int:
    """The approvals the request needs now: its environment's, or more where a segment it changes
    is used by a flag of an environment that requires more, or where it changes a flag itself
    (which every environment serves) and an environment requires more."""
    ids: set[str] = set()
    envs = {e.id: e for e in await scope.environments()}
    for item in row.changes:
        if "segment" in item:
            ids |= await environments_using(scope, item["segment"])
        elif _own(item):
            ids |= set(envs)
    return max([env.required_approvals, *(envs[i].required_approvals for i in ids if i in envs)])


async def _out(
    scope: Scope, row: ChangeRequest, env: Environment, reviews: list[ChangeRequestReview]
) -> s.ChangeRequest:
    approvers = _approvers(row, reviews)
    return s.ChangeRequest(
        id=row.id,
        environment=env.key,
        title=row.title,
        description=row.description,
        status=cast(s.Status, row.status),
        author=row.author,
        created_at=row.created_at,
        updated_at=row.updated_at,
        version=row.version,
        required_approvals=await _required(scope, row, env),
        approvals=len(approvers),
        approved_by=approvers,
        changes=[await _item_change(scope, row, env, item) for item in row.changes],
        reviews=[
            s.Review(
                id=r.id,
                reviewer=r.reviewer,
                decision=cast(Any, r.decision),
                comment=r.comment,
                at=r.at,
                request_version=r.request_version,
                current=r.request_version == row.version,
            )
            for r in reviews
        ],
        apply_at=row.apply_at,
        applied_at=row.applied_at,
        applied_by=row.applied_by,
        reason=row.reason,
    )


async def _find(scope: Scope, request_id: str) -> tuple[ChangeRequest, Environment]:
    found = (
        await scope.session.execute(
            select(ChangeRequest, Environment)
            .join(Environment, Environment.id == ChangeRequest.environment_id)
            .where(ChangeRequest.id == request_id, ChangeRequest.project_id == scope.project_id)
            .execution_options(populate_existing=True)
        )
    ).one_or_none()
    if found is None:
        raise not_found("change request", request_id)
    row, env = found
    return row, env


async def get(scope: Scope, request_id: str) -> s.ChangeRequest:
    row, env = await _find(scope, request_id)
    return await _out(scope, row, env, (await _reviews(scope, [row.id]))[row.id])


async def open_with(scope: Scope, env_key: str, items: list[s.ChangeIn]) -> s.ChangeRequest | None:
    """The open request of ``env_key`` that proposes exactly ``items``, if any: applying a
    project file twice proposes nothing new (``domain.projectfile``)."""
    env = await scope.environment(env_key)
    wanted = [_stored(item) for item in items]
    rows = await scope.session.scalars(
        select(ChangeRequest)
        .where(
            ChangeRequest.project_id == scope.project_id,
            ChangeRequest.environment_id == env.id,
            ChangeRequest.status == "open",
        )
        .order_by(ChangeRequest.created_at)
    )
    same = next((row for row in rows if row.changes == wanted), None)
    return None if same is None else await get(scope, same.id)


async def list_requests(
    scope: Scope,
    status: str | None,
    environment: str | None,
    *,
    limit: int,
    cursor: str | None,
) -> Page[s.ChangeRequest]:
    """Newest first (ids are time-sortable)."""
    query = select(ChangeRequest).where(ChangeRequest.project_id == scope.project_id)
    if status is not None:
        query = query.where(ChangeRequest.status == status)
    if environment is not None:
        env = await scope.environment(environment)
        query = query.where(ChangeRequest.environment_id == env.id)

    async def convert(rows: list[ChangeRequest]) -> list[s.ChangeRequest]:
        envs = {e.id: e for e in await scope.environments()}
        reviews = await _reviews(scope, [r.id for r in rows])
        return [await _out(scope, r, envs[r.environment_id], reviews[r.id]) for r in rows]

    return await paged(
        scope,
        query,
        ChangeRequest.id,
        list_name=f"change-requests:{status}:{environment}",
        limit=limit,
        cursor=cursor,
        convert=convert,
        descending=True,
    )


# --- checks --------------------------------------------------------------------------------------


def _check_text(problems: base.Problems, title: str | None, description: str | None) -> None:
    if title is not None:
        base.check_name(problems, "title", title)
    if description is not None and len(description) > 10_000:
        problems.add("description", "at most 10000 characters")


def _check_apply_at(problems: base.Problems, at: datetime | None) -> None:
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


async def _check_changes(scope: Scope, problems: base.Problems, changes: list[s.ChangeIn]) -> None:
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


async def _run(scope: Scope, env: Environment, changes: list[dict[str, Any]]) -> None:
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
                rules = msgspec.convert(item["rules"], list[flags.RuleIn])
                await put_rules(scope, item["flag"], env.key, flags.RulesIn(rules=rules))
        except ApiError as exc:
            where = f"changes[{i}]"
            details = [FieldError(f"{where}.{d.field}", d.message) for d in exc.details]
            raise ApiError(
                exc.status,
                f"{where} ({_named(item)}): {exc.message}",
                code=exc.code,
                details=details or [FieldError(where, exc.message)],
            ) from exc


async def _dry_run(scope: Scope, env: Environment, changes: list[dict[str, Any]]) -> None:
    """Refuse now a change that could never apply: run it in a savepoint, then roll it back."""
    saved = (scope.change, scope.if_match, scope.applying)
    scope.change, scope.if_match = Change(scope.project_id), None
    scope.applying = {"id": "dry run"}
    savepoint = await scope.session.begin_nested()
    try:
        await _run(scope, env, changes)
    finally:
        await savepoint.rollback()
        scope.change, scope.if_match, scope.applying = saved
    await scope.session.refresh(env)


async def _bases(scope: Scope, env: Environment, changes: list[dict[str, Any]]) -> dict[str, Any]:
    bases: dict[str, Any] = {}
    for item in changes:
        version, state = await _live_item(scope, env, item)
        bases[_base_key(item)] = {"version": version, "state": state}
    return bases


def _summary(row: ChangeRequest, env: Environment, **more: Any) -> dict[str, Any]:
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


def _refuse_own(scope: Scope, row: ChangeRequest, verb: str) -> None:
    if scope.actor.identity and scope.actor.identity == row.author_identity:
        raise ApiError(
            403,
            f"you wrote change request {row.id}: someone else must {verb} it (a second "
            "session, token or key of yours is still you)",
            code=OWN,
            details=[FieldError("author", row.author)],
        )


def _refuse_unless_open(row: ChangeRequest, doing: str) -> None:
    if row.status != "open":
        hint = ": its author may edit it to reopen it" if row.status == "rejected" else ""
        raise ApiError(409, f"change request {row.id} is {row.status}, so cannot be {doing}{hint}")


# --- writes --------------------------------------------------------------------------------------


async def create(scope: Scope, body: s.ChangeRequestCreate) -> s.ChangeRequest:
    scope.require(Permission.EDIT)
    env = await scope.environment(body.environment)
    problems = base.Problems()
    _check_text(problems, body.title, body.description)
    _check_apply_at(problems, body.apply_at)
    await _check_changes(scope, problems, body.changes)
    problems.raise_if_any()
    changes = [_stored(c) for c in body.changes]
    await _dry_run(scope, env, changes)
    now = utcnow()
    actor = scope.actor
    row = ChangeRequest(
        id=new_id("chr"),
        project_id=scope.project_id,
        environment_id=env.id,
        title=body.title,
        description=body.description,
        status="open",
        author=actor.label,
        author_identity=actor.identity,
        author_user_id=actor.user_id,
        author_key_id=actor.key_id,
        created_at=now,
        updated_at=now,
        version=1,
        changes=changes,
        bases=await _bases(scope, env, changes),
        apply_at=body.apply_at,
        reason="",
    )
    scope.session.add(row)
    await scope.session.flush()
    out = await _out(scope, row, env, [])
    scope.audit(
        "change_request.create",
        "change_request",
        row.id,
        after=_summary(row, env, changes=to_json(out.changes), applyAt=to_json(row.apply_at)),
        environment=env.key,
    )
    return out


async def edit(scope: Scope, request_id: str, body: s.ChangeRequestPatch) -> s.ChangeRequest:
    """The author's edit: a new version, based on what is live now; earlier approvals and a
    rejection no longer count (a rejected request is open again)."""
    scope.require(Permission.EDIT)
    row, env = await _find(scope, request_id)
    if scope.actor.identity != row.author_identity:
        raise ApiError(
            403,
            f"only the author of change request {row.id} ({row.author}) edits it: propose "
            "another, or review this one",
            code="not_the_author",
            details=[FieldError("author", row.author)],
        )
    if row.status not in ("open", "rejected"):
        raise ApiError(409, f"change request {row.id} is {row.status}: it is not edited now")
    await scope.expect_version(
        ChangeRequest, ChangeRequest.version, row.version, ChangeRequest.id == row.id
    )
    problems = base.Problems()
    _check_text(
        problems,
        None if body.title is msgspec.UNSET else body.title,
        None if body.description is msgspec.UNSET else body.description,
    )
    if body.apply_at is not msgspec.UNSET:
        _check_apply_at(problems, body.apply_at)
    if body.changes is not msgspec.UNSET:
        await _check_changes(scope, problems, body.changes)
    problems.raise_if_any()
    before = _summary(row, env)
    changes = row.changes if body.changes is msgspec.UNSET else [_stored(c) for c in body.changes]
    await _dry_run(scope, env, changes)
    take_given(row, body, "title", "description", "apply_at")
    row.changes = changes
    row.bases = await _bases(scope, env, changes)
    row.status = "open"
    row.reason = ""
    row.version += 1
    row.updated_at = utcnow()
    await scope.session.flush()
    reviews = (await _reviews(scope, [row.id]))[row.id]
    out = await _out(scope, row, env, reviews)
    scope.audit(
        "change_request.update",
        "change_request",
        row.id,
        before=before,
        after=_summary(row, env, changes=to_json(out.changes), applyAt=to_json(row.apply_at)),
        environment=env.key,
    )
    return out


async def review(scope: Scope, request_id: str, decision: str, body: s.ReviewIn) -> s.ChangeRequest:
    """Approve or reject the current version, as someone other than its author."""
    scope.require(Permission.EDIT)
    row, env = await _find(scope, request_id)
    _refuse_own(scope, row, decision)
    _refuse_unless_open(row, "approved" if decision == "approve" else "rejected")
    problems = base.Problems()
    if decision == "reject" and not body.comment.strip():
        problems.add("comment", "say why it is rejected")
    if len(body.comment) > 10_000:
        problems.add("comment", "at most 10000 characters")
    problems.raise_if_any()
    reviews = (await _reviews(scope, [row.id]))[row.id]
    if decision == "approve" and any(
        r.reviewer_identity == scope.actor.identity
        and r.decision == "approve"
        and r.request_version == row.version
        for r in reviews
    ):
        raise ApiError(409, f"you approved version {row.version} of {row.id} already")
    entry = ChangeRequestReview(
        id=new_id("crv"),
        change_request_id=row.id,
        reviewer=scope.actor.label,
        reviewer_identity=scope.actor.identity,
        reviewer_user_id=scope.actor.user_id,
        reviewer_key_id=scope.actor.key_id,
        decision=decision,
        comment=body.comment,
        at=utcnow(),
        request_version=row.version,
    )
    scope.session.add(entry)
    if decision == "reject":
        row.status = "rejected"
    row.updated_at = utcnow()
    await scope.session.flush()
    reviews.append(entry)
    out = await _out(scope, row, env, reviews)
    action = "change_request.approve" if decision == "approve" else "change_request.reject"
    scope.audit(
        action,
        "change_request",
        row.id,
        after=_summary(
            row,
            env,
            reviewer=scope.actor.label,
            comment=body.comment,
            approvals=out.approvals,
            requiredApprovals=out.required_approvals,
        ),
        environment=env.key,
    )
    return out


async def apply(scope: Scope, request_id: str) -> s.ChangeRequest:
    """Apply an approved request: approvals ≥ the environment's requirement now, every flag
    setting still at its base version (else 409 naming what moved), all in this transaction."""
    scope.require(Permission.EDIT)
    row, env = await _find(scope, request_id)
    await scope.expect_version(
        ChangeRequest, ChangeRequest.version, row.version, ChangeRequest.id == row.id
    )
    _refuse_unless_open(row, "applied")
    reviews = (await _reviews(scope, [row.id]))[row.id]
    approvers = _approvers(row, reviews)
    required = await _required(scope, row, env)
    if len(approvers) < required:
        where = (
            f"{env.key!r} requires {required}"
            if required == env.required_approvals
            else f"{required} are required, as an environment where a segment it changes is used "
            "requires"
        )
        raise ApiError(
            409,
            f"change request {row.id} has {len(approvers)} approval(s) of version {row.version} "
            f"by others than its author; {where}",
            code="approvals_missing",
            details=[FieldError("approvals", f"{len(approvers)} of {required}")],
        )
    moved: list[s.Moved] = []
    for item in row.changes:
        based = row.bases.get(_base_key(item), {})
        try:
            version, live = await _live_item(scope, env, item)
        except ApiError as exc:
            raise ApiError(
                409,
                f"change request {row.id} cannot be applied: {exc.message}",
                code="cannot_apply",
                details=[FieldError(_base_key(item), exc.message)],
            ) from exc
        if version != based.get("version"):
            found = _moved(item, based.get("state", {}), live)
            moved.extend(
                found
                or [
                    s.Moved(
                        flag=item.get("flag"),
                        segment=item.get("segment"),
                        field="version",
                        base=based.get("version"),
                        live=version,
                    )
                ]
            )
    if moved:
        raise ApiError(
            409,
            "what is live moved since the request was based on it, so it is not applied (no "
            "silent overwrite): "
            + "; ".join(
                f"{_which(m)} {m.field}: live {_short(m.live)}, base {_short(m.base)}"
                for m in moved
            )
            + ". Its author edits it to base it on what is live now (then it needs approval again)",
            code="base_moved",
            details=[
                FieldError(
                    f"{_which(m)}.{m.field}", f"live {_short(m.live)}, base {_short(m.base)}"
                )
                for m in moved
            ],
        )
    saved = scope.if_match
    scope.if_match = None  # the request's version was checked; the settings' versions just now
    scope.applying = {
        "id": row.id,
        "title": row.title,
        "author": row.author,
        "approvers": approvers,
    }
    try:
        await _run(scope, env, row.changes)
    except ApiError as exc:
        raise ApiError(
            409,
            f"change request {row.id} cannot be applied: {exc.message}",
            code="cannot_apply",
            details=exc.details,
        ) from exc
    finally:
        scope.if_match = saved
    row.status = "applied"
    row.applied_at = row.updated_at = utcnow()
    row.applied_by = scope.actor.label
    await scope.session.flush()
    out = await _out(scope, row, env, reviews)
    scope.audit(
        "change_request.apply",
        "change_request",
        row.id,
        after=_summary(row, env, appliedBy=scope.actor.label, changes=to_json(out.changes)),
        environment=env.key,
    )
    scope.applying = None
    return out


def _which(moved: s.Moved) -> str:
    """A flag by its key (as before segments could be changed), a segment as ``segment:key``."""
    return f"segment:{moved.segment}" if moved.segment is not None else str(moved.flag)


def _short(value: Any) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= 120 else text[:117] + "..."


async def close(scope: Scope, request_id: str) -> s.ChangeRequest:
    """Close an open or rejected request without applying it: its author, or an admin."""
    scope.require(Permission.EDIT)
    row, env = await _find(scope, request_id)
    if scope.actor.identity != row.author_identity:
        scope.require(Permission.ADMIN)
    if row.status not in ("open", "rejected"):
        raise ApiError(409, f"change request {row.id} is {row.status}, so cannot be closed")
    before = _summary(row, env)
    row.status = "closed"
    row.reason = f"closed by {scope.actor.label}"
    row.updated_at = utcnow()
    await scope.session.flush()
    out = await get(scope, row.id)
    scope.audit(
        "change_request.close",
        "change_request",
        row.id,
        before=before,
        after=_summary(row, env, reason=row.reason),
        environment=env.key,
    )
    return out


async def skip_due(scope: Scope, request_id: str, why: str) -> bool:
    """A request's ``applyAt`` passed and it could not be applied: it stays open without a time,
    with the reason (its author may set a new ``applyAt``, or someone applies it by hand)."""
    scope.require(Permission.EDIT)
    row, env = await _find(scope, request_id)
    if row.status != "open" or row.apply_at is None:
        return False
    at = row.apply_at
    row.apply_at = None
    row.reason = f"not applied at {at.isoformat()}: {why}"
    row.updated_at = utcnow()
    await scope.session.flush()
    scope.audit(
        "change_request.skip",
        "change_request",
        row.id,
        after=_summary(row, env, reason=row.reason),
        environment=env.key,
    )
    return True
