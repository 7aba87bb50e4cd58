"""Protected environments: the one gate every direct write of what a protected environment
serves goes through (issue #34).

An environment whose ``required_approvals`` is above 0 is protected: a flag's settings, rules,
targets, prerequisites, rollout or toggle there, a schedule there, a segment that a flag
there uses, and a flag's own fields that every environment serves (its variations' values,
``bucketBy``, ``clientSide``, whether it is archived), change only by applying an approved change
request (``domain.changes``). The flag,
segment and schedule services call :func:`refuse_unapproved` after their permission check
(permission first, then protection: a viewer is told it lacks ``edit``, an editor or admin that
the environment needs a change request). The change requests' apply marks its unit of work
(``Scope.applying``), which this gate lets through. The kill switch is not gated here: turning a
flag off is the flags' ``toggle``'s emergency path, under the permission ``turn-off``.
Each handler of a write this gate guards documents its 409 with :data:`GATED_RESPONSES` (the
toggle with :data:`TOGGLE_RESPONSES`), so the OpenAPI document says it in one wording.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select

from control_plane.db.models import Environment
from control_plane.domain.common import Scope
from control_plane.errors import CONFLICT, FORBIDDEN, ApiError, FieldError, error_spec

APPROVAL_REQUIRED = "approval_required"
CHANGE_REQUESTS = "/api/v1/change-requests"

_GATED = (
    f"`{APPROVAL_REQUIRED}`: the change alters what a protected environment serves (its "
    "`requiredApprovals` is above 0; each detail `environment` names one), so it is refused "
    f"as a direct write, whatever the role: propose it as a change request (`POST "
    f"{CHANGE_REQUESTS}`), which applies it once approved. "
)
GATED_RESPONSES = {409: error_spec(_GATED + "Otherwise: " + CONFLICT)}
"""The 409 a write this gate guards documents (``responses=`` of its handler): one definition
for every such handler."""

TOGGLE_RESPONSES = {
    403: error_spec(
        "Turning a flag off needs the permission `turn-off` (an admin, or a person or key "
        'granted "may turn off"; elsewhere than a protected environment `edit` does too), '
        "turning it on `edit`. Otherwise: " + FORBIDDEN
    ),
    409: error_spec(
        f"`{APPROVAL_REQUIRED}`: turning a flag on in a protected environment (`requiredApprovals`"
        " above 0) needs a change request (`POST "
        f"{CHANGE_REQUESTS}`); turning it off is never gated. Otherwise: " + CONFLICT
    ),
}
"""The kill switch's answers: turning off is never gated, turning on is."""
TOGGLE = (
    '`{"enabled": false}` is the kill switch: it is never gated. In a protected environment it '
    'needs `turn-off` (an admin, or a person or key granted "may turn off"), applies at once '
    "and is audited, and sent to webhooks (`flag.toggled`), as an emergency: `after` is "
    '`{"enabled": false, "emergency": true}`. `{"enabled": true}` needs `edit`, and in a '
    f"protected environment a change request (409 `{APPROVAL_REQUIRED}`, `{CHANGE_REQUESTS}`)."
)
"""The toggle's description."""


def protected(env: Environment) -> bool:
    return env.required_approvals > 0


def refuse_unapproved(scope: Scope, env: Environment, what: str) -> None:
    """409 ``approval_required`` if ``env`` is protected and this unit of work is not applying
    an approved change request."""
    if not protected(env) or scope.applying is not None:
        return
    raise _refusal(what, [env])


async def refuse_unapproved_in(scope: Scope, environment_ids: Iterable[str], what: str) -> None:
    """As :func:`refuse_unapproved`, for a change that alters what several environments serve
    (a segment: every environment where a flag uses it)."""
    ids = sorted(set(environment_ids))
    if not ids or scope.applying is not None:
        return
    guarded = list(
        await scope.session.scalars(
            select(Environment)
            .where(Environment.id.in_(ids), Environment.required_approvals > 0)
            .order_by(Environment.key)
        )
    )
    if guarded:
        raise _refusal(what, guarded)


async def refuse_unapproved_anywhere(scope: Scope, what: str) -> None:
    """As :func:`refuse_unapproved`, for a change to a flag itself (its variations' values,
    ``bucketBy``, ``clientSide``, archiving it): a flag is in every environment of its project,
    so every protected one guards it."""
    await refuse_unapproved_in(scope, [env.id for env in await scope.environments()], what)


def _refusal(what: str, environments: list[Environment]) -> ApiError:
    names = ", ".join(
        f"{env.key!r} ({env.required_approvals} approval{'s' if env.required_approvals > 1 else ''})"
        for env in environments
    )
    return ApiError(
        409,
        f"{what}: environment {names} is protected, so the change needs approval: propose it "
        f"as a change request (POST {CHANGE_REQUESTS}); turning a flag off stays immediate for "
        "those who may turn off",
        code=APPROVAL_REQUIRED,
        details=[FieldError("environment", env.key) for env in environments],
    )
