"""The rule of a personal token's permissions (``access.of_token``), over every combination of
what it was made with and what its person holds now: the token holds exactly what both hold."""

from __future__ import annotations

from itertools import product

import pytest

from control_plane.access import ROLES, Permission, Role, holds, of_token

COMBINATIONS = list(product(ROLES, (False, True), ROLES, (False, True)))


@pytest.mark.parametrize(("role", "may", "person_role", "person_may"), COMBINATIONS)
def test_a_token_holds_what_it_was_made_with_and_its_person_holds_now(
    role: Role, may: bool, person_role: Role, person_may: bool
) -> None:
    token_role, token_may = of_token(role, may, person_role, person_may)
    for permission in Permission:
        made_with = holds(role, may, permission)
        person_now = holds(person_role, person_may, permission)
        assert holds(token_role, token_may, permission) == (made_with and person_now), permission
    assert ROLES.index(token_role) <= min(ROLES.index(role), ROLES.index(person_role))
