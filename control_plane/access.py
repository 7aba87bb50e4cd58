"""Who may do what: the roles of people and management keys in a project, and the permissions
each holds. The one home of the rule; the domain services ask it (``Scope.require``), so the
API, the console, the CLI and the schedule runner are held to the same answer.

- viewer: reads everything except secrets (which nobody reads back: keys, tokens and webhook
  secrets are shown once, when made);
- editor: changes flags, segments, experiments, metrics, layers and schedules, and proposes
  and reviews change requests;
- admin: people, keys, webhooks, environments and their protection, and all an editor does;
- "may turn off" (on-call): a grant of its own, to a person or a key, whatever the role: turn a
  flag off at once in a protected environment (an admin holds it with the role).

A personal token acts with at most what it was made with and at most what its person holds
now (``of_token``): a token capped to viewer is a viewer, with no "may turn off" of its
person's unless it was made with it.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    VIEWER = "viewer"
    EDITOR = "editor"
    ADMIN = "admin"


class Permission(StrEnum):
    READ = "read"
    EDIT = "edit"
    ADMIN = "admin"
    TURN_OFF = "turn-off"


ROLES: tuple[Role, ...] = (Role.VIEWER, Role.EDITOR, Role.ADMIN)
"""From least to most: a role holds everything the ones before it hold."""
ROLE_NAMES: tuple[str, ...] = tuple(role.value for role in ROLES)
"""The roles by name, in the same order (what a form or a setting names)."""

_GRANTED: dict[Role, frozenset[Permission]] = {
    Role.VIEWER: frozenset({Permission.READ}),
    Role.EDITOR: frozenset({Permission.READ, Permission.EDIT}),
    Role.ADMIN: frozenset(
        {Permission.READ, Permission.EDIT, Permission.ADMIN, Permission.TURN_OFF}
    ),
}

_WHO_HOLDS: dict[Permission, str] = {
    Permission.READ: "any role",
    Permission.EDIT: "an editor or an admin",
    Permission.ADMIN: "an admin",
    Permission.TURN_OFF: "an admin, or a person or key granted 'may turn off'",
}


def holds(role: Role, may_turn_off: bool, permission: Permission) -> bool:
    if permission is Permission.TURN_OFF and may_turn_off:
        return True
    return permission in _GRANTED[role]


def lacking(role: Role, permission: Permission) -> str:
    """The 403's message: the permission lacked, who holds it, and the caller's role."""
    return (
        f"this needs the permission '{permission.value}' ({_WHO_HOLDS[permission]}); "
        f"you act as {'an' if role is Role.ADMIN else 'a'} {role.value}"
    )


def at_most(wanted: Role, ceiling: Role) -> Role:
    """``wanted``, lowered to ``ceiling`` (a personal token acts with its person's role or less)."""
    return min(wanted, ceiling, key=ROLES.index)


def of_token(
    role: Role, may_turn_off: bool, person_role: Role, person_may_turn_off: bool
) -> tuple[Role, bool]:
    """What a personal token acts with: exactly what it was made with (``role``,
    ``may_turn_off``) and its person holds now, both. "May turn off" is held by the grant or
    with the admin role, either side: a token made as an admin whose person is now an editor
    with the grant still turns off; one capped to viewer without the grant does not."""
    turns_off = holds(role, may_turn_off, Permission.TURN_OFF) and holds(
        person_role, person_may_turn_off, Permission.TURN_OFF
    )
    return at_most(role, person_role), turns_off


def parse_role(value: str) -> Role | None:
    try:
        return Role(value)
    except ValueError:
        return None
