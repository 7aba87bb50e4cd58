"""Change requests: propose, review and apply changes to a protected environment."""

from __future__ import annotations

from litestar import Controller, get, patch, post
from litestar.params import FromPath, FromQuery, JSONBody

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx, IfMatch
from control_plane.domain.changes import reads, services
from control_plane.domain.changes import schemas as s
from control_plane.domain.paging import DEFAULT_LIMIT, Cursor, Limit
from control_plane.errors import StrictBody

_RULES = (
    "Needs `edit`. Nobody approves or rejects a request they wrote (403 `own_change_request`: "
    "a second session, token or key of theirs is still them)."
)


class ChangeRequestController(Controller):
    path = "/change-requests"
    tags = ["change requests"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get(
        "/",
        summary="List change requests, newest first",
        description="`status`: open, applied, rejected or closed; `environment`: its key.",
    )
    async def list_change_requests(
        self,
        ctx: Ctx,
        status: FromQuery[s.Status | None] = None,
        environment: FromQuery[str | None] = None,
        limit: Limit = DEFAULT_LIMIT,
        cursor: Cursor = None,
    ) -> s.ChangeRequestList:
        found = await reads.list_requests(ctx, status, environment, limit=limit, cursor=cursor)
        return s.ChangeRequestList(
            change_requests=found.items,
            count=len(found.items),
            next_cursor=found.next_cursor,
            has_more=found.has_more,
        )

    @post(
        "/",
        dto=StrictBody[s.ChangeRequestCreate],
        return_dto=None,
        summary="Propose a change to one environment (several flags and segments at once if need "
        "be)",
        description="Each item of `changes` names a flag and its `settings` (the body of `PUT "
        "/flags/{key}/environments/{env}`, `enabled` included) and/or `rules` (those of `PUT "
        "…/rules`), or a segment and its `patch` (the body of `PATCH /segments/{key}`: how a "
        "segment a protected environment's flag uses is changed; deleting one is not offered). "
        "Checked now as the flags' and segments' services would check it (422 naming "
        "`changes[i]…`); based on the flag settings and segments live now. A segment item may be "
        "in a request of any environment: the request then needs the approvals of the most "
        "demanding environment where a flag uses the segment (`requiredApprovals`). `applyAt`: "
        "applied then if approved by then, else not (the reason is recorded). Needs `edit`.",
    )
    async def create_change_request(
        self, ctx: Ctx, data: JSONBody[s.ChangeRequestCreate]
    ) -> s.ChangeRequest:
        return await services.create(ctx, data)

    @get("/{request_id:str}", summary="A change request, its reviews and its diff against live")
    async def get_change_request(self, ctx: Ctx, request_id: FromPath[str]) -> s.ChangeRequest:
        return await reads.get(ctx, request_id)

    @patch(
        "/{request_id:str}",
        dto=StrictBody[s.ChangeRequestPatch],
        return_dto=None,
        summary="Edit a change request (its author only): approvals of earlier versions lapse",
        description="403 `not_the_author` for anyone else; 409 once applied or closed. The "
        "flags it changes are based anew on what is live; a rejected request is open again.",
    )
    async def edit_change_request(
        self,
        ctx: Ctx,
        request_id: FromPath[str],
        data: JSONBody[s.ChangeRequestPatch],
        if_match: IfMatch = None,
    ) -> s.ChangeRequest:
        return await services.edit(ctx, request_id, data)

    @post(
        "/{request_id:str}/approve",
        dto=StrictBody[s.ReviewIn],
        return_dto=None,
        status_code=200,
        summary="Approve the current version of a change request",
        description=_RULES + " 409 if it is not open or you approved this version already.",
    )
    async def approve_change_request(
        self, ctx: Ctx, request_id: FromPath[str], data: JSONBody[s.ReviewIn]
    ) -> s.ChangeRequest:
        return await services.review(ctx, request_id, "approve", data)

    @post(
        "/{request_id:str}/reject",
        dto=StrictBody[s.ReviewIn],
        return_dto=None,
        status_code=200,
        summary="Reject a change request, saying why (`comment`)",
        description=_RULES + " Its author may edit it to reopen it.",
    )
    async def reject_change_request(
        self, ctx: Ctx, request_id: FromPath[str], data: JSONBody[s.ReviewIn]
    ) -> s.ChangeRequest:
        return await services.review(ctx, request_id, "reject", data)

    @post(
        "/{request_id:str}/apply",
        status_code=200,
        summary="Apply an approved change request, all or nothing",
        description="Needs `edit`. 409 `approvals_missing` while it has fewer approvals of its "
        "current version than it requires now; 409 `base_moved` naming each flag (by its key) or "
        "segment (`segment:key`) and field that changed since it was based on it (live value "
        "and base value); 409 `cannot_apply` if a flag's or segment's service refuses it now. "
        "Applied through the flags' and segments' own services in one transaction, audited with "
        "its author and approvers, published once.",
    )
    async def apply_change_request(
        self, ctx: Ctx, request_id: FromPath[str], if_match: IfMatch = None
    ) -> s.ChangeRequest:
        return await services.apply(ctx, request_id)

    @post(
        "/{request_id:str}/close",
        status_code=200,
        summary="Close a change request without applying it (its author, or an admin)",
    )
    async def close_change_request(self, ctx: Ctx, request_id: FromPath[str]) -> s.ChangeRequest:
        return await services.close(ctx, request_id)
