"""Change requests read: one, the listing, the open one with the same items, each with its
approvals counted and its items' diff against what is live."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import select

from control_plane.db.models import ChangeRequest, ChangeRequestReview, Environment
from control_plane.domain.changes import schemas as s
from control_plane.domain.changes.items import (
    base_key,
    desired_state,
    is_own,
    live_item,
    moved_fields,
    stored_item,
)
from control_plane.domain.common import Scope
from control_plane.domain.paging import Page, paged
from control_plane.domain.segments.services import environments_using
from control_plane.errors import ApiError, not_found


async def reviews_of(scope: Scope, ids: list[str]) -> dict[str, list[ChangeRequestReview]]:
    found: dict[str, list[ChangeRequestReview]] = {i: [] for i in ids}
    if ids:
        for review in await scope.session.scalars(
            select(ChangeRequestReview)
            .where(ChangeRequestReview.change_request_id.in_(ids))
            .order_by(ChangeRequestReview.id)
        ):
            found[review.change_request_id].append(review)
    return found


def approvers_of(row: ChangeRequest, reviews: list[ChangeRequestReview]) -> list[str]:
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
    based = row.bases.get(base_key(item), {})
    base_state: dict[str, Any] = based.get("state", {})
    live_version: int | None
    try:
        live_version, live = await live_item(scope, env, item)
    except ApiError:  # the flag or segment was deleted since
        live_version, live = None, {}
    desired = desired_state(item)
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
        moved_fields(item, base_state, live)
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


async def approvals_needed(scope: Scope, row: ChangeRequest, env: Environment) -> int:
    """The approvals the request needs now: its environment's, or more where a segment it changes
    is used by a flag of an environment that requires more, or where it changes a flag itself
    (which every environment serves) and an environment requires more."""
    ids: set[str] = set()
    envs = {e.id: e for e in await scope.environments()}
    for item in row.changes:
        if "segment" in item:
            ids |= await environments_using(scope, item["segment"])
        elif is_own(item):
            ids |= set(envs)
    return max([env.required_approvals, *(envs[i].required_approvals for i in ids if i in envs)])


async def request_out(
    scope: Scope, row: ChangeRequest, env: Environment, reviews: list[ChangeRequestReview]
) -> s.ChangeRequest:
    approvers = approvers_of(row, reviews)
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
        required_approvals=await approvals_needed(scope, row, env),
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


async def find_request(scope: Scope, request_id: str) -> tuple[ChangeRequest, Environment]:
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
    row, env = await find_request(scope, request_id)
    return await request_out(scope, row, env, (await reviews_of(scope, [row.id]))[row.id])


async def open_with(scope: Scope, env_key: str, items: list[s.ChangeIn]) -> s.ChangeRequest | None:
    """The open request of ``env_key`` that proposes exactly ``items``, if any: applying a
    project file twice proposes nothing new (``domain.projectfile``)."""
    env = await scope.environment(env_key)
    wanted = [stored_item(item) for item in items]
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
        reviews = await reviews_of(scope, [r.id for r in rows])
        return [await request_out(scope, r, envs[r.environment_id], reviews[r.id]) for r in rows]

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
