"""A console form's change proposed as a change request (issue #34): where what it changes is
served by a protected environment, the flag page's and the segment page's forms send their body
as one item of a request (its review page next) instead of writing it. One path for both: the
form's version checked against what is live, the title typed or a default, the request made by
the change requests' service as ``POST /api/v1/change-requests`` makes it, and its errors named
as the form's fields."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from control_plane.console import forms
from control_plane.db.models import Environment
from control_plane.domain.changes import reads as change_reads
from control_plane.domain.changes import schemas as changes_s
from control_plane.domain.changes import services as change_requests
from control_plane.domain.common import Scope
from control_plane.domain.paging import MAX_LIMIT
from control_plane.domain.protection import protected
from control_plane.errors import ApiError, FieldError, stale_version

# an item's fields as a change request names them, as its form names them
PREFIXES = ("changes[0].settings.", "changes[0].patch.", "changes[0].")


async def propose(
    scope: Scope,
    env: str,
    form: Any,
    change: changes_s.ChangeIn,
    *,
    live_version: int,
    title: str,
) -> changes_s.ChangeRequest:
    """A change request in ``env`` of the form's one change, based on what the form was shown
    (a form older than what is live, ``live_version``, is the same 412 a direct write gets,
    nothing proposed); titled as typed, else ``title``."""
    version = forms.text(form, "version")
    if version and version != str(live_version):
        raise stale_version(live_version)
    body = changes_s.ChangeRequestCreate(
        environment=env,
        title=forms.text(form, "title").strip() or title,
        description=forms.text(form, "description"),
        changes=[change],
    )
    return await change_requests.create(scope, body)


def review_or(done: str) -> Callable[[Any], str]:
    """Where a form that may have been proposed goes next (``pages.write_or_show``'s ``done``):
    the review page of the change request it made, else ``done``."""
    return lambda answer: (
        f"/console/change-requests/{answer.id}"
        if isinstance(answer, changes_s.ChangeRequest)
        else done
    )


async def most_demanding(scope: Scope, among: Iterable[str] | None = None) -> Environment | None:
    """The protected environment that requires the most approvals, of those whose ids are
    ``among`` (None: all of the project's); None if none of them is protected."""
    wanted = None if among is None else set(among)
    guarded = [
        env
        for env in await scope.environments()
        if protected(env) and (wanted is None or env.id in wanted)
    ]
    return max(guarded, key=lambda env: env.required_approvals) if guarded else None


async def open_requests(
    scope: Scope, env: str | None, about: Callable[[changes_s.ItemChange], bool]
) -> list[changes_s.ChangeRequest]:
    """The open change requests of ``env`` (None: of any environment) with an item ``about``
    says is the page's."""
    found = await change_reads.list_requests(scope, "open", env, limit=MAX_LIMIT, cursor=None)
    return [cr for cr in found.items if any(about(change) for change in cr.changes)]


def unprefixed(exc: ApiError, rename: Callable[[str], str] | None = None) -> ApiError:
    """A change request's error about its one item (``changes[0].fallthrough``,
    ``changes[0].patch.included``) named as the form's field (``fallthrough``, ``included``), so
    the page shows it beside its input; ``rename`` then names the form's row an error is about
    (``forms.renumbered``)."""
    details = []
    for detail in exc.details:
        name = detail.field
        for prefix in PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
        details.append(FieldError(rename(name) if rename else name, detail.message))
    message = exc.message
    if exc.details and message.startswith(exc.details[0].field + ":"):  # "field: why", renamed
        message = details[0].field + message[len(exc.details[0].field) :]
    return ApiError(
        exc.status,
        message,
        code=exc.code,
        details=details,
        current_version=exc.current_version,
    )
