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

from typing import Any

import msgspec

from control_plane.access import Permission
from control_plane.db.ids import new_id
from control_plane.db.models import ChangeRequest, ChangeRequestReview
from control_plane.db.types import utcnow
from control_plane.domain import problems as base
from control_plane.domain.changes import schemas as s
from control_plane.domain.changes.checks import (
    bases_of,
    check_apply_at,
    check_changes,
    check_text,
    dry_run,
    refuse_own,
    refuse_unless_open,
    run_changes,
    summary,
)
from control_plane.domain.changes.items import (
    base_key,
    live_item,
    moved_fields,
    stored_item,
)
from control_plane.domain.changes.reads import (
    approvals_needed,
    approvers_of,
    find_request,
    get,
    request_out,
    reviews_of,
)
from control_plane.domain.common import Scope, to_json
from control_plane.domain.rows import take_given
from control_plane.errors import ApiError, FieldError


async def create(scope: Scope, body: s.ChangeRequestCreate) -> s.ChangeRequest:
    scope.require(Permission.EDIT)
    env = await scope.environment(body.environment)
    problems = base.Problems()
    check_text(problems, body.title, body.description)
    check_apply_at(problems, body.apply_at)
    await check_changes(scope, problems, body.changes)
    problems.raise_if_any()
    changes = [stored_item(c) for c in body.changes]
    await dry_run(scope, env, changes)
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
        bases=await bases_of(scope, env, changes),
        apply_at=body.apply_at,
        reason="",
    )
    scope.session.add(row)
    await scope.session.flush()
    out = await request_out(scope, row, env, [])
    scope.audit(
        "change_request.create",
        "change_request",
        row.id,
        after=summary(row, env, changes=to_json(out.changes), applyAt=to_json(row.apply_at)),
        environment=env.key,
    )
    return out


async def edit(scope: Scope, request_id: str, body: s.ChangeRequestPatch) -> s.ChangeRequest:
    """The author's edit: a new version, based on what is live now; earlier approvals and a
    rejection no longer count (a rejected request is open again)."""
    scope.require(Permission.EDIT)
    row, env = await find_request(scope, request_id)
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
    check_text(
        problems,
        None if body.title is msgspec.UNSET else body.title,
        None if body.description is msgspec.UNSET else body.description,
    )
    if body.apply_at is not msgspec.UNSET:
        check_apply_at(problems, body.apply_at)
    if body.changes is not msgspec.UNSET:
        await check_changes(scope, problems, body.changes)
    problems.raise_if_any()
    before = summary(row, env)
    changes = (
        row.changes if body.changes is msgspec.UNSET else [stored_item(c) for c in body.changes]
    )
    await dry_run(scope, env, changes)
    take_given(row, body, "title", "description", "apply_at")
    row.changes = changes
    row.bases = await bases_of(scope, env, changes)
    row.status = "open"
    row.reason = ""
    row.version += 1
    row.updated_at = utcnow()
    await scope.session.flush()
    reviews = (await reviews_of(scope, [row.id]))[row.id]
    out = await request_out(scope, row, env, reviews)
    scope.audit(
        "change_request.update",
        "change_request",
        row.id,
        before=before,
        after=summary(row, env, changes=to_json(out.changes), applyAt=to_json(row.apply_at)),
        environment=env.key,
    )
    return out


async def review(scope: Scope, request_id: str, decision: str, body: s.ReviewIn) -> s.ChangeRequest:
    """Approve or reject the current version, as someone other than its author."""
    scope.require(Permission.EDIT)
    row, env = await find_request(scope, request_id)
    refuse_own(scope, row, decision)
    refuse_unless_open(row, "approved" if decision == "approve" else "rejected")
    problems = base.Problems()
    if decision == "reject" and not body.comment.strip():
        problems.add("comment", "say why it is rejected")
    if len(body.comment) > 10_000:
        problems.add("comment", "at most 10000 characters")
    problems.raise_if_any()
    reviews = (await reviews_of(scope, [row.id]))[row.id]
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
    out = await request_out(scope, row, env, reviews)
    action = "change_request.approve" if decision == "approve" else "change_request.reject"
    scope.audit(
        action,
        "change_request",
        row.id,
        after=summary(
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
    row, env = await find_request(scope, request_id)
    await scope.expect_version(
        ChangeRequest, ChangeRequest.version, row.version, ChangeRequest.id == row.id
    )
    refuse_unless_open(row, "applied")
    reviews = (await reviews_of(scope, [row.id]))[row.id]
    approvers = approvers_of(row, reviews)
    required = await approvals_needed(scope, row, env)
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
        based = row.bases.get(base_key(item), {})
        try:
            version, live = await live_item(scope, env, item)
        except ApiError as exc:
            raise ApiError(
                409,
                f"change request {row.id} cannot be applied: {exc.message}",
                code="cannot_apply",
                details=[FieldError(base_key(item), exc.message)],
            ) from exc
        if version != based.get("version"):
            found = moved_fields(item, based.get("state", {}), live)
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
        await run_changes(scope, env, row.changes)
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
    out = await request_out(scope, row, env, reviews)
    scope.audit(
        "change_request.apply",
        "change_request",
        row.id,
        after=summary(row, env, appliedBy=scope.actor.label, changes=to_json(out.changes)),
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
    row, env = await find_request(scope, request_id)
    if scope.actor.identity != row.author_identity:
        scope.require(Permission.ADMIN)
    if row.status not in ("open", "rejected"):
        raise ApiError(409, f"change request {row.id} is {row.status}, so cannot be closed")
    before = summary(row, env)
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
        after=summary(row, env, reason=row.reason),
        environment=env.key,
    )
    return out


async def skip_due(scope: Scope, request_id: str, why: str) -> bool:
    """A request's ``applyAt`` passed and it could not be applied: it stays open without a time,
    with the reason (its author may set a new ``applyAt``, or someone applies it by hand)."""
    scope.require(Permission.EDIT)
    row, env = await find_request(scope, request_id)
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
        after=summary(row, env, reason=row.reason),
        environment=env.key,
    )
    return True
