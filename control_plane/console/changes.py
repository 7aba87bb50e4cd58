"""Change requests (issue #34): the list, and the review page with the diff against what is live,
approve, reject, apply and close; every action through the change requests' services, as the
API's ``/change-requests`` calls them. The flag page proposes them (``console.flags``)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get, post
from litestar.di import Provide
from litestar.params import FromPath
from litestar.response import Response, Template

from control_plane.access import Permission
from control_plane.console import forms
from control_plane.console.diff import changes as leaf_changes
from control_plane.console.pages import write_or_show
from control_plane.console.web import Who, error_page, page, provide_signed, reading
from control_plane.domain.changes import reads as change_reads
from control_plane.domain.changes import schemas as s
from control_plane.domain.changes import services
from control_plane.domain.common import Scope
from control_plane.domain.environments import services as environments
from control_plane.domain.paging import MAX_LIMIT
from control_plane.errors import ApiError, FieldError

PAGE_SIZE = 50
STATUSES = ("open", "applied", "rejected", "closed")
ANY = "any"


def mine(scope: Scope, request: s.ChangeRequest) -> bool:
    """Whether the signed-in person (or key) wrote ``request``, to choose which buttons to show
    (the services decide: they refuse the author's own approval whatever is shown)."""
    return scope.actor.label == request.author


def _may(scope: Scope, request: s.ChangeRequest) -> dict[str, bool]:
    own = mine(scope, request)
    edit = scope.holds(Permission.EDIT)
    is_open = request.status == "open"
    return {
        "mine": own,
        "review": edit and is_open and not own,
        "approve": edit and is_open and not own and scope.actor.label not in request.approved_by,
        "apply": edit and is_open and request.approvals >= request.required_approvals,
        "close": edit
        and request.status in ("open", "rejected")
        and (own or scope.holds(Permission.ADMIN)),
    }


def _diff_rows(change: s.ItemChange) -> list[dict[str, Any]]:
    """Each field the request sets, live before and proposed after; a nested value changed
    (a rule list, a rollout) as the leaves that differ, each a row named by its path, so that a
    one-clause edit of a long rule list reads as that one clause."""
    moved = {m.field for m in change.moved}
    rows: list[dict[str, Any]] = []
    for item in change.diff:
        nested = isinstance(item.before, (dict, list)) and isinstance(item.after, (dict, list))
        leaves = leaf_changes(item.before, item.after) if item.changed and nested else []
        common = {"changed": item.changed, "moved": item.field in moved}
        if not leaves:
            rows.append({"field": item.field, "before": item.before, "after": item.after, **common})
        for leaf in leaves:
            path = leaf.path if leaf.path.startswith("[") else f".{leaf.path}"
            field = item.field + ("" if leaf.path == "(whole)" else path)
            rows.append({"field": field, "before": leaf.before, "after": leaf.after, **common})
    return rows


class ChangeRequestPages(Controller):
    path = "/console/change-requests"
    dependencies = {"who": Provide(provide_signed)}
    include_in_schema = False

    @get("/")
    async def change_requests(self, request: Request[Any, Any, Any], who: Who) -> Template:
        status = request.query_params.get("status", "open")
        environment = request.query_params.get("environment", "")
        cursor = request.query_params.get("cursor") or None
        error = None
        async with reading(request, who) as scope:
            envs = (await environments.list_environments(scope, limit=MAX_LIMIT, cursor=None)).items
            try:
                found = await change_reads.list_requests(
                    scope,
                    status if status in STATUSES else None,
                    environment or None,
                    limit=PAGE_SIZE,
                    cursor=cursor,
                )
                items, next_cursor = found.items, found.next_cursor
            except ApiError as exc:
                items, next_cursor, error = [], None, exc.message
        query = f"status={status or ANY}" + (f"&environment={environment}" if environment else "")
        return page(
            request,
            who,
            "change_requests.html",
            status=404 if error else 200,
            title="Change requests",
            requests=items,
            environments=envs,
            filters={"status": status if status in STATUSES else ANY, "environment": environment},
            statuses=STATUSES,
            next_cursor=next_cursor,
            query=query,
            error=error,
        )

    @get("/{request_id:str}")
    async def change_request(
        self, request: Request[Any, Any, Any], who: Who, request_id: FromPath[str]
    ) -> Template:
        return await self._review(request, who, request_id)

    async def _review(
        self,
        request: Request[Any, Any, Any],
        who: Who,
        request_id: str,
        error: ApiError | None = None,
        comment: str = "",
    ) -> Template:
        async with reading(request, who) as scope:
            try:
                found = await change_reads.get(scope, request_id)
            except ApiError as exc:
                return error_page(request, who, exc, "Change request")
            may = _may(scope, found)
        return page(
            request,
            who,
            "change_request.html",
            status=error.status if error else 200,
            title=found.title,
            cr=found,
            rows=[_diff_rows(change) for change in found.changes],
            moved=any(change.moved for change in found.changes),
            may=may,
            error=error,
            comment=comment,
        )

    async def _act(
        self, request: Request[Any, Any, Any], who: Who, request_id: str, action: str
    ) -> Response[Any]:
        form = await request.form()
        comment = forms.text(form, "comment")
        version = forms.text(form, "version")

        async def work(scope: Scope) -> s.ChangeRequest:
            if action in ("approve", "reject"):
                current = await change_reads.get(scope, request_id)
                if version and version != str(current.version):
                    raise ApiError(
                        412,
                        f"change request {request_id} was edited since you opened it",
                        current_version=current.version,
                    )
                return await services.review(scope, request_id, action, s.ReviewIn(comment))
            if action == "apply":
                return await services.apply(scope, request_id)
            if action == "close":
                return await services.close(scope, request_id)
            raise ApiError(
                422,
                "decision: approve or reject",
                details=[FieldError("decision", "approve or reject")],
            )

        # apply names the version it was shown (If-Match), so an edit meanwhile is not applied
        return await write_or_show(
            request,
            who,
            work,
            done=lambda _: f"/console/change-requests/{request_id}",
            shown=lambda error: self._review(request, who, request_id, error, comment),
            version=version if action == "apply" else None,
        )

    @post("/{request_id:str}/review")
    async def review(
        self, request: Request[Any, Any, Any], who: Who, request_id: FromPath[str]
    ) -> Response[Any]:
        """Approve or reject (the button pressed: ``decision``), with the comment."""
        decision = forms.text(await request.form(), "decision")
        return await self._act(request, who, request_id, decision)

    @post("/{request_id:str}/apply")
    async def apply(
        self, request: Request[Any, Any, Any], who: Who, request_id: FromPath[str]
    ) -> Response[Any]:
        return await self._act(request, who, request_id, "apply")

    @post("/{request_id:str}/close")
    async def close(
        self, request: Request[Any, Any, Any], who: Who, request_id: FromPath[str]
    ) -> Response[Any]:
        return await self._act(request, who, request_id, "close")
