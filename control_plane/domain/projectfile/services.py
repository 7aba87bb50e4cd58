"""Export, plan and apply a project document.

Apply is one unit of work (the request's transaction: all or nothing, published once per
environment after the commit); every write is a call of the owning domain's service (the many
flags and settings of a document through the flags' bulk writers, ``steps.Unit``), so it is
validated, audited and versioned as the API's own writes, and each audit entry says
``appliedFrom`` the file. In an environment that requires approval the changes to what it serves
are proposed as change requests instead (``domain.changes``), which the apply says. Plan runs the
same steps in a savepoint that is rolled back: what plan accepts, apply does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from control_plane.access import Permission
from control_plane.domain.changes import reads as change_reads
from control_plane.domain.changes import schemas as cr
from control_plane.domain.changes import services as changes
from control_plane.domain.changes.checks import MAX_CHANGES
from control_plane.domain.changes.schemas import ChangeIn
from control_plane.domain.common import Scope
from control_plane.domain.projectfile import schemas as s
from control_plane.domain.projectfile.checks import check
from control_plane.domain.projectfile.export import Live, read_live
from control_plane.domain.projectfile.planner import Planner, plan
from control_plane.domain.projectfile.steps import Phase, Unit
from control_plane.errors import ApiError, FieldError
from control_plane.publishing.change import Change

MOVED = "moved_since_plan"
PER_REQUEST = MAX_CHANGES


async def export_project(scope: Scope) -> s.ProjectDoc:
    return (await read_live(scope)).doc


@contextmanager
def named(where: str) -> Iterator[None]:
    """A service's refusal, its fields named by their path in the document."""
    try:
        yield
    except ApiError as exc:
        raise exc.at(where) from exc


async def _execute(scope: Scope, planner: Planner) -> None:
    ordered = sorted(planner.steps, key=lambda x: (x.phase, x.order))
    unit, phase = Unit(scope, (step.run for step in ordered)), None
    with unit.audits_kept():
        for step in ordered:
            if step.phase != phase:
                await _close(unit, step.phase)
                phase = step.phase
            with named(step.where):
                await step.run(unit)
        await _close(unit, None, last=not planner.proposals)


async def _close(unit: Unit, following: Phase | None, *, last: bool = False) -> None:
    """The end of a phase: what its bulk writers hold is flushed and published (the only bulk
    writers are the flags': a refusal there names the document's flags). ``last``: the end of
    the steps, with no change request to open after them."""
    with named("flags"):
        await unit.close(settings_next=following == Phase.SETTING, last=last)


async def _propose(scope: Scope, planner: Planner, file_name: str) -> list[s.OpenedRequest]:
    opened = []
    for env, items in sorted(planner.proposals.items()):
        for start in range(0, len(items), PER_REQUEST):
            chunk = items[start : start + PER_REQUEST]
            with named(f"environments ({env})"):
                made = await change_reads.open_with(scope, env, chunk)
                if made is None:
                    made = await changes.create(scope, _request(env, chunk, file_name))
                    opened.append(_opened(made, chunk, already=False))
                else:
                    opened.append(_opened(made, chunk, already=True))
    return opened


def _request(env: str, items: list[ChangeIn], file_name: str) -> cr.ChangeRequestCreate:
    return cr.ChangeRequestCreate(
        environment=env,
        title=f"Applied from {file_name}"[:200],
        description=f"Proposed by applying {file_name}: {env} requires approval.",
        changes=items,
    )


def _opened(made: cr.ChangeRequest, items: list[ChangeIn], *, already: bool) -> s.OpenedRequest:
    return s.OpenedRequest(
        id=made.id,
        already_open=already,
        environment=made.environment,
        flags=[i.flag for i in items if i.flag is not None],
        segments=[i.segment for i in items if i.segment is not None],
    )


async def _planned(
    scope: Scope, document: s.ProjectDoc, prune: bool, webhook_private: str
) -> tuple[Live, Planner]:
    scope.require(Permission.EDIT)
    live = await read_live(scope)
    check(document, live.doc, live.exposed)
    return live, plan(document, live, prune=prune, webhook_private=webhook_private)


async def plan_project(scope: Scope, body: s.PlanIn, webhook_private: str = "none") -> s.Plan:
    """What applying ``body.document`` would do; its steps are run and rolled back, so a
    document the services would refuse is refused here, named by its path. ``webhook_private``:
    the private addresses a webhook may reach (the instance's settings)."""
    _, planner = await _planned(scope, body.document, body.prune, webhook_private)
    saved = (scope.change, scope.if_match, scope.rehearsal)
    scope.change, scope.if_match, scope.rehearsal = Change(scope.project_id), None, True
    savepoint = await scope.session.begin_nested()
    try:
        await _execute(scope, planner)
        await _propose(scope, planner, "plan")
    finally:
        await savepoint.rollback()
        scope.change, scope.if_match, scope.rehearsal = saved
    scope.session.expire_all()
    return planner.plan()


def _refuse_moved(planned: dict[str, int], live: dict[str, int]) -> None:
    moved = [
        FieldError(key, f"version {planned[key]} when planned, now {live.get(key, 0)}")
        for key in sorted(planned)
        if live.get(key, 0) != planned[key]
    ]
    if moved:
        raise ApiError(
            409,
            f"{len(moved)} resource(s) changed since the plan ({moved[0].field} first): plan again",
            code=MOVED,
            details=moved,
        )


async def apply_project(scope: Scope, body: s.ApplyIn, webhook_private: str = "none") -> s.Applied:
    live, planner = await _planned(scope, body.document, body.prune, webhook_private)
    if body.versions is not None:
        _refuse_moved(body.versions, live.versions)
    scope.if_match = None
    scope.source = body.file_name
    await _execute(scope, planner)
    opened = await _propose(scope, planner, body.file_name)
    done = planner.plan()
    return s.Applied(
        plan=done,
        applied=any(c.action != "propose" for c in done.changes)
        or any(not r.already_open for r in opened),
        change_requests=opened,
        message=_message(done, opened),
    )


def _message(done: s.Plan, opened: list[s.OpenedRequest]) -> str:
    if not done.has_changes:
        return "nothing to change"
    written = sum(1 for c in done.changes if c.action != "propose")
    text = f"{written} change(s) applied"
    for request in opened:
        verb = "already open with" if request.already_open else "opened for"
        text += (
            f"; environment {request.environment} requires approval: change request "
            f"{request.id} {verb} {len(request.flags) + len(request.segments)} item(s)"
        )
    return text
